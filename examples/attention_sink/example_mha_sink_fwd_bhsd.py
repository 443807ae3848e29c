"""Causal FlashAttention forward with attention sinks (gpt-oss style), bhsd layout.

Each head has a learned sink logit ``Sinks[h]``: an extra "key" every query attends to
that carries no value, so it only enlarges the softmax denominator:
``O = sum_k exp(s_k - m) V_k / (sum_k exp(s_k - m) + exp(sink - m))``. The online-softmax
loop is the plain FlashAttention one; the sink joins the denominator once, at the end.
Optional sliding window: query ``q`` sees keys ``q - window_size < k <= q``. The queries are
the LAST ``seq_q`` of the ``seq_kv`` positions (decode/prefill with a KV prefix).
"""

import argparse

import torch

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[3])
def flashattn(batch, heads, seq_q, seq_kv, dim, window_size=None, sm_scale=None, block_M=64,
              block_N=64, num_stages=1, threads=128, dtype="float16"):  # fmt: skip
    """Kernel factory: ``kernel(Q, K, V, Sinks) -> O`` with Q/O ``(batch, heads, seq_q, dim)``,
    K/V ``(batch, heads, seq_kv, dim)``, Sinks ``(heads,)``."""
    if seq_kv < seq_q:
        raise ValueError(f"flashattn: seq_kv ({seq_kv}) must be >= seq_q ({seq_q})")
    if window_size is not None and window_size % block_N != 0:
        raise ValueError(f"flashattn: window_size ({window_size}) must be a multiple of "
                         f"block_N ({block_N})")  # fmt: skip
    scale = (sm_scale if sm_scale is not None else dim**-0.5) * LOG2E
    q_shape = (batch, heads, seq_q, dim)
    kv_shape = (batch, heads, seq_kv, dim)
    accum_dtype = "float"
    past_len = seq_kv - seq_q

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
        Sinks: T.Tensor((heads,), dtype),
    ):
        with T.Kernel(T.ceildiv(seq_q, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)
            acc_s = T.alloc_fragment((block_M, block_N), accum_dtype)
            acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum_dtype)
            scores_max = T.alloc_fragment((block_M,), accum_dtype)
            scores_max_prev = T.alloc_fragment((block_M,), accum_dtype)
            scores_scale = T.alloc_fragment((block_M,), accum_dtype)
            scores_sum = T.alloc_fragment((block_M,), accum_dtype)
            logsum = T.alloc_fragment((block_M,), accum_dtype)
            sinks = T.alloc_fragment((block_M,), accum_dtype)

            T.copy(Q[bz, by, bx * block_M, 0], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))
            for i in T.Parallel(block_M):
                sinks[i] = Sinks[by]

            # causal: keys up to this tile's last query; a window also skips the old blocks
            end = T.min(
                T.ceildiv(seq_kv, block_N), T.ceildiv((bx + 1) * block_M + past_len, block_N)
            )
            start = (
                T.max(0, (bx * block_M + past_len - window_size) // block_N)
                if window_size is not None
                else 0
            )
            for k in T.Pipelined(start, end, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N, 0], K_shared)
                for i, j in T.Parallel(block_M, block_N):
                    q_idx = bx * block_M + i + past_len
                    k_idx = k * block_N + j
                    if window_size is not None:
                        acc_s[i, j] = T.if_then_else(
                            q_idx >= k_idx and q_idx < k_idx + window_size,
                            0,
                            -T.infinity(accum_dtype),
                        )
                    else:
                        acc_s[i, j] = T.if_then_else(q_idx >= k_idx, 0, -T.infinity(accum_dtype))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                # a row whose keys are all masked so far keeps max -inf: use 0 so that
                # exp2(-inf - max) is 0 instead of NaN (FlashAttention3's Check_inf)
                for i in T.Parallel(block_M):
                    scores_max[i] = T.if_then_else(
                        scores_max[i] == -T.infinity(accum_dtype), 0, scores_max[i]
                    )
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, by, k * block_N, 0], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            # the sink: one more term in the denominator, relative to the same running max
            for i in T.Parallel(block_M):
                logsum[i] += T.exp2(sinks[i] * LOG2E - scores_max[i] * scale)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M, 0])

    return main


def ref_program(Q, K, V, sinks, window_size=None, sm_scale=None):
    """Attention with sinks in float64: softmax over ``[scores, sink]``, the sink's column
    dropped before multiplying by V."""
    q, k, v = Q.double(), K.double(), V.double()
    seq_q, seq_kv, dim = q.shape[2], k.shape[2], q.shape[3]
    scale = sm_scale if sm_scale is not None else dim**-0.5
    logits = torch.einsum("bhqd,bhkd->bhqk", q, k) * scale
    pos_q = torch.arange(seq_q, device=q.device)[:, None] + (seq_kv - seq_q)
    pos_k = torch.arange(seq_kv, device=q.device)[None, :]
    masked = pos_k > pos_q
    if window_size is not None:
        masked |= pos_k <= pos_q - window_size
    logits = logits.masked_fill(masked, float("-inf"))
    sink = sinks.double().view(1, -1, 1, 1).expand(*logits.shape[:3], 1)
    probs = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    return torch.einsum("bhqk,bhkd->bhqd", probs, v)


def main(batch=1, heads=2, seq_q=128, seq_kv=128, dim=64, window_size=None, block_M=64,
         block_N=64, device=None):  # fmt: skip
    """Run the sink attention on random inputs and check it against ``ref_program``."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kernel = flashattn(batch, heads, seq_q, seq_kv, dim, window_size, block_M=block_M,
                       block_N=block_N)  # fmt: skip
    q = torch.randn(batch, heads, seq_q, dim, device=device, dtype=torch.float16)
    k, v = (torch.randn(batch, heads, seq_kv, dim, device=device, dtype=torch.float16)
            for _ in range(2))  # fmt: skip
    sinks = torch.randn(heads, device=device, dtype=torch.float16)
    out = kernel(q, k, v, sinks)
    ref = ref_program(q, k, v, sinks, window_size)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(f"attention sink fwd b={batch} h={heads} sq={seq_q} skv={seq_kv} d={dim} "
          f"window={window_size} on {device}: matches torch")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_q", type=int, default=128)
    parser.add_argument("--seq_kv", type=int, default=128)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--window_size", type=int, default=None)
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_q, args.seq_kv, args.dim, args.window_size)
