"""Variable-length grouped-query attention forward, as upstream TileLang's example.

The sequences of a batch are packed one after another (no padding): Q is ``(total_q, heads,
dim)``, K/V ``(total_k, heads // groups, dim)``, and ``cu_seqlens_q`` / ``cu_seqlens_k``
(``batch + 1`` int32 prefix sums) say where each sequence starts. The grid covers
``max_seqlen_q`` (a run-time scalar) per sequence; a block past its sequence's end does no
work. Keys past the sequence are masked (they belong to the next sequence); query rows past it
are not stored. Causal is aligned on the right, as flash_attn's ``flash_attn_varlen_func``;
a query that sees no key (more queries than keys) gets zeros.

    python examples/flash_attention/example_gqa_fwd_varlen.py --batch 4 --q_seqlen 700 --is_causal
"""

import argparse

import torch
from varlen_utils import make_varlen_inputs, random_seqlens, ref_program_varlen

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def default_config(dim):
    """Block sizes by head dim (``acc_o``, block_M x dim floats, lives in registers). The
    loads depend on ``cu_seqlens``, so the loop is not warp-specialized: cp.async stages."""
    if dim <= 128:
        return dict(block_M=128, block_N=128, num_stages=2, threads=256)
    return dict(block_M=128, block_N=64, num_stages=2, threads=256)


def varlen_program(batch_size, groups, UQ, UKV, heads, dim, is_causal, block_M, block_N,
                   num_stages, threads):  # fmt: skip
    """The kernel program (shared by this example and ``example_mha_fwd_varlen.py``)."""
    if groups < 1 or heads % groups:
        raise ValueError(f"flashattn: heads ({heads}) must be a multiple of groups ({groups})")
    scale = (1.0 / dim) ** 0.5 * LOG2E
    head_kv = heads // groups
    q_shape = [UQ, heads, dim]
    kv_shape = [UKV, head_kv, dim]
    dtype = "float16"
    accum_dtype = "float"
    neg_inf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(
        Q_unpad: T.Tensor(q_shape, dtype),
        K_unpad: T.Tensor(kv_shape, dtype),
        V_unpad: T.Tensor(kv_shape, dtype),
        cu_seqlens_q: T.Tensor([batch_size + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch_size + 1], "int32"),
        max_seqlen_q: T.int32,
        Output_unpad: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(max_seqlen_q, block_M), heads, batch_size, threads=threads) as (
            bx,
            by,
            bz,
        ):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            q_start = cu_seqlens_q[bz]
            kv_start = cu_seqlens_k[bz]
            q_len = cu_seqlens_q[bz + 1] - q_start
            kv_len = cu_seqlens_k[bz + 1] - kv_start
            offset = kv_len - q_len  # causal: query i sees keys <= i + offset
            kv_head = by // groups

            # rows past q_len read the next sequence's queries: computed, never stored
            T.copy(Q_unpad[q_start + bx * block_M : q_start + (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, neg_inf)

            kv_blocks = (
                T.max(
                    0,
                    T.min(
                        T.ceildiv(kv_len, block_N), T.ceildiv(offset + (bx + 1) * block_M, block_N)
                    ),
                )  # fmt: skip
                if is_causal
                else T.ceildiv(kv_len, block_N)
            )
            loop_range = T.if_then_else(bx * block_M < q_len, kv_blocks, 0)
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(
                    K_unpad[kv_start + k * block_N : kv_start + (k + 1) * block_N, kv_head, :],
                    K_shared,
                )
                for i, j in T.Parallel(block_M, block_N):
                    if is_causal:
                        acc_s[i, j] = T.if_then_else(
                            k * block_N + j < kv_len
                            and k * block_N + j <= bx * block_M + i + offset,
                            0,
                            neg_inf,
                        )
                    else:
                        acc_s[i, j] = T.if_then_else(k * block_N + j < kv_len, 0, neg_inf)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                # Check_inf: a row with every key so far masked keeps max -inf; take 0 so that
                # exp2(-inf - max) is 0 rather than NaN
                for i in T.Parallel(block_M):
                    scores_max[i] = T.if_then_else(scores_max[i] == neg_inf, 0, scores_max[i])
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
                T.copy(
                    V_unpad[kv_start + k * block_N : kv_start + (k + 1) * block_N, kv_head, :],
                    V_shared,
                )
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            # a query that saw no key (logsum 0) gets zeros
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            T.copy(acc_o, O_shared)
            for i, d in T.Parallel(block_M, dim):
                if bx * block_M + i < q_len:
                    Output_unpad[q_start + bx * block_M + i, by, d] = O_shared[i, d]

    return main


@tilelang.jit(out_idx=[6])
def flashattn(batch_size, groups, UQ, UKV, heads, dim, is_causal, block_M=64, block_N=64,
              num_stages=1, threads=128):  # fmt: skip
    """``kernel(Q_unpad, K_unpad, V_unpad, cu_seqlens_q, cu_seqlens_k, max_seqlen_q) -> O``;
    ``UQ``/``UKV``: total (packed) query/key tokens, float16."""
    return varlen_program(batch_size, groups, UQ, UKV, heads, dim, is_causal, block_M, block_N,
                          num_stages, threads)  # fmt: skip


def main(batch=1, heads=64, q_seqlen=2048, k_seqlen=2048, dim=128, groups=16, is_causal=False,
         device=None, seed=0, **config):  # fmt: skip
    """Random lengths up to ``q_seqlen`` / ``k_seqlen`` per sequence, checked against the
    per-sequence float64 reference (``config``: block sizes, default ``default_config(dim)``
    on CUDA, 64x64/128t on the CPU); on CUDA also timed."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    lens_q = random_seqlens(batch, q_seqlen, gen, min_seqlen=max(1, q_seqlen - 64))
    lens_k = random_seqlens(batch, k_seqlen, gen, min_seqlen=max(1, k_seqlen - 64))
    q, k, v, cu_q, cu_k, max_q = make_varlen_inputs(
        lens_q, lens_k, heads, heads // groups, dim, device
    )
    if not config:
        config = default_config(dim) if device == "cuda" else {}
    kernel = flashattn(batch, groups, q.shape[0], k.shape[0], heads, dim, is_causal, **config)
    out = kernel(q, k, v, cu_q, cu_k, max_q)
    ref = ref_program_varlen(q, k, v, cu_q, cu_k, is_causal, groups)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(f"gqa fwd varlen b={batch} h={heads} groups={groups} lens_q={lens_q} lens_k={lens_k} "
          f"d={dim} causal={is_causal} on {device}: matches")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        pairs = sum(a * b for a, b in zip(lens_q, lens_k))
        flops = 4.0 * heads * pairs * dim * (0.5 if is_causal else 1.0)
        t = bench(lambda: kernel(q, k, v, cu_q, cu_k, max_q), warmup=25, rep=100, device=device)
        print(f"tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s)")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8, help="batch size")
    parser.add_argument("--heads", type=int, default=64, help="query heads")
    parser.add_argument("--groups", type=int, default=16, help="groups")
    parser.add_argument("--q_seqlen", type=int, default=2048, help="query sequence length")
    parser.add_argument("--k_seqlen", type=int, default=2048, help="key/value sequence length")
    parser.add_argument("--dim", type=int, default=128, help="head dim")
    parser.add_argument("--is_causal", action="store_true", help="causal attention")
    args = parser.parse_args()
    main(args.batch, args.heads, args.q_seqlen, args.k_seqlen, args.dim, args.groups,
         args.is_causal)  # fmt: skip
