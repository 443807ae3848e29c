"""Replicated T.Parallel iterations write global memory once (CUDA, no GPU needed).

A row-vector loop ``for i in T.Parallel(64)`` over 128 threads runs every iteration in
two threads (replicas). Both compute it, but only replica 0 stores to global/shared
memory or applies an atomic; fragment (register) stores stay in every replica, which the
next loop reads. The emulator's ``write_once`` mode fails on any global element stored
by two threads in one statement.
"""

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes.layout_inference import infer_layouts
from tilelang.testing.cuda_emulator import EmulationError, emulate

TARGET = {"kind": "cuda", "arch": "sm_90a"}


def row_vector(M, N, block_M=64, threads=128):
    """Scale column 0 into a row-vector fragment, then store it (loop and tile copy)."""

    @T.prim_func
    def main(
        X: T.Tensor((M, N), "float32"),
        S: T.Tensor((M,), "float32"),
        R: T.Tensor((M,), "float32"),
        H: T.Tensor((4,), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            s = T.alloc_fragment((block_M,), "float")
            for i in T.Parallel(block_M):
                s[i] = X[bx * block_M + i, 0] * 2.0
            for i in T.Parallel(block_M):
                S[bx * block_M + i] = s[i] + 1.0
            for i in T.Parallel(block_M):
                T.atomic_add(H[0], s[i])  # once per row, not per replica
            T.copy(s, R[bx * block_M])

    return main


def test_row_vector_loop_is_replicated():
    info = infer_layouts(row_vector(1000, 8), 128, "sm_90a")
    assert all(frag.get_replicate() == 2 for frag in info.loops.values())


@pytest.mark.parametrize("M", [1000, 128, 70])
def test_replicas_store_once(M):
    lowered = pipeline.lower(row_vector(M, 8), TARGET)
    x = np.random.default_rng(0).standard_normal((M, 8)).astype(np.float32)
    s, r = np.full(M, np.nan, np.float32), np.full(M, np.nan, np.float32)
    h = np.zeros(4, np.float32)
    x, s, r, h = emulate(lowered, x, s, r, h, write_once=True)
    np.testing.assert_allclose(s, x[:, 0] * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(r, x[:, 0] * 2, rtol=1e-6)
    np.testing.assert_allclose(h[0], (x[:, 0].astype(np.float64) * 2).sum(), rtol=1e-4)


def test_write_once_check_catches_duplicate_stores():
    """Serial code runs in every thread: its global store is what write_once rejects."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32) as bx:  # noqa: F841
            A[0] = 1.0

    lowered = pipeline.lower(main, TARGET)
    emulate(lowered, np.zeros(4, np.float32))  # equal values: no race
    with pytest.raises(EmulationError, match="written by 32 threads"):
        emulate(lowered, np.zeros(4, np.float32), write_once=True)
