"""Calls with wrong arguments raise ``tilelang.KernelArgumentError`` naming the argument, what
was expected and what was given; CPU lowering errors name the user's line."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=-1, target="cpu")
def add(M, N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(M, N):
                C[i, j] = A[i, j] + B[i, j]

    return main


@tilelang.jit(target="cpu")
def add_in_place(M, N):
    return add.get_tir(M, N)


def _good():
    return torch.ones(4, 6), torch.ones(4, 6)


def test_good_call_works():
    a, b = _good()
    assert torch.equal(add(4, 6)(a, b), torch.full((4, 6), 2.0))


def test_wrong_number_of_inputs():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(a)
    message = str(info.value)
    assert "2 inputs" in message and "A" in message and "B" in message and "got 1" in message


def test_wrong_number_of_arguments_in_place():
    a, b = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add_in_place(4, 6)(a, b)
    message = str(info.value)
    assert "3 arguments" in message and "got 2" in message


@pytest.mark.parametrize("kernel_kind", ["out_idx", "in_place"])
def test_wrong_shape(kernel_kind):
    a, b = _good()
    bad = torch.ones(4, 7)
    with pytest.raises(tilelang.KernelArgumentError) as info:
        if kernel_kind == "out_idx":
            add(4, 6)(a, bad)
        else:
            add_in_place(4, 6)(a, bad, torch.empty(4, 6))
    message = str(info.value)
    assert "'B'" in message and "[4, 6]" in message and "[4, 7]" in message


def test_wrong_rank():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(a, torch.ones(24))
    message = str(info.value)
    assert "'B'" in message and "2 dimensions" in message and "[24]" in message


def test_wrong_dtype():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(a, torch.ones(4, 6, dtype=torch.float16))
    message = str(info.value)
    assert "'B'" in message and "float32" in message and "float16" in message


def test_wrong_dtype_numpy():
    import numpy as np

    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(np.ones((4, 6), np.float64), np.ones((4, 6), np.float32))
    message = str(info.value)
    assert "'A'" in message and "float32" in message and "float64" in message


def test_wrong_device():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add_in_place(4, 6)(a, torch.empty(4, 6, device="meta"), torch.empty(4, 6))
    message = str(info.value)
    assert "'B'" in message and "CPU" in message and "meta" in message


def test_not_a_tensor():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(a, [[1.0] * 6] * 4)
    message = str(info.value)
    assert "'B'" in message and "tensor" in message and "list" in message


def test_non_contiguous():
    a, _ = _good()
    with pytest.raises(tilelang.KernelArgumentError) as info:
        add(4, 6)(a, torch.ones(6, 4).T)
    message = str(info.value)
    assert "'B'" in message and "contiguous" in message


def test_tensor_for_scalar():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), n: T.int32):
        with T.Kernel(1, threads=1):
            A[0] = n

    kernel = tilelang.compile(main, target="cpu")
    with pytest.raises(tilelang.KernelArgumentError) as info:
        kernel(torch.zeros(4), torch.zeros(4))
    message = str(info.value)
    assert "'n'" in message and "scalar" in message and "int32" in message


@tilelang.jit(out_idx=-1, target="cpu")
def dyn_add():
    M = T.dynamic("m")

    @T.prim_func
    def main(
        A: T.Tensor((M, 4), "float32"),
        B: T.Tensor((M, 4), "float32"),
        C: T.Tensor((M, 4), "float32"),
    ):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(M, 4):
                C[i, j] = A[i, j] + B[i, j]

    return main


def test_dynamic_dims_must_agree():
    with pytest.raises(tilelang.KernelArgumentError) as info:
        dyn_add()(torch.ones(3, 4), torch.ones(5, 4))
    message = str(info.value)
    assert "'B'" in message and "m=5" in message and "m=3" in message


def test_bad_out_idx():
    with pytest.raises(tilelang.KernelArgumentError, match="out_idx 3 is out of range"):
        tilelang.compile(add.get_tir(4, 6), out_idx=3, target="cpu")


def test_thread_dependent_tile_op_names_line():
    """On the CPU a tile op under a threadIdx-dependent branch keeping threads that are not
    one contiguous range is rejected at its line (``if tx == 0:`` runs it once:
    ``testing/python/backends/cuda/test_thread_range_tile_ops.py``)."""

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=4):
                tx = T.get_thread_binding()
                S = T.alloc_shared((8,), "float32")
                if tx % 2 == 0:
                    T.fill(S, 1.0)  # here
                T.copy(S, A)

        return main

    lines, first = inspect.getsourcelines(kernel)
    line = first + next(k for k, text in enumerate(lines) if "# here" in text)
    with pytest.raises(tilelang.CompileError) as info:
        tilelang.compile(kernel(), target="cpu")
    assert f"{os.path.basename(__file__)}:{line}" in str(info.value)
    assert "thread index" in str(info.value)


def test_per_thread_code_runs_for_every_thread():
    """Statements that name threadIdx run once per thread on the CPU."""

    @T.prim_func
    def main(A: T.Tensor((2, 64), "float32"), B: T.Tensor((2, 64), "float32")):
        with T.Kernel(2, threads=64) as bx:
            tx = T.get_thread_binding()
            B[bx, tx] = A[bx, tx] * 2.0 + tx

    kernel = tilelang.compile(main, target="cpu")
    a, b = torch.randn(2, 64), torch.zeros(2, 64)
    kernel(a, b)
    torch.testing.assert_close(b, a * 2 + torch.arange(64).float(), rtol=1e-6, atol=1e-6)


def test_wrong_scalar_type_names_argument():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), n: T.int32):
        with T.Kernel(1, threads=1):
            A[0] = n

    kernel = tilelang.compile(main, target="cpu")
    with pytest.raises(tilelang.KernelArgumentError) as info:
        kernel(torch.zeros(4), 2.5)
    message = str(info.value)
    assert "'n'" in message and "int32" in message and "float" in message
