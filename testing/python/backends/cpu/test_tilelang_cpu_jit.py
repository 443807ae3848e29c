"""JIT behaviour on the CPU target: out_idx forms, multiple outputs, in-place kernels, numpy
inputs, factory caching, ``tilelang.compile``, kernel source, and the profiler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def axpy(N, block=32):
    """Three parameters: X, Y (inputs) and Z = 2 X + Y."""

    @T.prim_func
    def main(
        X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")
    ):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                Z[bx * block + i] = 2.0 * X[bx * block + i] + Y[bx * block + i]

    return main


@pytest.mark.parametrize("out_idx", [2, -1, [2], [-1]])
def test_out_idx_forms(randn, out_idx):
    kernel = tilelang.compile(axpy(50), out_idx=out_idx, target="cpu")
    x, y = randn(50), randn(50)
    z = kernel(x, y)
    assert isinstance(z, torch.Tensor) and z.shape == (50,) and z.dtype == torch.float32
    torch.testing.assert_close(z.double(), 2 * x.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_out_idx_middle_parameter(randn):
    """The output need not be last: out_idx=1 makes Y the output, X and Z the inputs."""

    @T.prim_func
    def main(
        X: T.Tensor((16,), "float32"), Y: T.Tensor((16,), "float32"), Z: T.Tensor((16,), "float32")
    ):
        with T.Kernel(1, threads=1):
            for i in T.serial(16):
                Y[i] = X[i] - Z[i]

    kernel = tilelang.compile(main, out_idx=1, target="cpu")
    x, z = randn(16), randn(16)
    torch.testing.assert_close(kernel(x, z), x - z, rtol=0, atol=0)


@tilelang.jit(out_idx=[1, 2], target="cpu")
def split_sign(N):
    @T.prim_func
    def main(
        X: T.Tensor((N,), "float32"), Pos: T.Tensor((N,), "float32"), Neg: T.Tensor((N,), "int32")
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Pos[i] = T.max(X[i], 0.0)
                Neg[i] = T.if_then_else(X[i] < 0, 1, 0)

    return main


def test_multiple_outputs(randn):
    x = randn(40)
    out = split_sign(40)(x)
    assert isinstance(out, list | tuple) and len(out) == 2
    pos, neg = out
    assert pos.dtype == torch.float32 and neg.dtype == torch.int32
    torch.testing.assert_close(pos, x.clamp(min=0), rtol=0, atol=0)
    assert torch.equal(neg, (x < 0).int())


def test_multiple_outputs_negative_indices(randn):
    kernel = tilelang.compile(split_sign.get_tir(12), out_idx=[-2, -1], target="cpu")
    x = randn(12)
    pos, neg = kernel(x)
    torch.testing.assert_close(pos, x.clamp(min=0), rtol=0, atol=0)
    assert torch.equal(neg, (x < 0).int())


def test_no_out_idx_in_place(randn):
    kernel = tilelang.compile(axpy(70), target="cpu")
    x, y = randn(70), randn(70)
    z = torch.full((70,), float("nan"))
    assert kernel(x, y, z) is None
    torch.testing.assert_close(z.double(), 2 * x.double() + y.double(), rtol=1e-6, atol=1e-6)


def test_numpy_inputs(rng):
    kernel = tilelang.compile(axpy(33), out_idx=-1, target="cpu")
    x = rng.standard_normal(33).astype(np.float32)
    y = rng.standard_normal(33).astype(np.float32)
    z = kernel(x, y)
    assert isinstance(z, np.ndarray) and z.dtype == np.float32
    np.testing.assert_allclose(z, 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_numpy_in_place(rng):
    kernel = tilelang.compile(axpy(20), target="cpu")
    x, y = (rng.standard_normal(20).astype(np.float32) for _ in range(2))
    z = np.zeros(20, dtype=np.float32)
    kernel(x, y, z)
    np.testing.assert_allclose(z, 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_numpy_multiple_outputs(rng):
    x = rng.standard_normal(40).astype(np.float32)
    pos, neg = split_sign(40)(x)
    assert isinstance(pos, np.ndarray) and isinstance(neg, np.ndarray)
    np.testing.assert_array_equal(pos, np.maximum(x, 0))
    np.testing.assert_array_equal(neg, (x < 0).astype(np.int32))


@tilelang.jit(out_idx=-1, target="cpu")
def scaled_copy(N, scale):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i] * scale

    return main


def test_factory_caching(randn):
    k1 = scaled_copy(16, 2.0)
    assert scaled_copy(16, 2.0) is k1  # same args: same kernel object
    assert scaled_copy(N=16, scale=2.0) is scaled_copy(N=16, scale=2.0)
    k2 = scaled_copy(16, 3.0)
    assert k2 is not k1
    x = randn(16)
    torch.testing.assert_close(k1(x), x * 2, rtol=0, atol=0)
    torch.testing.assert_close(k2(x), x * 3, rtol=0, atol=0)


def test_compile_is_cached_by_ir():
    """tilelang.compile of structurally equal functions (traced twice) reuses the kernel."""
    k1 = tilelang.compile(axpy(24), out_idx=-1, target="cpu")
    k2 = tilelang.compile(axpy(24), out_idx=-1, target="cpu")
    assert k1 is k2
    assert tilelang.compile(axpy(24), out_idx=[0], target="cpu") is not k1
    assert tilelang.compile(axpy(25), out_idx=-1, target="cpu") is not k1


def test_jit_on_prim_func_directly(randn):
    """``tilelang.jit`` applied to a prim_func compiles it right away."""
    kernel = tilelang.jit(axpy(10), out_idx=-1, target="cpu")
    assert isinstance(kernel, tilelang.JITKernel)
    x, y = randn(10), randn(10)
    torch.testing.assert_close(
        kernel(x, y).double(), 2 * x.double() + y.double(), rtol=1e-6, atol=1e-6
    )


def test_get_kernel_source():
    kernel = tilelang.compile(axpy(64), out_idx=-1, target="cpu")
    source = kernel.get_kernel_source()
    assert isinstance(source, str) and "def main" in source
    assert "X" in source and "Z" in source
    assert scaled_copy(16, 2.0).get_kernel_source() != scaled_copy(16, 3.0).get_kernel_source()


def test_target_spellings(randn):
    """'cpu', 'llvm' and a dict target all build for the host."""
    x, y = randn(8), randn(8)
    for target in ("cpu", "llvm", {"kind": "llvm"}):
        kernel = tilelang.compile(axpy(8), out_idx=-1, target=target)
        assert kernel.target["kind"] == "cpu"
        torch.testing.assert_close(
            kernel(x, y).double(), 2 * x.double() + y.double(), rtol=1e-6, atol=1e-6
        )


def test_profiler_assert_allclose():
    kernel = tilelang.compile(axpy(128), out_idx=-1, target="cpu")
    profiler = kernel.get_profiler()
    profiler.assert_allclose(lambda x, y: 2 * x + y, atol=1e-5, rtol=1e-5)
    with pytest.raises(AssertionError, match="differ"):
        profiler.assert_allclose(lambda x, y: 2 * x - y, atol=1e-5, rtol=1e-5)


def test_profiler_supply_types():
    kernel = tilelang.compile(axpy(64), out_idx=-1, target="cpu")
    ones = kernel.get_profiler(tilelang.TensorSupplyType.One)
    ones.assert_allclose(lambda x, y: torch.full_like(x, 3.0), atol=0, rtol=0)
    zeros = kernel.get_profiler(tilelang.TensorSupplyType.Zero)
    zeros.assert_allclose(lambda x, y: torch.zeros_like(x), atol=0, rtol=0)


def test_profiler_in_place_kernel():
    """Without out_idx the profiler compares the (mutated) inputs to the reference's outputs."""
    kernel = tilelang.compile(axpy(32), target="cpu")
    profiler = kernel.get_profiler(tilelang.TensorSupplyType.Integer)
    x, y, z = (torch.randint(-3, 3, (32,)).float() for _ in range(3))
    profiler.assert_allclose(lambda x, y, z: (x, y, 2 * x + y), input_tensors=[x, y, z])


def test_profiler_do_bench():
    kernel = tilelang.compile(axpy(256), out_idx=-1, target="cpu")
    ms = kernel.get_profiler().do_bench(warmup=2, rep=5)
    assert isinstance(ms, float) and 0 < ms < 1000
    ms_ref = kernel.get_profiler().do_bench(lambda x, y: 2 * x + y, warmup=1, rep=3)
    assert ms_ref > 0
