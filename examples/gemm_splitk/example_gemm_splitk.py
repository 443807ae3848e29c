"""Split-K GEMM: the K loop is divided over ``split_k`` blocks (the grid's third axis), each
adds its partial product into C with ``T.atomic_add``; C must start at zero."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit
def matmul_splitk(M, N, K, block_M=64, block_N=64, block_K=32, split_k=4, threads=128):
    """``C += A @ B`` in float32 from fp16 inputs, K split into ``split_k`` slices."""
    dtype, accum = "float16", "float32"
    # each slice takes whole K tiles: tiles past K (in the last slices) load as zeros
    tiles_per_split = T.ceildiv(T.ceildiv(K, block_K), split_k)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k, threads=threads) as (
            bx,
            by,
            bz,
        ):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            T.clear(C_local)
            for ko in T.Pipelined(tiles_per_split, num_stages=2):
                k = (bz * tiles_per_split + ko) * block_K
                T.copy(A[by * block_M, k], A_shared)
                T.copy(B[k, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                if by * block_M + i < M and bx * block_N + j < N:
                    T.atomic_add(C[by * block_M + i, bx * block_N + j], C_local[i, j])

    return main


def main(M=256, N=256, K=1024, split_k=4, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = torch.zeros(M, N, device=device, dtype=torch.float32)
    matmul_splitk(M, N, K, split_k=split_k)(a, b, c)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-2)
    print(f"gemm split-k={split_k} {M}x{N}x{K} on {device}: matches torch")
    return c


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--split-k", type=int, default=4)
    args = parser.parse_args()
    main(args.m, args.n, args.k, args.split_k)
