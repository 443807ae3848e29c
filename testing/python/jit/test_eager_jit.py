"""Eager-form ``@tilelang.jit`` on the CPU backend: results, specialisation and caching.

The function body is the kernel (upstream TileLang's lead example): tensors annotated in
the body, ``T.const`` dimensions bound from the arguments, ``T.empty`` outputs allocated
by the launcher. GPU versions at the end carry ``@pytest.mark.cuda``.
"""

import os
import shutil
import sys

import numpy as np
import pytest
import torch
from tvm_tirx import ir

import tilelang
import tilelang.language as T
from tilelang.language import eager as eager_language

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_kernels import make_axpy_pair, make_matmul_relu, make_scale_rows  # noqa: E402

HAVE_GPU = torch.cuda.is_available()
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


@pytest.fixture
def count_traces(monkeypatch):
    """Counts the eager body's traces by phase: {1: n, 2: m}."""
    counts = {1: 0, 2: 0}
    original = eager_language.EagerBody.trace

    def counting(self, phase, *args, **kwargs):
        counts[phase] += 1
        return original(self, phase, *args, **kwargs)

    monkeypatch.setattr(eager_language.EagerBody, "trace", counting)
    return counts


def _relu_mm(a, b):
    return torch.relu(a.double() @ b.double())


# --------------------------------------------------------------------------- results
@pytest.mark.parametrize("shape", [(70, 40, 50), (32, 32, 32), (5, 3, 17)])
def test_readme_matmul_relu(randn, shape):
    """README's program, non-tile-multiple shapes, small tiles, against float64 torch."""
    matmul_relu = make_matmul_relu(target="cpu")
    m, n, k = shape
    a, b = randn(m, k, dtype="float16"), randn(k, n, dtype="float16")
    c = matmul_relu(a, b, block_M=32, block_N=32, block_K=16)
    assert matmul_relu.mode == "eager"
    assert c.shape == (m, n) and c.dtype == torch.float16
    torch.testing.assert_close(c.double(), _relu_mm(a, b), atol=2e-2, rtol=2e-2)
    assert (c >= 0).all()


def test_tuple_outputs_and_runtime_scalar(randn):
    """Several T.empty outputs come back as a tuple, in the order of the return."""
    axpy_pair = make_axpy_pair(target="cpu")
    x, y = randn(100), randn(100)
    out = axpy_pair(x, y, 2.5)
    assert isinstance(out, tuple) and len(out) == 2
    w, z = out
    torch.testing.assert_close(w, x - y)
    torch.testing.assert_close(z, 2.5 * x + y)
    # the scalar is a kernel argument: another value, the same kernel
    _, z2 = axpy_pair(x, y, -1.0)
    torch.testing.assert_close(z2, -x + y)
    assert len(axpy_pair._kernel_cache) == 1


def test_dynamic_dimension_one_kernel(randn, count_traces):
    """T.dynamic rows: every row count runs the same kernel; the output follows the input."""
    scale_rows = make_scale_rows(target="cpu")
    for m in (5, 16, 41):
        a = randn(m, 8)
        torch.testing.assert_close(scale_rows(a), a * 2)
    assert len(scale_rows._kernel_cache) == 1
    assert count_traces == {1: 1, 2: 1}
    (kernel,) = scale_rows._kernel_cache.values()
    rows, width = kernel.prim_func.params[0].ty.shape
    assert isinstance(rows, ir.Var) and int(width) == 8
    # a new T.const width is a new kernel
    a = randn(3, 4)
    torch.testing.assert_close(scale_rows(a), a * 2)
    assert len(scale_rows._kernel_cache) == 2


def test_compile_time_scalars_and_keyword_overrides(randn, count_traces):
    """int/float compile-time parameters and keyword overrides of tile sizes specialise."""
    scale_rows = make_scale_rows(target="cpu")
    a = randn(19, 8)
    torch.testing.assert_close(scale_rows(a, 3.0), a * 3)
    torch.testing.assert_close(scale_rows(a, factor=0.5, block=8), a * 0.5)
    torch.testing.assert_close(scale_rows(a, block=8, factor=0.5), a * 0.5)
    assert len(scale_rows._kernel_cache) == 2
    assert count_traces == {1: 2, 2: 2}


# --------------------------------------------------------------------------- caching
def test_same_shapes_same_kernel_new_shapes_new_kernel(randn, count_traces):
    matmul_relu = make_matmul_relu(target="cpu")
    opts = dict(block_M=16, block_N=16, block_K=16)
    a, b = randn(20, 24, dtype="float16"), randn(24, 12, dtype="float16")
    k1 = matmul_relu.compile(a, b, **opts)
    matmul_relu(a, b, **opts)
    a2, b2 = randn(20, 24, dtype="float16"), randn(24, 12, dtype="float16")
    assert matmul_relu.compile(a2, b2, **opts) is k1
    torch.testing.assert_close(
        matmul_relu(a2, b2, **opts).double(), _relu_mm(a2, b2), atol=2e-2, rtol=2e-2
    )
    assert count_traces == {1: 1, 2: 1}
    a3, b3 = randn(21, 24, dtype="float16"), randn(24, 12, dtype="float16")
    k3 = matmul_relu.compile(a3, b3, **opts)
    assert k3 is not k1 and len(matmul_relu._kernel_cache) == 2
    assert count_traces == {1: 1, 2: 2}  # phase 1 is per compile-time arguments only


def test_cached_positional_path_and_new_shapes(randn, count_traces):
    """The generated positional path: hits launch without tracing, misses specialise."""
    matmul_relu = make_matmul_relu(target="cpu")
    for m in (8, 8, 24, 8, 24):
        a, b = randn(m, 16, dtype="float16"), randn(16, 8, dtype="float16")
        c = matmul_relu(a, b, 16, 16, 16)
        torch.testing.assert_close(c.double(), _relu_mm(a, b), atol=2e-2, rtol=2e-2)
    assert count_traces == {1: 1, 2: 2}
    assert len(matmul_relu._kernel_cache) == 2


def test_compile_with_const_keywords(randn):
    """README's ``.compile(M=..., N=..., K=..., block_M=...)``: no tensors needed; the
    eager call with those shapes reuses the kernel."""
    matmul_relu = make_matmul_relu(target="cpu")
    kernel = matmul_relu.compile(M=48, N=32, K=40, block_M=16, block_N=16, block_K=8)
    assert isinstance(kernel, tilelang.JITKernel)
    a, b = randn(48, 40, dtype="float16"), randn(40, 32, dtype="float16")
    torch.testing.assert_close(kernel(a, b).double(), _relu_mm(a, b), atol=2e-2, rtol=2e-2)
    assert matmul_relu.compile(a, b, block_M=16, block_N=16, block_K=8) is kernel
    c = matmul_relu(a, b, block_M=16, block_N=16, block_K=8)
    torch.testing.assert_close(c.double(), _relu_mm(a, b), atol=2e-2, rtol=2e-2)
    assert len(matmul_relu._kernel_cache) == 1
    assert "matmul_relu" in matmul_relu.get_kernel_source(
        M=48, N=32, K=40, block_M=16, block_N=16, block_K=8
    )


def test_get_tir_static_shapes_and_param_order():
    """Parameters in signature order, outputs last (upstream's order), shapes specialised;
    annotations stand in for tensors; tilelang.compile reads the outputs from the IR."""
    axpy_pair = make_axpy_pair(target="cpu")
    func = axpy_pair.get_tir(T.Tensor((40,), T.float32), T.Tensor((40,), T.float32), 1.0)
    assert [p.name for p in func.params] == ["X", "Y", "alpha", "Z", "W"]
    assert [int(s) for s in func.params[0].ty.shape] == [40]
    assert list(func.attrs["tilelang_out_idx"]) == [4, 3]
    kernel = tilelang.compile(func, target="cpu")
    x, y = torch.ones(40), torch.full((40,), 2.0)
    w, z = kernel(x, y, 3.0)
    assert torch.equal(w, x - y) and torch.equal(z, 3 * x + y)


def test_par_compile_eager_fills_the_cache(count_traces):
    matmul_relu = make_matmul_relu(target="cpu")
    configs = [
        {"M": 16, "N": 16, "K": 16, "block_M": 16, "block_N": 16, "block_K": 16},
        {"M": 24, "N": 16, "K": 16, "block_M": 16, "block_N": 16, "block_K": 16},
    ]
    kernels = matmul_relu.par_compile(configs, num_workers=2)
    assert all(isinstance(k, tilelang.JITKernel) for k in kernels)
    assert kernels[0] is not kernels[1]
    a, b = torch.ones(24, 16, dtype=torch.float16), torch.ones(16, 16, dtype=torch.float16)
    c = matmul_relu(a, b, block_M=16, block_N=16, block_K=16)
    assert torch.equal(c, torch.full((24, 16), 16.0, dtype=torch.float16))
    assert count_traces[2] == 2  # the call found the par_compiled kernel


# --------------------------------------------------------------------------- forms
def test_annotation_forms(randn):
    """Signature annotations, T.Tensor[...] subscripts, T.StridedTensor with const strides
    (views of a bigger tensor), and outputs passed in instead of returned."""

    @T.macro
    def copy_tile(A, B):
        M, N = A.shape
        with T.Kernel(T.ceildiv(M, 16), T.ceildiv(N, 16), threads=32) as (bx, by):
            T.copy(
                A[bx * 16 : bx * 16 + 16, by * 16 : by * 16 + 16],
                B[bx * 16 : bx * 16 + 16, by * 16 : by * 16 + 16],
            )

    @tilelang.jit(target="cpu")
    def copy_sig(A: T.Tensor[[32, 32], T.float32], B: T.Tensor[[32, 32], T.float32]):
        copy_tile(A, B)

    @tilelang.jit(target="cpu")
    def copy_strided(A, B):
        N, M, SN, SM = T.const("N, M, SN, SM")
        A: T.StridedTensor[[N, M], [SN, SM], T.float32]
        B: T.StridedTensor[[N, M], [SN, SM], T.float32]
        copy_tile(A, B)

    a, b = randn(32, 32), torch.zeros(32, 32)
    assert copy_sig(a, b) is None and torch.equal(a, b)
    big_a, big_b = randn(32, 2, 32, 2), torch.zeros(32, 2, 32, 2)
    copy_strided(big_a[:, 0, :, 0], big_b[:, 0, :, 0])
    assert torch.equal(big_a[:, 0, :, 0], big_b[:, 0, :, 0])
    assert torch.count_nonzero(big_b[:, 1]) == 0
    (kernel,) = copy_strided._kernel_cache.values()
    assert copy_strided.mode == copy_sig.mode == "eager"
    assert kernel.prim_func.params[0].ty.layout is not None


def test_macro_declares_output(randn):
    """T.empty inside a T.macro called by the eager body, returned through it."""

    @T.macro
    def doubled(A):
        M, N = A.shape
        B = T.empty(M, N, dtype=T.float32)
        with T.Kernel(T.ceildiv(M, 8), threads=32) as bx:
            for i, j in T.Parallel(8, N):
                if bx * 8 + i < M:
                    B[bx * 8 + i, j] = A[bx * 8 + i, j] * 2
        return B

    @tilelang.jit(target="cpu")
    def twice(A):
        M, N = T.const("M N")
        A: T.Tensor((M, N), T.float32)
        return doubled(A)

    a = randn(13, 5)
    torch.testing.assert_close(twice(a), a * 2)


def test_numpy_inputs_and_scalars(rng):
    scale_rows = make_scale_rows(target="cpu")
    a = rng.standard_normal((7, 4)).astype(np.float32)
    out = scale_rows(a)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, a * 2, rtol=1e-6)
    axpy_pair = make_axpy_pair(target="cpu")
    x = torch.arange(6, dtype=torch.float32)
    _, z = axpy_pair(x, x, np.float32(2.0))  # a numpy scalar is a scalar, not a tensor
    torch.testing.assert_close(z, 3 * x)


def test_size_one_dims_ignore_strides(randn):
    """A (8, 1) view with stride (1, 8) is dense (torch calls it contiguous): accepted."""
    scale_rows = make_scale_rows(target="cpu")
    column = randn(1, 8).t()
    assert column.stride() == (1, 8)
    torch.testing.assert_close(scale_rows(column), column * 2)


# --------------------------------------------------------------------------- CUDA
def test_cuda_lowering_emulated(rng):
    """The eager kernels' CUDA (sm_80) lowering run by the CUDA emulator: README's program
    with tails (cp.async, ldmatrix, mma.sync, the ReLU on the fragment) and a T.dynamic
    row count bound from the array at run time."""
    from tilelang.backends.cuda import pipeline
    from tilelang.testing import cuda_emulator

    sm80 = {"kind": "cuda", "arch": "sm_80"}
    matmul_relu = make_matmul_relu(target="cpu")
    a = rng.standard_normal((70, 50)).astype(np.float16)
    b = rng.standard_normal((50, 40)).astype(np.float16)
    func = matmul_relu.get_tir(a, b, block_M=64, block_N=64, block_K=32)
    out = np.full((70, 40), np.nan, np.float16)
    out = cuda_emulator.emulate(pipeline.lower(func, sm80), a, b, out)[2]
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=2e-2)
    scale_rows = make_scale_rows(target="cpu")
    x = rng.standard_normal((37, 8)).astype(np.float32)
    func = scale_rows.get_tir(x, 3.0)
    out = cuda_emulator.emulate(pipeline.lower(func, sm80), x, np.zeros_like(x))[1]
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


@needs_nvcc
def test_readme_compile_cuda_source_sm90a():
    """README's ``.compile(M=1024, ...)`` for CUDA sm_90a (nvcc here, no GPU needed)."""
    matmul_relu = make_matmul_relu(target="cuda -arch=sm_90a")
    kernel = matmul_relu.compile(M=1024, N=1024, K=1024, block_M=128, block_N=128, block_K=32)
    src = kernel.get_kernel_source()
    assert kernel.target == {"kind": "cuda", "arch": "sm_90a"}
    # 128 threads computing plus the producer warpgroup of the warp-specialized loop
    assert "__global__ void __launch_bounds__(256) matmul_relu_kernel(" in src
    assert "wgmma" in src and "tl::tma_load_2d" in src
    assert matmul_relu.get_kernel_source(M=1024, N=1024, K=1024) == src


@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 520, 200)])
def test_readme_matmul_relu_gpu(shape):
    """README's program on the GPU with its default 128x128x32 tiles."""
    matmul_relu = make_matmul_relu()
    m, n, k = shape
    a = torch.randn(m, k, dtype=torch.float16, device="cuda")
    b = torch.randn(k, n, dtype=torch.float16, device="cuda")
    c = matmul_relu(a, b)
    assert c.device.type == "cuda"
    torch.testing.assert_close(c.double(), _relu_mm(a, b), atol=5e-2, rtol=2e-2)
    assert matmul_relu.compile(a, b) is matmul_relu.compile(M=m, N=n, K=k)


@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
def test_tuple_outputs_dynamic_gpu():
    axpy_pair = make_axpy_pair()
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    w, z = axpy_pair(x, y, 0.5)
    torch.testing.assert_close(w, x - y)
    torch.testing.assert_close(z, 0.5 * x + y)
    scale_rows = make_scale_rows()
    for m in (3, 64, 257):
        a = torch.randn(m, 32, device="cuda")
        torch.testing.assert_close(scale_rows(a), a * 2)
    assert len(scale_rows._kernel_cache) == 1


@pytest.mark.cuda
@pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")
def test_cpu_tensor_refused_on_gpu():
    matmul_relu = make_matmul_relu()
    a = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(tilelang.KernelArgumentError, match="argument 'A': expected a CUDA tensor"):
        matmul_relu(a, a.cuda())
