"""Kernels with ``T.annotate_layout`` shared by the CPU-side tests
(``transform/test_annotate_layout.py``) and the GPU runs
(``backends/cuda/test_annotate_layout_gpu.py``)."""

from __future__ import annotations

import tilelang.language as T
from tilelang.layout import Fragment, make_swizzled_layout


def padded(rows, cols, pad=8):
    """Row-major with rows of ``cols + pad`` elements (bank-conflict padding)."""
    return T.Layout((rows, cols), lambda i, j: i * (cols + pad) + j)


def gemm(
    M, N, K, bM=64, bN=64, bK=32, threads=128, stages=2, ann="swizzle", c_layout=None,
    dtype="float16",
):  # fmt: skip
    """A tiled GEMM whose shared tiles are annotated (``ann``: swizzle/pad/None), and its
    accumulator too when ``c_layout`` is given."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), dtype)
            B_shared = T.alloc_shared((bK, bN), dtype)
            C_local = T.alloc_fragment((bM, bN), "float32")
            if ann == "swizzle":
                T.annotate_layout(
                    {A_shared: make_swizzled_layout(A_shared), B_shared: make_swizzled_layout(B_shared)}
                )  # fmt: skip
            elif ann == "pad":
                # a Layout object and a plain function of the indices (upstream accepts both)
                pads = {A_shared: padded(bM, bK), B_shared: lambda i, j: i * (bN + 8) + j}
                T.annotate_layout(pads)  # padded
            if c_layout is not None:
                T.annotate_layout({C_local: c_layout})
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_shared)
                T.copy(B[k * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bM, bx * bN])

    return main


def frag_layout(bM, bN, threads=128):
    """A fragment no rule would choose: 32 consecutive elements per thread, wrapping."""
    return Fragment((bM, bN), forward_thread_fn=lambda i, j: (i * bN + j) // 32 % threads)


def elementwise(M, N, bM=64, bN=64, shared="pad"):
    """B = 2 * A + 1 through an annotated shared tile written and read by T.Parallel loops."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), "float16")
            F = T.alloc_fragment((bM, bN), "float32")
            lay = padded(bM, bN) if shared == "pad" else make_swizzled_layout(S)
            T.annotate_layout({S: lay, F: frag_layout(bM, bN)})
            for i, j in T.Parallel(bM, bN):
                S[i, j] = A[by * bM + i, bx * bN + j] * 2
            T.copy(S, F)
            for i, j in T.Parallel(bM, bN):
                F[i, j] = F[i, j] + 1
            T.copy(F, S)
            T.copy(S, B[by * bM, bx * bN])

    return main
