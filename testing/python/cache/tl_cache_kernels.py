"""Kernels shared by the cache tests and the subprocesses they start (importable by path)."""

from __future__ import annotations

import tilelang.language as T


def add_one(n: int = 256, block: int = 64, dtype: str = "float32"):
    """``B = A + 1`` over ``n`` elements, ``block`` per block."""

    @T.prim_func
    def add_one_kernel(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            tile = T.alloc_shared((block,), dtype)
            T.copy(A[bx * block], tile)
            for i in T.Parallel(block):
                tile[i] = tile[i] + 1.0
            T.copy(tile, B[bx * block])

    return add_one_kernel
