"""Row log-sum-exp of ``Q @ K^T``, the key range split between two warpgroups.

``LSE[i] = log(sum_j exp(S[i, j]))`` with ``S = Q @ K^T`` (the softmax normaliser of
attention scores). Warpgroup ``g`` (``if tx < 128:`` / ``else:``) takes keys
``[g * half, (g + 1) * half)`` of the block: its own ``T.gemm`` gives its half of ``S``,
then ``T.reduce_max`` and ``T.reduce_sum`` give its rows' maximum ``m_g`` and
``l_g = sum exp(S - m_g)``, planned over its 128 threads (the reductions' cross-warp
exchange runs among those threads only). The whole block then merges the two halves:
``LSE = m + log(l_0 exp(m_0 - m) + l_1 exp(m_1 - m))`` with ``m = max(m_0, m_1)``.
Keys past ``N`` are masked to ``-inf``.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def row_logsumexp(M, N, D, block_M=64, block_N=128, dtype="float16", accum_dtype="float"):
    half = block_N // 2
    ninf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(
        Q: T.Tensor((M, D), dtype),
        Kt: T.Tensor((N, D), dtype),
        LSE: T.Tensor((M,), accum_dtype),
    ):
        with T.Kernel(T.ceildiv(M, block_M), threads=256) as bx:
            tx = T.get_thread_binding()
            Q_shared = T.alloc_shared((block_M, D), dtype)
            K_shared = T.alloc_shared((2, half, D), dtype)
            S_0 = T.alloc_fragment((block_M, half), accum_dtype)
            S_1 = T.alloc_fragment((block_M, half), accum_dtype)
            max_0 = T.alloc_fragment((block_M,), accum_dtype)
            max_1 = T.alloc_fragment((block_M,), accum_dtype)
            sum_0 = T.alloc_fragment((block_M,), accum_dtype)
            sum_1 = T.alloc_fragment((block_M,), accum_dtype)
            stats = T.alloc_shared((2, 2, block_M), accum_dtype)  # (warpgroup, max/sum, row)
            out = T.alloc_fragment((block_M,), accum_dtype)

            T.copy(Q[bx * block_M, 0], Q_shared)
            for blk in T.serial(T.ceildiv(N, block_N)):

                @T.macro
                def key_half(g, s, m, l):
                    T.copy(Kt[blk * block_N + g * half, 0], K_shared[g, :, :])
                    T.gemm(Q_shared, K_shared[g, :, :], s, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(block_M, half):
                        s[i, j] = T.if_then_else(blk * block_N + g * half + j < N, s[i, j], ninf)
                    T.reduce_max(s, m, dim=1)
                    for i in T.Parallel(block_M):  # rows of masked keys only: keep exp finite
                        m[i] = T.max(m[i], stats[g, 0, i])
                    for i, j in T.Parallel(block_M, half):
                        s[i, j] = T.exp(s[i, j] - m[i])
                    T.reduce_sum(s, l, dim=1)
                    for i in T.Parallel(block_M):  # running (max, sum) over the key blocks
                        stats[g, 1, i] = stats[g, 1, i] * T.exp(stats[g, 0, i] - m[i]) + l[i]
                        stats[g, 0, i] = m[i]

                if blk == 0:
                    T.fill(stats[:, 0, :], -1e30)
                    T.fill(stats[:, 1, :], 0.0)
                if tx < 128:
                    key_half(0, S_0, max_0, sum_0)
                else:
                    key_half(1, S_1, max_1, sum_1)

            for i in T.Parallel(block_M):
                m0, m1 = stats[0, 0, i], stats[1, 0, i]
                m = T.max(m0, m1)
                out[i] = m + T.log(stats[0, 1, i] * T.exp(m0 - m) + stats[1, 1, i] * T.exp(m1 - m))
            T.copy(out, LSE[bx * block_M])

    return main


def main(M=200, N=300, D=64, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kernel = row_logsumexp(M, N, D)
    q = torch.randn(M, D, device=device, dtype=torch.float16)
    k = torch.randn(N, D, device=device, dtype=torch.float16)
    lse = kernel(q, k)
    ref = torch.logsumexp(q.double() @ k.double().T, dim=1)
    torch.testing.assert_close(lse.double(), ref, rtol=1e-4, atol=1e-3)
    print(f"row log-sum-exp {M}x{N} (D={D}) on {device}: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=200)
    parser.add_argument("--N", type=int, default=300)
    parser.add_argument("--D", type=int, default=64)
    args = parser.parse_args()
    main(args.M, args.N, args.D)
