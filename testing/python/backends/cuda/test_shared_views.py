"""Shared tiles read through ``T.reshape`` / ``T.view`` (CUDA, emulated with the race check).

The view is another tensor over the same bytes. The barrier pass counted it as a different
tile, so a read through the view right after a copy into the tile had no ``__syncthreads``
(a race on a GPU: threads read elements other threads had not stored yet). The emulator
also refilled the bytes with NaN when the view was declared.
"""

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = pytest.mark.parametrize(
    "target",
    [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}],
    ids=["sm_80", "sm_90a"],
)


def row_sums_through_reshape(M, N):
    @T.prim_func
    def main(X: T.Tensor((M * N,), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M * N,), "float32")
            T.copy(X, s)
            rows = T.reshape(s, [M, N])
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(rows, f)
            T.reduce_sum(f, r, dim=1)
            T.copy(r, O)

    return main


def bytes_through_view(N):
    @T.prim_func
    def main(X: T.Tensor((N,), "int32"), O: T.Tensor((N * 4,), "int8")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((N,), "int32")
            T.copy(X, s)
            b = T.view(s, [N * 4], dtype="int8")
            for i in T.Parallel(N * 4):
                O[i] = b[(i + 5) % (N * 4)]

    return main


@TARGETS
def test_read_through_reshape_after_copy(target):
    M, N = 8, 36
    x = np.random.default_rng(0).standard_normal(M * N).astype(np.float32)
    lowered = pipeline.lower(row_sums_through_reshape(M, N), target)
    out = emulate(lowered, x, np.zeros(M, np.float32), race_check=True)[1]
    np.testing.assert_allclose(out, x.astype(np.float64).reshape(M, N).sum(1), rtol=1e-5, atol=1e-5)


@TARGETS
def test_read_through_dtype_view_after_copy(target):
    N = 40
    x = np.random.default_rng(1).integers(-(2**31), 2**31 - 1, N).astype(np.int32)
    lowered = pipeline.lower(bytes_through_view(N), target)
    out = emulate(lowered, x, np.zeros(N * 4, np.int8), race_check=True)[1]
    np.testing.assert_array_equal(out, np.roll(x.view(np.int8), -5))


def view_then_other_tile(M, N):
    """``s`` is read only through its view after ``t`` is allocated and filled."""

    @T.prim_func
    def main(
        X: T.Tensor((M * N,), "float32"),
        Y: T.Tensor((M, N), "float32"),
        O: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((M * N,), "float32")
            T.copy(X, s)
            s2 = T.reshape(s, [M, N])
            t = T.alloc_shared((M, N), "float32")
            T.copy(Y, t)
            for i, j in T.Parallel(M, N):
                O[i, j] = s2[i, j] + t[i, j]

    return main


@TARGETS
def test_tile_read_through_a_view_keeps_its_bytes(target):
    """The shared-memory planner counts a view's uses as the tile's: ``t`` may not take
    ``s``'s bytes while ``s2`` (a view of ``s``) is still read (it did: both at offset 0,
    a silent wrong sum)."""
    M, N = 8, 32
    lowered = pipeline.lower(view_then_other_tile(M, N), target)
    plan = dict(lowered.attrs["tl.shared_memory"])
    (so, ssz), (to, tsz) = (tuple(int(v) for v in plan[k]) for k in ("s", "t"))
    assert so + ssz <= to or to + tsz <= so, plan
    rng = np.random.default_rng(1)
    x = rng.standard_normal(M * N).astype(np.float32)
    y = rng.standard_normal((M, N)).astype(np.float32)
    out = emulate(lowered, x, y, np.zeros((M, N), np.float32), race_check=True)[2]
    np.testing.assert_allclose(out, x.reshape(M, N).astype(np.float64) + y, rtol=1e-6, atol=1e-6)
