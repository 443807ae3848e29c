"""Explicit-thread (CUDA-style) code on the CPU target: per-thread statements, barriers,
per-thread registers and values that live across ``T.sync_threads()``."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import tilelang
import tilelang.language as T


def _compile(func, **kw):
    return tilelang.compile(func, target="cpu", **kw)


@pytest.mark.parametrize("N", [64, 128])
def test_shared_tree_reduction_with_while(randn, N):
    """Tree sum in shared memory: a uniform alloc_var stride drives a while loop around
    per-thread steps and barriers (several thread loops in one block)."""

    @T.prim_func
    def main(A: T.Tensor((4, N), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(4, threads=N) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((N,), "float32")
            S[tx] = A[bx, tx]
            T.sync_threads()
            s = T.alloc_var("int32", init=N // 2)
            while s > 0:
                if tx < s:
                    S[tx] += S[tx + s]
                T.sync_threads()
                s = s // 2
            if tx == 0:
                B[bx] = S[0]

    a = randn(4, N)
    out = _compile(main, out_idx=-1)(a)
    torch.testing.assert_close(out.double(), a.double().sum(1), rtol=1e-5, atol=1e-5)


def test_unrolled_tree_max(randn):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            S[tx] = A[tx]
            T.sync_threads()
            for s in [32, 16, 8, 4, 2, 1]:
                if tx < s:
                    S[tx] = T.max(S[tx], S[tx + s])
                T.sync_threads()
            B[0] = S[0]

    a = randn(64)
    assert _compile(main, out_idx=-1)(a).item() == a.max().item()


def test_per_thread_registers(randn):
    """alloc_local / alloc_var are per thread: each thread sums its own row."""

    @T.prim_func
    def main(A: T.Tensor((32, 4), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            r = T.alloc_local((4,), "float32")
            for j in T.serial(4):
                r[j] = A[tx, j]
            acc = T.alloc_var("float32", init=0.0)
            for j in T.serial(4):
                acc += r[j]
            B[tx] = acc

    a = randn(32, 4)
    out = _compile(main, out_idx=-1)(a)
    torch.testing.assert_close(out.double(), a.double().sum(1), rtol=1e-6, atol=1e-6)


def test_value_across_barrier(randn):
    """``v = A[tx] * 2`` computed before a barrier and used after it, per thread; a
    neighbour exchange through shared memory in between."""

    @T.prim_func
    def main(A: T.Tensor((2, 16), "float32"), B: T.Tensor((2, 16), "float32")):
        with T.Kernel(2, threads=16) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((16,), "float32")
            v = A[bx, tx] * 2.0
            S[tx] = v
            T.sync_threads()
            B[bx, tx] = v + S[(tx + 1) % 16]

    a = randn(2, 16)
    out = _compile(main, out_idx=-1)(a)
    ref = 2 * a.double() + 2 * a.double().roll(-1, dims=1)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)


def test_two_dim_threads_with_registers(randn):
    """threads=(8, 4): per-thread registers indexed by both thread coordinates."""

    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=(8, 4)):
            tx, ty = T.get_thread_bindings()
            r = T.alloc_var("float32")
            r = A[ty, tx]
            T.sync_threads()
            r = r * r + ty
            B[ty, tx] = r

    a = randn(4, 8)
    out = _compile(main, out_idx=-1)(a)
    ref = a.double() ** 2 + torch.arange(4, dtype=torch.float64)[:, None]
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)


def test_tile_level_var_stays_once_per_block(randn):
    """A var only touched by tile-level code is not per thread: a block-wide sum."""

    @T.prim_func
    def main(A: T.Tensor((2, 64), "float32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for j in T.serial(64):
                acc += A[bx, j]
            B[bx] = acc

    a = randn(2, 64)
    out = _compile(main, out_idx=-1)(a)
    torch.testing.assert_close(out.double(), a.double().sum(1), rtol=1e-5, atol=1e-5)


def test_tile_op_on_per_thread_buffer_names_line():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32, 4), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                r = T.alloc_local((4,), "float32")
                r[0] = A[tx]
                T.copy(r, B[0, :])  # here

        return main

    lines, first = inspect.getsourcelines(kernel)
    line = first + next(k for k, text in enumerate(lines) if "# here" in text)
    with pytest.raises(tilelang.CompileError) as info:
        _compile(kernel())
    assert f"{os.path.basename(__file__)}:{line}" in str(info.value)
    assert "per-thread" in str(info.value)
