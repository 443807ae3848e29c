"""JITKernel's call path: the fast path bound on the first ``out_idx`` call behaves like the
general one (fresh contiguous outputs, numpy in and out, the same argument errors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def scale(M, N, out_first=False, dtype="float32"):
    """Y = 2 X (+ 1 for the float16 variant), Y first or last."""

    @T.prim_func
    def last(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(M, N):
                Y[i, j] = X[i, j] * 2.0

    @T.prim_func
    def first(Y: T.Tensor((M, N), dtype), X: T.Tensor((M, N), dtype)):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(M, N):
                Y[i, j] = X[i, j] * 2.0

    return first if out_first else last


@pytest.fixture(scope="module")
def kernel():
    return tilelang.compile(scale(4, 6), out_idx=-1, target="cpu")


def _errors(kernel, *args):
    with pytest.raises(tilelang.KernelArgumentError) as info:
        kernel(*args)
    return str(info.value)


def test_fresh_contiguous_outputs(kernel):
    x = torch.randn(4, 6)
    outs = [kernel(x) for _ in range(3)]  # the 2nd and 3rd take the bound fast path
    assert kernel._fast is not None
    for y in outs:
        assert y.shape == (4, 6) and y.dtype == torch.float32 and y.is_contiguous()
        torch.testing.assert_close(y, x * 2)
    assert len({y.data_ptr() for y in outs}) == 3


@pytest.mark.parametrize(
    "args,words",
    [
        ((torch.ones(4, 7),), ["'X'", "[4, 6]", "[4, 7]"]),
        ((torch.ones(4, 6, dtype=torch.float16),), ["'X'", "float32", "float16"]),
        ((torch.ones(6, 4).T,), ["'X'", "contiguous"]),
        (([[1.0] * 6] * 4,), ["'X'", "tensor", "list"]),
        ((), ["1 inputs", "X", "got 0"]),
        ((torch.ones(4, 6), torch.ones(4, 6)), ["1 inputs", "got 2"]),
    ],
)
def test_errors_are_the_same_on_the_fast_path(args, words):
    fresh = tilelang.compile(scale(4, 6), out_idx=-1, target="cpu")
    first = _errors(fresh, *args)  # before the fast path is bound
    fresh(torch.ones(4, 6))
    assert fresh._fast is not None
    assert _errors(fresh, *args) == first
    assert all(w in first for w in words), first


def test_numpy_after_the_fast_path(kernel):
    kernel(torch.ones(4, 6))
    y = kernel(np.full((4, 6), 3, np.float32))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, np.full((4, 6), 6, np.float32))


def test_output_not_last_uses_the_general_path():
    k = tilelang.compile(scale(3, 5, out_first=True), out_idx=0, target="cpu")
    x = torch.randn(3, 5)
    for _ in range(2):
        torch.testing.assert_close(k(x), x * 2)
    assert k._fast is None


def test_dynamic_output_shape():
    M = T.dynamic("m")

    @T.prim_func
    def main(X: T.Tensor((M, 4), "float32"), Y: T.Tensor((M * 2, 4), "float32")):
        with T.Kernel(1, threads=1):
            for i, j in T.grid(M, 4):
                Y[i, j] = X[i, j] + 1.0
                Y[M + i, j] = X[i, j]

    k = tilelang.compile(main, out_idx=-1, target="cpu")
    for m in (3, 7, 3):
        x = torch.randn(m, 4)
        torch.testing.assert_close(k(x), torch.cat([x + 1, x]))
