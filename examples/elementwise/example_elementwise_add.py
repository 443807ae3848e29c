"""Elementwise add with ``T.Parallel``, as upstream TileLang's example (tails handled)."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def elementwise_add(
    M, N, block_M=32, block_N=32, in_dtype="float32", out_dtype="float32", threads=128
):
    @T.prim_func
    def elem_add(
        A: T.Tensor((M, N), in_dtype),
        B: T.Tensor((M, N), in_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_N), in_dtype)
            B_shared = T.alloc_shared((block_M, block_N), in_dtype)
            C_local = T.alloc_fragment((block_M, block_N), out_dtype)
            C_shared = T.alloc_shared((block_M, block_N), out_dtype)

            T.copy(A[by * block_M, bx * block_N], A_shared)
            T.copy(B[by * block_M, bx * block_N], B_shared)
            for local_y, local_x in T.Parallel(block_M, block_N):
                C_local[local_y, local_x] = A_shared[local_y, local_x] + B_shared[local_y, local_x]
            T.copy(C_local, C_shared)
            T.copy(C_shared, C[by * block_M, bx * block_N])

    return elem_add


@tilelang.jit(out_idx=[-1])
def elementwise_add_direct(M, N, block_M=32, block_N=32, dtype="float32", threads=128):
    """The same sum written straight on global memory: out-of-range lanes are skipped."""

    @T.prim_func
    def elem_add(
        A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                y, x = by * block_M + i, bx * block_N + j
                C[y, x] = A[y, x] + B[y, x]

    return elem_add


def main(M=1000, N=1000, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(M, N, device=device)
    b = torch.randn(M, N, device=device)
    for factory in (elementwise_add, elementwise_add_direct):
        c = factory(M, N)(a, b)
        torch.testing.assert_close(c, a + b)
    print(f"elementwise add {M}x{N} on {device}: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    main(args.m, args.n)
