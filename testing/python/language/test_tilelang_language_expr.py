"""Scalar expressions on the CPU target: math functions, T.max/T.min, T.if_then_else,
T.infinity, T.cast, T.ceildiv, comparisons, integer arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T

UNARY = {
    "exp": (T.exp, np.exp, "any"),
    "exp2": (T.exp2, np.exp2, "any"),
    "log": (T.log, np.log, "positive"),
    "log2": (T.log2, np.log2, "positive"),
    "sqrt": (T.sqrt, np.sqrt, "positive"),
    "rsqrt": (T.rsqrt, lambda x: 1.0 / np.sqrt(x), "positive"),
    "tanh": (T.tanh, np.tanh, "any"),
    "abs": (T.abs, np.abs, "any"),
    "sigmoid": (T.sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x)), "any"),
    "floor": (T.floor, np.floor, "any"),
    "ceil": (T.ceil, np.ceil, "any"),
    "trunc": (T.trunc, np.trunc, "any"),
    "round": (T.round, np.round, "any"),  # half to even, as numpy
    "erf": (T.erf, np.vectorize(math.erf), "any"),
    "sin": (T.sin, np.sin, "any"),
    "cos": (T.cos, np.cos, "any"),
    "log1p": (T.log1p, np.log1p, "positive"),
    "log10": (T.log10, np.log10, "positive"),
    "exp10": (T.exp10, lambda x: 10.0**x, "positive"),
}


@tilelang.jit(out_idx=-1, target="cpu")
def unary(N, name, dtype):
    fn = UNARY[name][0]

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = fn(A[i])

    return main


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_unary_math(rng, name, dtype):
    _, ref_fn, domain = UNARY[name]
    x = rng.uniform(0.05, 4.0, 64) if domain == "positive" else rng.uniform(-4.0, 4.0, 64)
    a = torch.from_numpy(x).to(getattr(torch, dtype))
    out = unary(64, name, dtype)(a)
    ref = ref_fn(a.double().numpy())
    # one rounding of the result to the element type
    tol = {"float32": 2e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=tol, atol=tol)


@tilelang.jit(out_idx=-1, target="cpu")
def binary_ops(N):
    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), Out: T.Tensor((6, N), "float32")
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Out[0, i] = T.pow(T.abs(A[i]), B[i])
                Out[1, i] = T.max(A[i], B[i])
                Out[2, i] = T.min(A[i], B[i], 0.5)
                Out[3, i] = T.if_then_else(A[i] > B[i], A[i] - B[i], 0.0)
                Out[4, i] = T.if_then_else(A[i] == B[i], 1.0, T.cast(A[i] != B[i], "float32") * 2.0)
                Out[5, i] = T.pow(A[i], 2.0)

    return main


def test_binary_ops(randn):
    N = 48
    a, b = randn(N), randn(N)
    b[:5] = a[:5]  # exercise equality
    out = binary_ops(N)(a, b).double()
    x, y = a.double(), b.double()
    torch.testing.assert_close(out[0], x.abs() ** y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1], torch.maximum(x, y))
    torch.testing.assert_close(
        out[2], torch.minimum(torch.minimum(x, y), torch.tensor(0.5).double())
    )
    torch.testing.assert_close(out[3], (x - y).clamp(min=0), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out[4], torch.where(x == y, 1.0, 2.0).double())
    torch.testing.assert_close(out[5], x * x, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def infinities(N):
    """T.infinity, -T.infinity and comparisons against them; T.max_value/T.min_value."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((4, N), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Out[0, i] = T.if_then_else(A[i] > 0, T.infinity("float32"), -T.infinity(T.float32))
                Out[1, i] = T.max(A[i], -T.infinity("float32"))
                Out[2, i] = T.exp(-T.infinity("float32")) + A[i]
                Out[3, i] = T.if_then_else(A[i] > 0, T.max_value("float32"), T.min_value("float32"))

    return main


def test_infinity(randn):
    a = randn(20)
    out = infinities(20)(a)
    pos = a > 0
    assert torch.equal(out[0], torch.where(pos, float("inf"), float("-inf")))
    assert torch.equal(out[1], a)
    assert torch.equal(out[2], a)
    fmax = torch.finfo(torch.float32).max
    assert torch.equal(out[3], torch.where(pos, fmax, -fmax))


@tilelang.jit(out_idx=-1, target="cpu")
def casts(N):
    """T.cast between float and integer types, and dtype-object calls (T.float16(x))."""

    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"), I: T.Tensor((N,), "int32"), H: T.Tensor((N,), "float16")
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                I[i] = T.cast(A[i] * 10.0, "int32")
                H[i] = T.float16(A[i]) * T.float16(2)

    return main


def test_casts(randn):
    a = randn(32)
    # The kernel returns its two outputs; the int32 output's argument is an input here.
    kernel = tilelang.compile(casts.get_tir(32), out_idx=[1, 2], target="cpu")
    i, h = kernel(a)
    assert torch.equal(i, (a * 10.0).to(torch.int32))  # truncation toward zero
    assert torch.equal(h, a.to(torch.float16) * 2)


@tilelang.jit(out_idx=-1, target="cpu")
def integer_math(N, d):
    """Integer arithmetic on indices: T.ceildiv, //, %, T.max/T.min of ints, shifts."""

    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), Out: T.Tensor((5, N), "int32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Out[0, i] = T.ceildiv(A[i], d)
                Out[1, i] = A[i] // d
                Out[2, i] = A[i] % d
                Out[3, i] = T.max(A[i], i) + T.min(A[i], 3)
                Out[4, i] = T.shift_left(A[i], 2) + T.ceildiv(N, d)

    return main


def test_integer_math(rng):
    N, d = 40, 7
    a = torch.from_numpy(rng.integers(0, 1000, size=N).astype(np.int32))
    out = integer_math(N, d)(a).long()
    x = a.long()
    idx = torch.arange(N)
    assert torch.equal(out[0], (x + d - 1) // d)
    assert torch.equal(out[1], x // d)
    assert torch.equal(out[2], x % d)
    assert torch.equal(out[3], torch.maximum(x, idx) + torch.minimum(x, torch.tensor(3)))
    assert torch.equal(out[4], x * 4 + (N + d - 1) // d)


def test_python_values_stay_python():
    """On Python numbers T.max/T.min/T.ceildiv/T.abs compute now (usable as shapes)."""
    assert T.ceildiv(10, 4) == 3 and T.max(3, 9, 4) == 9 and T.min(2.5, 1) == 1 and T.abs(-2) == 2


@tilelang.jit(out_idx=-1, target="cpu")
def compare_store(N):
    """Storing comparisons (bool) into numeric tensors converts them to 0/1."""

    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), Out: T.Tensor((3, N), "int32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Out[0, i] = A[i] == 3
                Out[1, i] = A[i] != 3
                Out[2, i] = A[i] < 3

    return main


def test_compare_store(rng):
    a = torch.from_numpy(rng.integers(0, 6, size=30).astype(np.int32))
    out = compare_store(30)(a)
    assert torch.equal(out[0], (a == 3).int())
    assert torch.equal(out[1], (a != 3).int())
    assert torch.equal(out[2], (a < 3).int())


@tilelang.jit(out_idx=[1], target="cpu")
def signed_int_ops(N, d):
    """// and % on negative integers follow Python (floor) semantics; casts truncate."""

    @T.prim_func
    def main(
        A: T.Tensor((N,), "int32"), Out: T.Tensor((3, N), "int32"), F: T.Tensor((N,), "float32")
    ):
        with T.Kernel(1, threads=1):
            for i in T.serial(N):
                Out[0, i] = A[i] // d
                Out[1, i] = A[i] % d
                Out[2, i] = T.cast(F[i], "int32")

    return main


def test_signed_division_and_truncating_cast(rng, randn):
    N, d = 64, 3
    a = torch.from_numpy(rng.integers(-50, 50, size=N).astype(np.int32))
    f = randn(N, scale=5.0)
    out = signed_int_ops(N, d)(a, f)
    assert torch.equal(out[0], torch.div(a, d, rounding_mode="floor"))
    assert torch.equal(out[1], torch.remainder(a, d))
    assert torch.equal(out[2], f.to(torch.int32))


@tilelang.jit(out_idx=-1, target="cpu")
def double_it(N, dtype):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = A[i] + A[i]

    return main


@pytest.mark.parametrize("dtype", ["float64", "int8", "uint8", "int16", "int64"])
def test_other_element_types(rng, dtype):
    info = np.iinfo(dtype) if "int" in dtype else None
    if info is not None:
        a = rng.integers(info.min // 2, info.max // 2, size=40).astype(dtype)
    else:
        a = rng.standard_normal(40)
    a = torch.from_numpy(a)
    assert torch.equal(double_it(40, dtype)(a), a + a)


@tilelang.jit(out_idx=-1, target="cpu")
def masked_select(N):
    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"), Mask: T.Tensor((N,), "bool"), B: T.Tensor((N,), "float32")
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = T.if_then_else(Mask[i], A[i], -A[i])

    return main


def test_bool_tensor_mask(randn, rng):
    a = randn(50)
    mask = torch.from_numpy(rng.integers(0, 2, size=50).astype(bool))
    assert torch.equal(masked_select(50)(a, mask), torch.where(mask, a, -a))


@tilelang.jit(out_idx=-1, target="cpu")
def bit_ops(N):
    """Python bit operators on run-time integers and the T.* bitwise helpers."""

    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), B: T.Tensor((7, N), "int32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(N):
                B[0, i] = A[i] & 0xF
                B[1, i] = A[i] | 0x100
                B[2, i] = A[i] ^ 0x55
                B[3, i] = A[i] << 2
                B[4, i] = A[i] >> 1
                B[5, i] = T.bitwise_and(T.shift_right(A[i], 4), 7)
                B[6, i] = T.bitwise_xor(T.bitwise_or(A[i], 1), 3)

    return main


def test_bit_ops(rng):
    a = torch.from_numpy(rng.integers(0, 1 << 16, size=24).astype(np.int32))
    ref = torch.stack([a & 15, a | 256, a ^ 0x55, a << 2, a >> 1, (a >> 4) & 7, (a | 1) ^ 3])
    assert torch.equal(bit_ops(24)(a), ref)
