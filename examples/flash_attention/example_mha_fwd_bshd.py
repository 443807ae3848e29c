"""FlashAttention forward (batch, seq, heads, dim layout), written as upstream TileLang's example.

Online softmax with exp2, ``T.Pipelined`` over K/V blocks, optional causal mask. ``seq_len``
need not be a tile multiple (keys past it are masked, query rows past it are not stored).
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[3])
def flashattn(
    batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1, threads=128
):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e)
    shape = [batch, seq_len, heads, dim]
    dtype = "float16"
    accum_dtype = "float"

    @T.macro
    def MMA0(
        K: T.Tensor(shape, dtype),
        Q_shared: T.SharedBuffer([block_M, dim], dtype),
        K_shared: T.SharedBuffer([block_N, dim], dtype),
        acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
        k: T.int32,
        bx: T.int32,
        by: T.int32,
        bz: T.int32,
    ):
        T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_shared)
        if is_causal:
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(
                    bx * block_M + i >= k * block_N + j, 0, -T.infinity(acc_s.dtype)
                )
        elif seq_len % block_N:  # the last K block reaches past seq_len: mask those keys
            for i, j in T.Parallel(block_M, block_N):
                acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0, -T.infinity(acc_s.dtype))
        else:
            T.clear(acc_s)
        T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def MMA1(
        V: T.Tensor(shape, dtype),
        V_shared: T.SharedBuffer([block_M, dim], dtype),
        acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
        acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
        k: T.int32,
        by: T.int32,
        bz: T.int32,
    ):
        T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_shared)
        T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

    @T.macro
    def Softmax(
        acc_s: T.FragmentBuffer([block_M, block_N], accum_dtype),
        acc_s_cast: T.FragmentBuffer([block_M, block_N], dtype),
        scores_max: T.FragmentBuffer([block_M], accum_dtype),
        scores_max_prev: T.FragmentBuffer([block_M], accum_dtype),
        scores_scale: T.FragmentBuffer([block_M], accum_dtype),
        scores_sum: T.FragmentBuffer([block_M], accum_dtype),
        logsum: T.FragmentBuffer([block_M], accum_dtype),
    ):
        T.copy(scores_max, scores_max_prev)
        T.fill(scores_max, -T.infinity(accum_dtype))
        T.reduce_max(acc_s, scores_max, dim=1, clear=False)
        # Check_inf (FlashAttention3's name): with the causal mask and block_M > block_N, a row
        # can have every key of a K block masked; its max is then -inf and exp2(-inf - -inf)
        # would be NaN. Such a row's max is taken as 0 instead: its masked scores become
        # exp2(-inf) = 0, and the rescale of what came before is exp2(prev - 0), also 0 while
        # prev is still -inf. A Python `if` on a Python value: non-causal kernels have no such
        # step at all.
        if is_causal:
            for i in T.Parallel(block_M):
                scores_max[i] = T.if_then_else(
                    scores_max[i] == -T.infinity(accum_dtype), 0, scores_max[i]
                )
        for i in T.Parallel(block_M):
            scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
        for i, j in T.Parallel(block_M, block_N):
            # Instead of computing exp(x - max), we compute exp2(x * log_2(e) -
            # max * log_2(e)) This allows the compiler to use the ffma
            # instruction instead of fadd and fmul separately.
            acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
        T.reduce_sum(acc_s, scores_sum, dim=1)
        for i in T.Parallel(block_M):
            logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
        T.copy(acc_s, acc_s_cast)

    @T.macro
    def Rescale(
        acc_o: T.FragmentBuffer([block_M, dim], accum_dtype),
        scores_scale: T.FragmentBuffer([block_M], accum_dtype),
    ):
        for i, j in T.Parallel(block_M, dim):
            acc_o[i, j] *= scores_scale[i]

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
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

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
            )

            # the loop body's statements: K copy, mask/clear + Q @ K^T, the softmax (one
            # statement more with the causal Check_inf step), rescale, V copy, P @ V
            soft = list(range(3, 12 if is_causal else 11))
            after = soft[-1] + 1
            for k in T.Pipelined(
                loop_range,
                num_stages=num_stages,
                order=[-1, 0, 3, 1, -1, 2],
                stage=[-1, 0, 0, 1, -1, 1],
                group=[[0], [1, 2], soft, [after], [after + 1], [after + 2]],
            ):
                MMA0(K, Q_shared, K_shared, acc_s, k, bx, by, bz)
                Softmax(
                    acc_s, acc_s_cast, scores_max, scores_max_prev, scores_scale, scores_sum, logsum
                )
                Rescale(acc_o, scores_scale)
                MMA1(V, V_shared, acc_s_cast, acc_o, k, by, bz)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])

    return main


def ref_program(Q, K, V, is_causal):
    """Attention in float64 (bshd layout)."""
    q, k, v = (x.double().transpose(1, 2) for x in (Q, K, V))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    return out.transpose(1, 2)


def main(batch=1, heads=2, seq_len=128, dim=64, is_causal=False, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kernel = flashattn(batch, heads, seq_len, dim, is_causal)
    q, k, v = (
        torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float16)
        for _ in range(3)
    )
    out = kernel(q, k, v)
    ref = ref_program(q, k, v, is_causal)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(
        f"flash attention fwd b={batch} h={heads} s={seq_len} d={dim} causal={is_causal} on {device}: matches"
    )
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--is_causal", action="store_true")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.is_causal)
