"""Frontend semantics on the CPU target: name binding, tuple unpacking, macros returning
values, local/var storage, multi-dimensional threads, scheduling hints and index helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def _compile(func, **kw):
    return tilelang.compile(func, target="cpu", **kw)


def test_bound_reads_keep_their_value(randn):
    """``x = A[0]`` and ``x, y = A[0], A[1]`` capture the values read, not later stores."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            x, y = A[0], A[1]
            z = A[2]
            A[0] = 100.0
            A[1] = 200.0
            A[2] = 300.0
            B[0] = x
            B[1] = y
            B[2] = z
            B[3] = A[0]

    a = randn(4)
    ref = torch.tensor([a[0], a[1], a[2], 100.0])
    b = torch.zeros(4)
    _compile(main)(a, b)
    torch.testing.assert_close(b, ref, rtol=0, atol=0)


def test_unpacking_python_values():
    """Tuple unpacking of Python values (shapes, constants) stays Python."""
    M, N = 6, 4

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=1):
            rows, cols = M, N
            lo, hi = 1.0, 2.0
            for i, j in T.grid(rows, cols):
                A[i, j] = T.if_then_else(i < j, lo, hi)

    a = torch.zeros(M, N)
    _compile(main)(a)
    i, j = torch.meshgrid(torch.arange(M), torch.arange(N), indexing="ij")
    assert torch.equal(a, torch.where(i < j, 1.0, 2.0))


@T.macro
def square(x):
    """A macro returning a value (an expression of its argument)."""
    return x * x


@T.macro
def argmax_row(A, row, n, best, best_idx):
    """A macro with a loop and a branch writing two caller var cells."""
    best = -T.infinity("float32")
    best_idx = -1
    for j in T.serial(n):
        if A[row, j] > best:
            best = A[row, j]
            best_idx = j  # noqa: F841 - stores into the caller's var cell


def test_macros_return_and_write_vars(randn):
    M, N = 5, 9

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        Sq: T.Tensor((M, N), "float32"),
        Idx: T.Tensor((M,), "int32"),
    ):
        with T.Kernel(M, threads=1) as row:
            best = T.alloc_var("float32")
            best_idx = T.alloc_var("int32")
            for j in T.serial(N):
                Sq[row, j] = square(A[row, j]) + 1.0
            argmax_row(A, row, N, best, best_idx)
            Idx[row] = best_idx

    a = randn(M, N)
    sq, idx = torch.zeros(M, N), torch.zeros(M, dtype=torch.int32)
    _compile(main)(a, sq, idx)
    torch.testing.assert_close(sq.double(), a.double() ** 2 + 1, rtol=1e-6, atol=1e-6)
    assert idx.tolist() == a.argmax(1).tolist()


def test_alloc_local_and_var_init(randn):
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((9,), "float32")):
        with T.Kernel(1, threads=1):
            r = T.alloc_local((8,), "float32")
            prod = T.alloc_var("float32", init=1.0)
            for i in T.serial(8):
                r[i] = A[i] * A[i]
            for i in T.serial(8):
                B[i] = r[7 - i]
                prod *= 2.0
            B[8] = prod

    a, b = randn(8), torch.zeros(9)
    _compile(main)(a, b)
    torch.testing.assert_close(b[:8], (a * a).flip(0), rtol=0, atol=0)
    assert b[8].item() == 256.0


def test_multi_dim_threads_and_bindings():
    """threads=(32, 4): per-thread statements run for every (tx, ty); extents are readable."""

    @T.prim_func
    def main(A: T.Tensor((2, 4, 32), "int32")):
        with T.Kernel(2, threads=(32, 4)) as bx:
            tx, ty = T.get_thread_bindings()
            assert T.get_thread_extent(1) == 4 and T.get_block_extent(0) == 2
            A[bx, ty, tx] = bx * 1000 + ty * 100 + tx

    a = torch.zeros(2, 4, 32, dtype=torch.int32)
    _compile(main)(a)
    b, y, x = torch.meshgrid(torch.arange(2), torch.arange(4), torch.arange(32), indexing="ij")
    assert torch.equal(a, (b * 1000 + y * 100 + x).int())


def test_block_bindings_3d():
    @T.prim_func
    def main(A: T.Tensor((3, 4, 5), "int32")):
        with T.Kernel(5, 4, 3, threads=1) as (bx, by, bz):
            A[bz, by, bx] = bz * 100 + by * 10 + bx

    a = torch.zeros(3, 4, 5, dtype=torch.int32)
    _compile(main)(a)
    z, y, x = torch.meshgrid(torch.arange(3), torch.arange(4), torch.arange(5), indexing="ij")
    assert torch.equal(a, (z * 100 + y * 10 + x).int())


def test_schedule_hints_are_harmless(randn):
    """T.use_swizzle, T.sync_threads, T.annotate_layout({}) and copy options run on the CPU."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            S = T.alloc_shared((32, 32), "float32")
            T.annotate_layout({})
            T.use_swizzle(panel_size=10)
            T.copy(A[by * 32, bx * 32], S, disable_tma=True)
            T.sync_threads()
            T.copy(S, B[by * 32, bx * 32], coalesced_width=4)

    a, b = randn(64, 64), torch.zeros(64, 64)
    _compile(main)(a, b)
    assert torch.equal(a, b)


def test_gather_rows_with_runtime_index(randn, rng):
    """Tile start at a run-time row read from an index tensor (a gather)."""

    @T.prim_func
    def main(
        A: T.Tensor((16, 8), "float32"),
        idx: T.Tensor((4,), "int32"),
        B: T.Tensor((4, 8), "float32"),
    ):
        with T.Kernel(4, threads=32) as bx:
            r = T.alloc_var("int32")
            r = idx[bx]
            row = T.alloc_fragment((8,), "float32")
            T.copy(A[r, 0:8], row)
            T.copy(row, B[bx, :])

    a = randn(16, 8)
    idx = torch.from_numpy(rng.integers(0, 16, size=4).astype(np.int32))
    b = torch.zeros(4, 8)
    _compile(main)(a, idx, b)
    assert torch.equal(b, a[idx.long()])


def test_get_tir_traces_without_compiling():
    @tilelang.jit(out_idx=-1, target="cpu")
    def factory(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    B[i] = A[i]

        return main

    func = factory.get_tir(7)
    assert [p.name for p in func.params] == ["A", "B"]
    assert "main" in func.script()


def _macro_factory(N, scale):
    """A macro whose annotations and defaults name the factory's locals only."""

    @T.macro
    def scaled(dst: T.SharedBuffer((N,), "float32"), src, n=N, *, s=scale):
        for i in T.serial(n):
            dst[i] = src[i] * s

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=1):
            S = T.alloc_shared((N,), "float32")
            scaled(S, A)
            T.copy(S, B[0, :])
            scaled(S, A, N // 2, s=-1.0)
            T.copy(S, B[1, :])

    return main


def test_macro_defaults_and_annotations_from_enclosing_scope(randn):
    a = randn(8)
    out = _compile(_macro_factory(8, 3.0), out_idx=-1)(a)
    torch.testing.assert_close(out[0], a * 3, rtol=0, atol=0)
    torch.testing.assert_close(out[1, :4], -a[:4], rtol=0, atol=0)
    torch.testing.assert_close(out[1, 4:], a[4:] * 3, rtol=0, atol=0)


def test_reshape_and_view_of_tiles(randn):
    """T.reshape of a shared tile and T.view of a fragment as another element type."""

    @T.prim_func
    def main(
        A: T.Tensor((4, 8), "float32"),
        B: T.Tensor((8, 4), "float32"),
        Bits: T.Tensor((4, 8), "int32"),
    ):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((4, 8), "float32")
            T.copy(A, S)
            S2 = T.reshape(S, (8, 4))
            T.copy(S2, B)
            F = T.alloc_fragment((4, 8), "float32")
            T.copy(A, F)
            Fi = T.view(F, dtype="int32")
            T.copy(Fi, Bits)

    a = randn(4, 8)
    b, bits = torch.zeros(8, 4), torch.zeros(4, 8, dtype=torch.int32)
    _compile(main)(a, b, bits)
    assert torch.equal(b, a.reshape(8, 4))
    assert torch.equal(bits, a.view(torch.int32))


def test_view_size_mismatch():
    @T.macro
    def bad(S):
        T.view(S, (3, 3))  # mismatch

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=1):
                S = T.alloc_shared((4, 8), "float32")
                bad(S)

        return main

    with pytest.raises(tilelang.TileLangError, match="different sizes"):
        kernel()


def test_loop_break_cast_reinterpret(randn):
    """T.loop_break, T.Cast (TVMScript order) and T.reinterpret."""

    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), B: T.Tensor((3,), "int32")):
        with T.Kernel(1, threads=1):
            n = T.alloc_var("int32", init=0)
            for i in T.serial(16):
                if A[i] < 0:
                    T.loop_break()
                n += 1
            B[0] = n
            B[1] = T.Cast("int32", A[0] * 100.0)
            B[2] = T.reinterpret("int32", A[1])

    a = randn(16)
    b = torch.zeros(3, dtype=torch.int32)
    _compile(main)(a, b)
    negative = (a < 0).nonzero()
    assert b[0].item() == (negative[0].item() if len(negative) else 16)
    assert b[1].item() == int(a[0].item() * 100.0)
    assert b[2].item() == a[1:2].view(torch.int32).item()


def test_loop_break_outside_runtime_loop():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                for i in [0, 1]:
                    T.loop_break()
                    A[i] = 1.0

        return main

    with pytest.raises(tilelang.TileLangError, match="run-time loop"):
        kernel()
