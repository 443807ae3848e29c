"""A GEMM whose two warpgroups each own half of the C tile's columns (``T.ws``).

The whole block stages the A tile; inside ``with T.ws(g):`` warpgroup ``g`` stages its half
of the B tile and issues its own ``T.gemm`` (one warpgroup's wgmma on sm_90a, its four warps'
mma.sync elsewhere), then stores its half of C. The tile ops in a scope are planned over
that warpgroup's 128 threads; the barrier between its B copy and its gemm is a named
barrier of those threads.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul_ws_split_n(
    M, N, K, block_M=128, block_N=128, block_K=64, dtype="float16", accum_dtype="float"
):
    half_N = block_N // 2

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_left = T.alloc_shared((block_K, half_N), dtype)
            B_right = T.alloc_shared((block_K, half_N), dtype)
            C_left = T.alloc_fragment((block_M, half_N), accum_dtype)
            C_right = T.alloc_fragment((block_M, half_N), accum_dtype)

            with T.ws(0):
                T.clear(C_left)
            with T.ws(1):
                T.clear(C_right)

            for ko in T.serial(T.ceildiv(K, block_K)):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                with T.ws(0):
                    T.copy(B[ko * block_K, bx * block_N], B_left)
                    T.gemm(A_shared, B_left, C_left)
                with T.ws(1):
                    T.copy(B[ko * block_K, bx * block_N + half_N], B_right)
                    T.gemm(A_shared, B_right, C_right)

            with T.ws(0):
                T.copy(C_left, C[by * block_M, bx * block_N])
            with T.ws(1):
                T.copy(C_right, C[by * block_M, bx * block_N + half_N])

    return main


def main(M=200, N=300, K=136, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kernel = matmul_ws_split_n(M, N, K)
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = kernel(a, b)
    ref = (a.double() @ b.double()).to(c.dtype)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)
    print(f"warp-specialized split-N gemm {M}x{N}x{K} on {device}: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=200)
    parser.add_argument("--N", type=int, default=300)
    parser.add_argument("--K", type=int, default=136)
    args = parser.parse_args()
    main(args.M, args.N, args.K)
