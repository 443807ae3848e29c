"""FlashAttention forward, (batch, heads, seq, dim) layout, as upstream TileLang's example.

The queries are the last ``seq_q`` of ``seq_kv`` positions (a KV prefix of ``seq_kv - seq_q``
tokens, as in chunked prefill), so the causal mask is aligned on the right. Sequence lengths
need not be tile multiples: the keys past ``seq_kv`` in the last K/V block are masked, the
query rows past ``seq_q`` are computed but not stored.

    python examples/flash_attention/example_mha_fwd_bhsd.py --seq_q 200 --seq_kv 300 --is_causal
"""

import argparse
import itertools

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def get_configs():
    """The configs ``--tune`` tries (block_M, block_N, num_stages, threads)."""
    space = dict(block_M=[64, 128], block_N=[64, 128], num_stages=[1, 2], threads=[128, 256])
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def default_config(dim):
    """Block sizes by head dim. On sm_90a the loop is warp-specialized (a producer warpgroup
    issuing TMA loads, the block's threads consuming): 128 x 128 tiles on two consumer
    warpgroups; at head dim 256 the K/V stages of 128 x 256 would not fit in shared memory
    next to Q, so 128 x 64."""
    if dim <= 128:
        return dict(block_M=128, block_N=128, num_stages=2, threads=256)
    return dict(block_M=128, block_N=64, num_stages=2, threads=256)


@tilelang.jit(out_idx=[3])
def flashattn(batch, heads, seq_q, seq_kv, dim, is_causal, block_M=64, block_N=64, num_stages=1,
              threads=128):  # fmt: skip
    """``kernel(Q, K, V) -> O``; Q/O ``(batch, heads, seq_q, dim)``, K/V ``(batch, heads,
    seq_kv, dim)``, float16."""
    if seq_kv < seq_q:
        raise ValueError(f"flashattn: seq_kv ({seq_kv}) must be >= seq_q ({seq_q})")
    scale = (1.0 / dim) ** 0.5 * LOG2E
    q_shape = [batch, heads, seq_q, dim]
    kv_shape = [batch, heads, seq_kv, dim]
    dtype = "float16"
    accum_dtype = "float"
    past_len = seq_kv - seq_q
    kv_tail = seq_kv % block_N != 0  # the last K/V block reaches past seq_kv

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_q, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, by, bx * block_M : (bx + 1) * block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            # causal: no K/V block past this query block's last position
            loop_range = (
                T.min(T.ceildiv(seq_kv, block_N), T.ceildiv((bx + 1) * block_M + past_len, block_N))
                if is_causal
                else T.ceildiv(seq_kv, block_N)
            )
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_shared)
                if is_causal:
                    # keys past seq_kv lie past every stored query too: one test covers both
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            bx * block_M + i + past_len >= k * block_N + j,
                            0,
                            -T.infinity(accum_dtype),
                        )
                elif kv_tail:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            k * block_N + j < seq_kv, 0, -T.infinity(accum_dtype)
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                if is_causal:
                    # Check_inf: a row with every key so far masked keeps max -inf; take 0
                    # so that exp2(-inf - max) is 0 rather than NaN
                    for i in T.Parallel(block_M):
                        scores_max[i] = T.if_then_else(
                            scores_max[i] == -T.infinity(accum_dtype), 0, scores_max[i]
                        )
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, by, k * block_N : (k + 1) * block_N, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, by, bx * block_M : (bx + 1) * block_M, :])

    return main


def ref_program(Q, K, V, is_causal):
    """Attention in float64, bhsd; causal aligned on the right (query i is position
    ``i + seq_kv - seq_q``)."""
    q, k, v = Q.double(), K.double(), V.double()
    seq_q, seq_kv = q.shape[2], k.shape[2]
    mask = None
    if is_causal:
        mask = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=q.device).tril(seq_kv - seq_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def main(batch=1, heads=1, seq_q=256, seq_kv=256, dim=64, is_causal=False, tune=False,
         device=None, **config):  # fmt: skip
    """Check the kernel against ``ref_program`` on random inputs (``config``: block sizes,
    default ``default_config(dim)`` on CUDA, 64x64/128t on the CPU); on CUDA also time it
    against torch SDPA. ``tune``: pick the config with the autotuner (CUDA)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q = torch.randn(batch, heads, seq_q, dim, device=device, dtype=torch.float16)
    k, v = (torch.randn(batch, heads, seq_kv, dim, device=device, dtype=torch.float16)
            for _ in range(2))  # fmt: skip
    if tune:
        tuned = tilelang.autotune(configs=get_configs(), warmup=10, rep=20)(flashattn)
        kernel = tuned(batch, heads, seq_q, seq_kv, dim, is_causal)
        print(f"best config: {kernel.config}, {kernel.latency:.3f} ms")
    else:
        if not config:
            config = default_config(dim) if device == "cuda" else {}
        kernel = flashattn(batch, heads, seq_q, seq_kv, dim, is_causal, **config)
    out = kernel(q, k, v)
    torch.testing.assert_close(out.double(), ref_program(q, k, v, is_causal), rtol=1e-2, atol=1e-2)
    print(f"flash attention fwd bhsd b={batch} h={heads} sq={seq_q} skv={seq_kv} d={dim} "
          f"causal={is_causal} on {device}: matches")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        flops = 4.0 * batch * heads * seq_q * seq_kv * dim * (0.5 if is_causal else 1.0)
        t = bench(lambda: kernel(q, k, v), warmup=25, rep=100, device=device)
        t_ref = bench(
            lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=is_causal and seq_q == seq_kv
            ),
            warmup=25,
            rep=100,
            device=device,
        )
        print(f"tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s), "
              f"torch SDPA {t_ref:.3f} ms ({flops / t_ref * 1e-9:.1f} TFLOP/s)")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1, help="batch size")
    parser.add_argument("--heads", type=int, default=1, help="heads")
    parser.add_argument("--seq_q", type=int, default=256, help="query sequence length")
    parser.add_argument("--seq_kv", type=int, default=256, help="key/value sequence length")
    parser.add_argument("--dim", type=int, default=64, help="dim")
    parser.add_argument("--is_causal", action="store_true", help="causal", default=False)
    parser.add_argument("--tune", action="store_true", help="tune configs")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_q, args.seq_kv, args.dim, args.is_causal, args.tune)
