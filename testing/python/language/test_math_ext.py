"""Upstream's further scalar math (``tilelang/language/math_ext.py``): inverse trigonometric and
hyperbolic functions, two-argument float functions, bit counts, ``T.fma``/``T.fmul``, the IEEE
operations with a rounding mode and ``T.fast_rcp``. CPU: values against numpy in float64 on
fresh random inputs; CUDA: nvcc builds for sm_80/sm_90a print CUDA's device functions; the GPU
test checks the directed rounding modes bit for bit against numpy's exact results."""

from __future__ import annotations

import shutil
from fractions import Fraction

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline as cuda_pipeline

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

UNARY = {
    "acos": (T.acos, np.arccos, (-0.99, 0.99)),
    "asin": (T.asin, np.arcsin, (-0.99, 0.99)),
    "atan": (T.atan, np.arctan, (-5.0, 5.0)),
    "acosh": (T.acosh, np.arccosh, (1.01, 6.0)),
    "asinh": (T.asinh, np.arcsinh, (-5.0, 5.0)),
    "atanh": (T.atanh, np.arctanh, (-0.95, 0.95)),
    "cosh": (T.cosh, np.cosh, (-4.0, 4.0)),
    "sinh": (T.sinh, np.sinh, (-4.0, 4.0)),
    "fabs": (T.fabs, np.abs, (-4.0, 4.0)),
    "nearbyint": (T.nearbyint, np.rint, (-6.0, 6.0)),
}
BINARY = {
    "atan2": (T.atan2, np.arctan2),
    "copysign": (T.copysign, np.copysign),
    "fmod": (T.fmod, np.fmod),
    "hypot": (T.hypot, np.hypot),
    "ieee_add": (T.ieee_add, np.add),
    "ieee_sub": (T.ieee_sub, np.subtract),
    "ieee_mul": (T.ieee_mul, np.multiply),
    "ieee_fdiv": (T.ieee_fdiv, np.divide),
    "fmul": (T.fmul, np.multiply),
}


@tilelang.jit(out_idx=-1, target="cpu")
def unary_kernel(N, name, dtype):
    fn = UNARY[name][0]

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = fn(A[bx * 32 + i])

    return main


@tilelang.jit(out_idx=-1, target="cpu")
def binary_kernel(N, name, dtype):
    fn = BINARY[name][0]

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                C[i] = fn(A[i], B[i])

    return main


def _round_to(x64, dtype):
    return x64.astype(np.float32).astype(np.float64) if dtype == "float32" else x64


@pytest.mark.parametrize("name", list(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_unary(rng, name, dtype):
    _, ref_fn, (lo, hi) = UNARY[name]
    x = rng.uniform(lo, hi, 77)
    if name == "nearbyint":
        x[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 3.5]  # ties to even
    a = torch.from_numpy(x).to(getattr(torch, dtype))
    out = unary_kernel(77, name, dtype)(a).double().numpy()
    ref = ref_fn(a.double().numpy())
    tol = {"float32": 4e-6, "float64": 1e-13, "float16": 2e-3}[dtype]
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", list(BINARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binary(rng, name, dtype):
    _, ref_fn = BINARY[name]
    a = torch.from_numpy(rng.uniform(-5, 5, 45)).to(getattr(torch, dtype))
    b = torch.from_numpy(rng.uniform(0.5, 3, 45) * rng.choice([-1, 1], 45)).to(a.dtype)
    out = binary_kernel(45, name, dtype)(a, b).double().numpy()
    ref = ref_fn(a.double().numpy(), b.double().numpy())
    if name.startswith(("ieee", "fmul")):  # correctly rounded: exact to the element type
        np.testing.assert_array_equal(out, _round_to(ref, dtype))
    else:
        tol = 4e-6 if dtype == "float32" else 1e-13
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@tilelang.jit(out_idx=-1, target="cpu")
def misc_kernel(N):
    @T.prim_func
    def main(
        X: T.Tensor((N,), "float32"),
        Y: T.Tensor((N,), "float32"),
        Z: T.Tensor((N,), "float32"),
        K: T.Tensor((N,), "int32"),
        O: T.Tensor((N, 8), "float64"),
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                O[i, 0] = T.fma(X[i], Y[i], Z[i])
                O[i, 1] = T.ieee_fmaf(X[i], Y[i], Z[i], "rn")
                O[i, 2] = T.ldexp(X[i], K[i])
                O[i, 3] = T.popcount(K[i])
                O[i, 4] = T.clz(K[i] + 1)
                O[i, 5] = T.bitwise_not(K[i])
                O[i, 6] = T.ieee_frcp(Y[i]) + T.ieee_fsqrt(T.fabs(Y[i])) * 0.0
                O[i, 7] = T.if_then_else(
                    T.likely(K[i] > 3), T.fast_rcp(Y[i]), T.ieee_frsqrt(T.fabs(Y[i]))
                )

    return main


def test_fma_ldexp_bits(rng):
    n = 53
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    k = rng.integers(0, 9, n).astype(np.int32)
    out = misc_kernel(n)(*(torch.from_numpy(v) for v in (x, y, z, k))).numpy()
    # the exact x * y + z as a fraction, rounded once to float32 (nearest, ties to even)
    fma = np.array(
        [
            _round_fraction(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))
            for a, b, c in zip(x, y, z)
        ]
    )
    np.testing.assert_array_equal(out[:, 0], fma)
    np.testing.assert_array_equal(out[:, 1], fma)
    np.testing.assert_array_equal(out[:, 2], np.ldexp(x, k).astype(np.float64))
    np.testing.assert_array_equal(out[:, 3], [bin(v).count("1") for v in k])
    np.testing.assert_array_equal(out[:, 4], [32 - int(v + 1).bit_length() for v in k])
    np.testing.assert_array_equal(out[:, 5], ~k)
    np.testing.assert_array_equal(out[:, 6], (np.float32(1) / y).astype(np.float64))
    rsq = (1.0 / np.sqrt(np.abs(y).astype(np.float64))).astype(np.float32)
    want7 = np.where(k > 3, (np.float32(1) / y).astype(np.float64), rsq)
    np.testing.assert_allclose(out[:, 7], want7, rtol=2e-7)


def _round_fraction(q):
    """The float32 nearest to the rational ``q`` (ties to even)."""
    near = np.float32(float(q))  # float(q) is q rounded to float64; step to the float32 neighbours
    lo, hi = (near, np.nextafter(near, np.float32(np.inf))) if Fraction(float(near)) <= q else (
        np.nextafter(near, np.float32(-np.inf)), near)  # fmt: skip
    dlo, dhi = q - Fraction(float(lo)), Fraction(float(hi)) - q
    if dlo != dhi:
        return lo if dlo < dhi else hi
    return lo if int(lo.view(np.int32)) % 2 == 0 else hi


def test_cdiv_is_ceildiv():
    assert T.cdiv(10, 3) == 4 and T.cdiv(9, 3) == 3


@tilelang.jit(out_idx=-1)
def directed_kernel(N, mode, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N, 5), dtype)):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                j = bx * 64 + i
                if j < N:
                    C[j, 0] = T.ieee_add(A[j], B[j], mode)
                    C[j, 1] = T.ieee_sub(A[j], B[j], mode)
                    C[j, 2] = T.ieee_mul(A[j], B[j], mode)
                    C[j, 3] = T.ieee_fdiv(A[j], B[j], mode)
                    C[j, 4] = T.ieee_fmaf(A[j], B[j], A[j], mode)

    return main


def test_directed_mode_is_an_error_on_cpu():
    with pytest.raises(
        errors.CompileError,
        match=r"test_math_ext.py:\d+: T.ieee_\w+\(\.\.\., rounding_mode='rz'.*cpu backend",
    ):
        tilelang.compile(directed_kernel.get_tir(33, "rz"), out_idx=-1, target="cpu")


def test_bad_arguments():
    with pytest.raises(ValueError, match="rounding_mode must be one of"):
        T.ieee_add(T.float32(1.0), T.float32(2.0), "up")
    with pytest.raises(errors.TraceError, match="T.acos takes float"):
        T.acos("x")
    with pytest.raises(errors.TraceError, match="float32 or float64"):
        T.ieee_add(T.float16(1.0), T.float16(2.0))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_prints_device_functions(arch):
    func = directed_kernel.get_tir(100, "rz")
    art = cuda_pipeline.build(func, {"kind": "cuda", "arch": arch}, compiler="nvcc")
    src = art.kernel_source
    for name in ("__fadd_rz", "__fsub_rz", "__fmul_rz", "__fdiv_rz", "__fmaf_rz"):
        assert name in src, name
    assert art.device_binary


def _directed_ref(a, b, mode):
    """float32 results of a op b rounded toward ``mode`` (numpy float64 values are exact for
    add/sub/mul of float32; division and fma are rounded from float64 then corrected)."""
    out = []
    for exact in (a + b, a - b, a * b, a / b, a * b + a):
        near = exact.astype(np.float32)
        back = near.astype(np.float64)
        up = np.where(back < exact, np.nextafter(near, np.float32(np.inf)), near)
        down = np.where(back > exact, np.nextafter(near, np.float32(-np.inf)), near)
        pick = {"rn": near, "ru": up, "rd": down,
                "rz": np.where(exact >= 0, down, up)}[mode]  # fmt: skip
        out.append(pick)
    return np.stack(out, axis=1)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["rn", "rz", "ru", "rd"])
def test_gpu_directed_rounding(rng, mode):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    n = 1000
    a = rng.standard_normal(n).astype(np.float32)
    b = (rng.standard_normal(n) * 3).astype(np.float32)
    out = directed_kernel(n, mode)(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda())
    ref = _directed_ref(a.astype(np.float64), b.astype(np.float64), mode)
    got = out.cpu().numpy()
    # add/sub/mul exact references; division/fma references exact but for float64 rounding
    np.testing.assert_array_equal(got[:, :3], ref[:, :3])
    np.testing.assert_allclose(got[:, 3:], ref[:, 3:], rtol=1.2e-7, atol=0)
