"""``T.fill`` and ``T.clear`` on the CPU target: every scope, slices, run-time values, tails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=-1, target="cpu")
def fill_scopes(M, N, dtype, value):
    """fill/clear on shared, fragment and local tiles, then summed into the output."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((M, N), dtype)
            F = T.alloc_fragment((M, N), dtype)
            L = T.alloc_local((M, N), dtype)
            T.copy(A, S)
            T.copy(A, F)
            T.copy(A, L)
            T.fill(S, value)
            T.clear(F)
            T.fill(L, 1)
            for i, j in T.Parallel(M, N):
                B[i, j] = S[i, j] + F[i, j] + L[i, j]

    return main


@pytest.mark.parametrize(
    "dtype,value", [("float32", 2.5), ("float16", -0.75), ("int32", 7), ("bfloat16", 3.0)]
)
def test_fill_and_clear_scopes(randn, dtype, value):
    a = randn(6, 10, dtype=dtype, scale=10.0)
    out = fill_scopes(6, 10, dtype, value)(a)
    assert out.dtype == a.dtype
    assert torch.all(out.double() == value + 1), out


@tilelang.jit(target="cpu")
def fill_global_rows(M, N, bM):
    """fill a slice of a global tensor; rows past M are not written."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), v: T.float32):
        with T.Kernel(T.ceildiv(M, bM), threads=32) as bx:
            T.fill(A[bx * bM : (bx + 1) * bM, :], v + bx)

    return main


@pytest.mark.parametrize("M", [12, 10])
def test_fill_global_slice_runtime_value(M):
    a = torch.full((M + 3, 7), -1.0)
    view = a[:M]  # the rows after M must stay untouched
    fill_global_rows(M, 7, 4)(view, 0.5)
    ref = 0.5 + torch.arange(M).div(4, rounding_mode="floor")[:, None].float().expand(M, 7)
    torch.testing.assert_close(a[:M], ref, rtol=0, atol=0)
    assert torch.all(a[M:] == -1)


@tilelang.jit(out_idx=-1, target="cpu")
def clear_tile_start(M, N, bM, bN):
    """T.clear and T.fill on slices of a fragment (a row and a column of every tile)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "int32"), B: T.Tensor((M, N), "int32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=32) as (bx, by):
            F = T.alloc_fragment((bM, bN), "int32")
            T.copy(A[by * bM, bx * bN], F)
            T.clear(F[0:1, :])  # first row of every tile
            T.fill(F[:, bN - 1 : bN], -1)  # last column of every tile
            T.copy(F, B[by * bM, bx * bN])

    return main


def test_fill_subtile_regions(rng):
    M, N, bM, bN = 9, 10, 4, 4
    a = torch.from_numpy(rng.integers(1, 100, size=(M, N)).astype(np.int32))
    out = clear_tile_start(M, N, bM, bN)(a)
    ref = a.clone()
    ref[::bM, :] = 0
    ref[:, bN - 1 :: bN] = -1
    assert torch.equal(out, ref)


@tilelang.jit(out_idx=-1, target="cpu")
def fill_inf(N):
    @T.prim_func
    def main(B: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((2, N), "float32")
            T.fill(F[0, :], -T.infinity("float32"))
            T.fill(F[1, :], T.infinity("float32"))
            T.copy(F, B)

    return main


def test_fill_infinity():
    out = fill_inf(5)()
    assert torch.all(out[0] == float("-inf")) and torch.all(out[1] == float("inf"))
