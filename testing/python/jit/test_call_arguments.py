"""Calling a compiled kernel with bad arguments: a KernelArgumentError naming the argument;
zero-size tensors are valid arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError


@tilelang.jit(out_idx=[-1], target="cpu")
def add_one_dynamic():
    n = T.dynamic("n")
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((n, m), "float32"), B: T.Tensor((n, m), "float32")):
        with T.Kernel(T.ceildiv(n, 4), threads=1) as bx:
            for i, j in T.grid(4, m):
                if bx * 4 + i < n:
                    B[bx * 4 + i, j] = A[bx * 4 + i, j] + 1.0

    return main


@tilelang.jit(out_idx=[-1], target="cpu")
def row_sums():
    n = T.dynamic("n")
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((n, m), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(n, threads=1) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for j in T.serial(m):
                acc += A[bx, j]
            B[bx] = acc

    return main


@tilelang.jit(out_idx=[-1], target="cpu")
def add_scalar(dtype):
    @T.prim_func
    def main(A: T.Tensor((4,), "int64"), s: dtype, B: T.Tensor((4,), "int64")):
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                B[i] = A[i] + T.cast(s, "int64")

    return main


@pytest.mark.parametrize(
    "bad, words",
    [
        ([[1.0, 2.0]], ["'A'", "expected a tensor", "list"]),
        (None, ["'A'", "expected a tensor", "NoneType"]),
        (3, ["'A'", "expected a tensor", "int"]),
        (torch.zeros(3), ["'A'", "2 dimensions", "[3]"]),
        (torch.zeros(2, 3, 4), ["'A'", "2 dimensions"]),
        (torch.zeros(2, 3, dtype=torch.float64), ["'A'", "dtype float32", "float64"]),
    ],
)
def test_dynamic_kernel_rejects_bad_argument(bad, words):
    kernel = add_one_dynamic()
    with pytest.raises(KernelArgumentError) as info:
        kernel(bad)
    for word in words:
        assert word in str(info.value), str(info.value)


@pytest.mark.parametrize("shape", [(5, 0), (0, 3), (0, 0)])
def test_zero_size_tensors_are_accepted(shape):
    out = add_one_dynamic()(torch.zeros(shape))
    assert tuple(out.shape) == shape


def test_zero_length_reduction_gives_zeros(rng):
    a = torch.zeros((7, 0))
    got = row_sums()(a)
    np.testing.assert_array_equal(got.numpy(), np.zeros(7))
    b = torch.from_numpy(rng.standard_normal((6, 5)).astype(np.float32))
    want = b.double().sum(1).numpy()
    np.testing.assert_allclose(row_sums()(b).double().numpy(), want, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype, value, fits",
    [
        ("int32", 2**40, False),
        ("int32", 2**31, False),
        ("int32", -(2**31) - 1, False),
        ("int32", 2**31 - 1, True),
        ("int32", -(2**31), True),
        ("int64", 2**40, True),
        ("uint8", 256, False),
        ("uint8", -1, False),
        ("uint8", 255, True),
    ],
)
def test_integer_scalar_out_of_range_is_rejected(rng, dtype, value, fits):
    kernel = add_scalar(dtype)
    a = rng.integers(-100, 100, 4)
    if fits:
        got = kernel(torch.from_numpy(a), value)
        np.testing.assert_array_equal(got.numpy(), a + value)
        return
    with pytest.raises(KernelArgumentError) as info:
        kernel(torch.from_numpy(a), value)
    assert "'s'" in str(info.value) and dtype in str(info.value) and str(value) in str(info.value)


def test_scalar_of_wrong_type_is_rejected():
    with pytest.raises(KernelArgumentError, match="'s'"):
        add_scalar("int32")(torch.zeros(4, dtype=torch.int64), 1.5)


def test_wrong_number_of_arguments():
    with pytest.raises(KernelArgumentError, match="takes 1 inputs"):
        add_one_dynamic()(torch.zeros(2, 2), torch.zeros(2, 2))
