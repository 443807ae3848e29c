"""``T.atomic_add/atomic_max/atomic_min`` on the CPU target: many blocks updating shared cells."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(target="cpu")
def histogram(N, bins, block):
    """Hist[v] += 1 for every value, blocks of ``block`` values updating one global histogram."""

    @T.prim_func
    def main(Vals: T.Tensor((N,), "int32"), Hist: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    T.atomic_add(Hist[Vals[bx * block + i]], 1)

    return main


@pytest.mark.parametrize("N,block", [(1024, 64), (1000, 96)])
def test_atomic_add_histogram(rng, N, block):
    bins = 16
    vals = torch.from_numpy(rng.integers(0, bins, size=N).astype(np.int32))
    hist = torch.zeros(bins, dtype=torch.int32)
    histogram(N, bins, block)(vals, hist)
    ref = torch.bincount(vals.long(), minlength=bins).to(torch.int32)
    assert torch.equal(hist, ref)


def test_atomic_add_accumulates_into_existing(rng):
    """atomic_add adds to what the output already holds (a second call doubles the counts)."""
    N, bins = 300, 8
    vals = torch.from_numpy(rng.integers(0, bins, size=N).astype(np.int32))
    hist = torch.zeros(bins, dtype=torch.int32)
    kernel = histogram(N, bins, 32)
    kernel(vals, hist)
    kernel(vals, hist)
    assert torch.equal(hist, 2 * torch.bincount(vals.long(), minlength=bins).to(torch.int32))


@tilelang.jit(target="cpu")
def atomic_tile_sum(M, N, bM):
    """Column sums: each block atomically adds its (bM, N) tile's partial sums to Out."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=64) as bx:
            Af = T.alloc_fragment((bM, N), "float32")
            part = T.alloc_fragment((N,), "float32")
            T.copy(A[bx * bM, 0], Af)
            T.reduce_sum(Af, part, dim=0)
            T.atomic_add(Out[0], part)

    return main


def test_atomic_add_tile(randn):
    M, N = 70, 12
    a = randn(M, N)
    out = torch.zeros(N)
    atomic_tile_sum(M, N, 16)(a, out)
    torch.testing.assert_close(out.double(), a.double().sum(0), rtol=1e-5, atol=1e-5)


@tilelang.jit(target="cpu")
def atomic_float_sum(N, block):
    """A float scalar total of all elements, one atomic per element."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Total: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.serial(block):
                if bx * block + i < N:
                    T.atomic_add(Total[0], A[bx * block + i])

    return main


def test_atomic_add_float_scalar(randn):
    a = randn(200)
    total = torch.tensor([1.5])
    atomic_float_sum(200, 32)(a, total)
    torch.testing.assert_close(
        total.double(), a.double().sum(0, keepdim=True) + 1.5, rtol=1e-5, atol=1e-5
    )


@tilelang.jit(target="cpu")
def atomic_extrema(N, block, dtype):
    """Global maximum and minimum through atomic_max/atomic_min from every block."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), Mx: T.Tensor((1,), dtype), Mn: T.Tensor((1,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.serial(block):
                if bx * block + i < N:
                    T.atomic_max(Mx[0], A[bx * block + i])
                    T.atomic_min(Mn[0], A[bx * block + i])

    return main


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_atomic_max_min(randn, dtype):
    N = 333
    a = randn(N, dtype=dtype, scale=100.0)
    mx = torch.full((1,), -1e9 if dtype == "float32" else -(2**30)).to(a.dtype)
    mn = torch.full((1,), 1e9 if dtype == "float32" else 2**30).to(a.dtype)
    atomic_extrema(N, 64, dtype)(a, mx, mn)
    assert mx.item() == a.max().item()
    assert mn.item() == a.min().item()


def test_atomic_max_keeps_larger_initial_value(randn):
    a = randn(100)
    mx, mn = torch.tensor([1e6]), torch.tensor([-1e6])
    atomic_extrema(100, 64, "float32")(a, mx, mn)
    assert mx.item() == 1e6 and mn.item() == -1e6


@tilelang.jit(target="cpu")
def atomic_rows(M, N, kind):
    """Tile atomics into a row given by its start (Out[b % 2, 0]) or into a whole tensor."""
    op = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[kind]

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        Out: T.Tensor((2, N), "float32"),
        All: T.Tensor((N,), "float32"),
    ):
        with T.Kernel(M, threads=1) as b:
            row = T.alloc_fragment((N,), "float32")
            T.copy(A[b, :], row)
            op(Out[b % 2, 0], row)
            op(All, row)

    return main


@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_atomic_tile_forms(randn, kind):
    M, N = 6, 8
    a = randn(M, N)
    init = {"add": 0.0, "max": -1e9, "min": 1e9}[kind]
    out, all_ = torch.full((2, N), init), torch.full((N,), init)
    atomic_rows(M, N, kind)(a, out, all_)
    reduce = {"add": torch.sum, "max": torch.amax, "min": torch.amin}[kind]
    ad = a.double()
    torch.testing.assert_close(out.double()[0], reduce(ad[0::2], 0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out.double()[1], reduce(ad[1::2], 0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(all_.double(), reduce(ad, 0), rtol=1e-6, atol=1e-6)


@tilelang.jit(target="cpu", pass_configs={"tl.enable_bounds_check": True})
def scalar_atomic_tail(n, block):
    """``Acc[bx * block + i] += Val[...]`` one element at a time from a ``T.Parallel`` loop
    whose last block reaches past ``n`` (no ``if`` in the kernel)."""

    @T.prim_func
    def main(Val: T.Tensor((n,), "float32"), Acc: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                T.atomic_add(Acc[bx * block + i], Val[bx * block + i])

    return main


def test_scalar_atomic_past_the_end_is_skipped(randn):
    """The element form skips what lies outside a global tensor, as the tile form and the CUDA
    rule do (before: an unguarded read-modify-write past the end, caught here by the bounds
    check; unchecked, it corrupted the heap)."""
    n = 100
    val, acc = randn(n), randn(n)
    want = acc + val
    scalar_atomic_tail(n, 64)(val, acc)
    torch.testing.assert_close(acc, want)
