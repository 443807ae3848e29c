"""Compiling and calling kernels from 8 threads at once gives correct results."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1], target="cpu")
def scaled_add(n, block, alpha):
    @T.prim_func
    def main(
        A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")
    ):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] * alpha + B[bx * block + i]

    return main


def _row_max(m, n):
    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m,), "float32")):
        with T.Kernel(m, threads=1) as bx:
            best = T.alloc_var("float32", init=-3.0e38)
            for j in T.serial(n):
                if A[bx, j] > best:
                    best = A[bx, j]
            B[bx] = best

    return main


def _job(k: int):
    """One thread's work: compile (some shapes shared with other threads) and call, checked."""
    rng = np.random.default_rng(1000 + k)
    n = 97 + 13 * (k % 4)  # threads k and k+4 build the same kernel concurrently
    alpha = float(k % 4) + 0.5
    kernel = scaled_add(n, 32, alpha)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    for _ in range(20):
        got = kernel(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        np.testing.assert_allclose(got, a.astype(np.float64) * alpha + b, rtol=1e-6, atol=1e-6)
    m, cols = 5 + k, 17 + k
    reducer = tilelang.compile(_row_max(m, cols), out_idx=[-1], target="cpu")
    x = rng.standard_normal((m, cols)).astype(np.float32)
    np.testing.assert_array_equal(reducer(torch.from_numpy(x)).numpy(), x.max(axis=1))
    return k


def test_eight_threads_compile_and_call():
    with ThreadPoolExecutor(max_workers=8) as pool:
        done = sorted(pool.map(_job, range(8)))
    assert done == list(range(8))
