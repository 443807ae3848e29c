"""``T.reduce_*`` and ``T.cumsum`` on the CPU target, against float64 torch references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T

KINDS = ["max", "min", "sum", "abssum", "absmax"]


def _reduce_ref(x, kind, dim):
    x = x.double()
    if kind == "max":
        return x.amax(dim)
    if kind == "min":
        return x.amin(dim)
    if kind == "sum":
        return x.sum(dim)
    if kind == "abssum":
        return x.abs().sum(dim)
    return x.abs().amax(dim)


def _combine_ref(kind, old, new):
    if kind in ("sum", "abssum"):
        return old + new
    if kind in ("max", "absmax"):
        return torch.maximum(old, new)
    return torch.minimum(old, new)


@tilelang.jit(out_idx=-1, target="cpu")
def reduce_tile(M, N, kind, dim, clear, in_dtype="float32"):
    """Reduce an (M, N) tile over ``dim``; with clear=False the output starts from Init."""
    out_len = N if dim == 0 else M
    fn = {
        "max": T.reduce_max,
        "min": T.reduce_min,
        "sum": T.reduce_sum,
        "abssum": T.reduce_abssum,
        "absmax": T.reduce_absmax,
    }[kind]

    @T.prim_func
    def main(
        A: T.Tensor((M, N), in_dtype),
        Init: T.Tensor((out_len,), "float32"),
        Out: T.Tensor((out_len,), "float32"),
    ):
        with T.Kernel(1, threads=64):
            As = T.alloc_shared((M, N), in_dtype)
            R = T.alloc_fragment((out_len,), "float32")
            T.copy(A, As)
            T.copy(Init, R)
            fn(As, R, dim=dim, clear=clear)
            T.copy(R, Out)

    return main


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("clear", [True, False])
def test_reduce(randn, kind, dim, clear):
    M, N = 12, 20
    a, init = randn(M, N), randn(N if dim == 0 else M)
    out = reduce_tile(M, N, kind, dim, clear)(a, init)
    ref = _reduce_ref(a, kind, dim)
    if not clear:
        ref = _combine_ref(kind, init.double(), ref)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_reduce_negative_dim_and_fp16_input(randn):
    """dim=-1 is the last dimension; a float16 tile reduces into a float32 fragment."""
    a, init = randn(8, 64, dtype="float16"), randn(8)
    out = reduce_tile(8, 64, "sum", -1, True, "float16")(a, init)
    torch.testing.assert_close(out.double(), a.double().sum(1), rtol=1e-5, atol=1e-5)


def test_reduce_max_all_negative(randn):
    """max over rows that are all negative must not return the identity (0 or similar)."""
    a = -randn(4, 9).abs() - 1.0
    out = reduce_tile(4, 9, "max", 1, True)(a, torch.zeros(4))
    torch.testing.assert_close(out.double(), a.double().amax(1), rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def reduce_keepdim(M, N):
    """Output tile of shape (M, 1): the reduced dimension kept as 1."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M, 1), "float32")):
        with T.Kernel(1, threads=32):
            Af = T.alloc_fragment((M, N), "float32")
            R = T.alloc_fragment((M, 1), "float32")
            T.copy(A, Af)
            T.reduce_sum(Af, R, dim=1)
            T.copy(R, Out)

    return main


def test_reduce_keepdim(randn):
    a = randn(6, 10)
    out = reduce_keepdim(6, 10)(a)
    torch.testing.assert_close(out.double(), a.double().sum(1, keepdim=True), rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def row_max_blocks(M, N, bM):
    """Row maxima of a tall matrix, one block per bM rows (rows past M are never stored)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=64) as bx:
            Af = T.alloc_fragment((bM, N), "float32")
            R = T.alloc_fragment((bM,), "float32")
            T.copy(A[bx * bM, 0], Af)
            T.reduce_max(Af, R, dim=1)
            T.copy(R, Out[bx * bM])

    return main


@pytest.mark.parametrize("M", [64, 45])
def test_reduce_rows_across_blocks(randn, M):
    a = randn(M, 24)
    torch.testing.assert_close(row_max_blocks(M, 24, 16)(a).double(), a.double().amax(1))


# -- cumsum ------------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def cumsum_tile(M, N, dim, reverse, in_place, scope):
    """Prefix sums of an (M, N) tile in shared memory or a fragment."""
    alloc = T.alloc_shared if scope == "shared" else T.alloc_fragment

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32):
            S = alloc((M, N), "float32")
            D = alloc((M, N), "float32")
            T.copy(A, S)
            if in_place:
                T.cumsum(S, dim=dim, reverse=reverse)
                T.copy(S, Out)
            else:
                T.cumsum(S, D, dim=dim, reverse=reverse)
                T.copy(D, Out)

    return main


def _cumsum_ref(x, dim, reverse):
    x = x.double()
    if reverse:
        return x.flip(dim).cumsum(dim).flip(dim)
    return x.cumsum(dim)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_cumsum(randn, dim, reverse, in_place):
    a = randn(7, 11)
    out = cumsum_tile(7, 11, dim, reverse, in_place, "shared")(a)
    torch.testing.assert_close(out.double(), _cumsum_ref(a, dim, reverse), rtol=1e-5, atol=1e-5)


def test_cumsum_fragment(randn):
    a = randn(5, 16)
    out = cumsum_tile(5, 16, 1, False, False, "fragment")(a)
    torch.testing.assert_close(out.double(), _cumsum_ref(a, 1, False), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def cumsum_1d_blocks(N, block):
    """A 1-D prefix sum per block of ``block`` elements (tails read as zero)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            S = T.alloc_shared((block,), "float32")
            T.copy(A[bx * block], S)
            T.cumsum(S, dim=0)
            T.copy(S, Out[bx * block])

    return main


def test_cumsum_1d_per_block(randn):
    N, block = 50, 16
    a = randn(N)
    ref = torch.cat([c.double().cumsum(0) for c in a.split(block)])
    torch.testing.assert_close(cumsum_1d_blocks(N, block)(a).double(), ref, rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=[1, 2], target="cpu")
def reduce_and_scan_3d(B_, H, D):
    """3-D tiles: sum over the middle dimension; reverse prefix sum along it (float16 in,
    float32 out)."""

    @T.prim_func
    def main(
        X: T.Tensor((B_, H, D), "float16"),
        S: T.Tensor((B_, D), "float32"),
        C: T.Tensor((B_, H, D), "float32"),
    ):
        with T.Kernel(1, threads=32):
            Xs = T.alloc_shared((B_, H, D), "float16")
            R = T.alloc_fragment((B_, D), "float32")
            Cs = T.alloc_shared((B_, H, D), "float32")
            T.copy(X, Xs)
            T.reduce_sum(Xs, R, dim=1)
            T.cumsum(Xs, Cs, dim=1, reverse=True)
            T.copy(R, S)
            T.copy(Cs, C)

    return main


def test_reduce_and_cumsum_3d(randn):
    x = randn(2, 5, 3, dtype="float16")
    s, c = reduce_and_scan_3d(2, 5, 3)(x)
    xd = x.double()
    torch.testing.assert_close(s.double(), xd.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(c.double(), _cumsum_ref(xd, 1, True), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def reduce_bits(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "int32"), B: T.Tensor((3, M), "int32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M, N), "int32")
            R = T.alloc_fragment((M,), "int32")
            T.copy(A, F)
            T.reduce_bitand(F, R, dim=1)
            T.copy(R, B[0, :])
            T.reduce_bitor(F, R, dim=1)
            T.copy(R, B[1, :])
            T.reduce_bitxor(F, R, dim=1)
            T.copy(R, B[2, :])

    return main


def test_reduce_bitwise(rng):
    import functools
    import operator

    a = rng.integers(0, 1 << 20, size=(5, 8)).astype(np.int32)
    a[:, :4] |= 0x30  # keep some common bits so bitand is not always 0
    out = reduce_bits(5, 8)(torch.from_numpy(a))
    ops = (operator.and_, operator.or_, operator.xor)
    ref = [[functools.reduce(op, row.tolist()) for row in a] for op in ops]
    assert out.tolist() == ref
