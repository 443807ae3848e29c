"""The README GEMM as a program factory, shared by the sm_90a tests (TMA stores, clusters)."""

from __future__ import annotations

import tilelang.language as T


def readme_gemm(
    M, N, K, bM=128, bN=128, bK=64, threads=128, stages=3, dtype="float16", out=None,
    swizzle=0, cluster=None, x_walks="n",
):  # fmt: skip
    """The README GEMM: a float32 fragment accumulator, C of type ``out`` (default: dtype).
    blockIdx.x walks N (the blocks of a cluster share the A tile; ``x_walks="m"``: it walks
    M, and they share B); ``swizzle``: ``T.use_swizzle`` panel size (0: none); ``cluster``:
    ``T.Kernel``'s ``cluster_dims``."""
    out = out or dtype

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out)):
        grid = (T.ceildiv(N, bN), T.ceildiv(M, bM))
        grid = grid if x_walks == "n" else grid[::-1]
        with T.Kernel(*grid, threads=threads, cluster_dims=cluster) as (x, y):
            bx, by = (x, y) if x_walks == "n" else (y, x)
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    return main
