"""``T.alloc_global`` workspaces and several ``T.Kernel`` blocks in one ``@T.prim_func``.

The blocks run in order (CPU: one after the other; CUDA: launched in order on the current
stream) and share the arguments and the workspaces, which the launcher allocates per call.
"""

import re
import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.lowering.kernels import workspace_specs
from tilelang.testing import cuda_emulator


def _chain(n, block=32, threads=32):
    """``Out = reverse(2 * A + 1)`` via a 1-D and a 2-D workspace and three kernels; the
    reversal makes each kernel read elements other blocks of the previous kernel wrote."""
    blocks = T.ceildiv(n, block)

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), Out: T.Tensor((n,), "float32")):
        W = T.alloc_global((n,), "float32")
        W2 = T.alloc_global((2, n), "float32")
        with T.Kernel(blocks, threads=threads) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    W[bx * block + i] = A[bx * block + i] * 2
        with T.Kernel(blocks, threads=threads) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    W2[1, bx * block + i] = W[n - 1 - (bx * block + i)] + 1
        with T.Kernel(blocks, threads=threads) as bx:
            tile = T.alloc_shared((block,), "float32")
            T.copy(W2[1, bx * block : (bx + 1) * block], tile)
            T.copy(tile, Out[bx * block : (bx + 1) * block])

    return main


def _expected(a):
    return (2 * a.astype(np.float64) + 1)[::-1]


@pytest.mark.parametrize("n", [100, 64])
def test_chain_cpu(n, rng):
    kernel = tilelang.compile(_chain(n), out_idx=[-1], target="cpu")
    a = rng.standard_normal(n).astype(np.float32)
    out = kernel(torch.from_numpy(a))
    np.testing.assert_allclose(out.numpy(), _expected(a), rtol=1e-6)
    again = rng.standard_normal(n).astype(np.float32)  # fresh workspaces, no stale values
    np.testing.assert_allclose(kernel(torch.from_numpy(again)).numpy(), _expected(again))


def test_workspaces_are_trailing_parameters():
    func = _chain(100)
    assert [(s.name, s.shape, s.dtype) for s in workspace_specs(func)] == [
        ("W", (100,), "float32"),
        ("W2", (2, 100), "float32"),
    ]
    lowered = cuda_pipeline.lower(func, {"kind": "cuda", "arch": "sm_80"})
    assert [p.name for p in lowered.params] == ["A", "Out", "W", "W2"]
    kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
    assert [p.name for p in kernel.params] == ["A", "Out"]  # the caller's view


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_chain_cuda_emulated(arch, rng):
    func = _chain(100)
    lowered = cuda_pipeline.lower(func, {"kind": "cuda", "arch": arch})
    a = rng.standard_normal(100).astype(np.float32)
    ws = [np.full(s.shape, np.nan, np.float32) for s in workspace_specs(func)]
    out = cuda_emulator.emulate(lowered, a, np.zeros(100, np.float32), *ws)[1]
    np.testing.assert_allclose(out, _expected(a), rtol=1e-6)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_chain_builds_three_kernels_with_nvcc():
    art = cuda_pipeline.build(_chain(100), {"kind": "cuda", "arch": "sm_90a"}, compiler="nvcc")
    assert len(art.meta["kernel_names"]) == 3
    assert not art.meta["direct_launch_skipped"]
    assert len(art.meta["direct_launch_kernels"]) == 3


@pytest.mark.cuda
def test_chain_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernel = tilelang.compile(_chain(1000), out_idx=[-1], target="cuda")
    a = torch.from_numpy(rng.standard_normal(1000).astype(np.float32)).cuda()
    out = kernel(a)
    assert out.device == a.device
    np.testing.assert_allclose(out.cpu().numpy(), _expected(a.cpu().numpy()), rtol=1e-6)


def test_alloc_global_inside_kernel_is_rejected():
    with pytest.raises(errors.TraceError, match="outside T.Kernel"):

        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8) as _:
                W = T.alloc_global((8,), "float32")
                for i in T.Parallel(8):
                    W[i] = A[i]


def test_alloc_global_symbolic_shape_is_rejected():
    n = T.dynamic("n")
    with pytest.raises(errors.TraceError, match="static shape"):

        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            W = T.alloc_global((n,), "float32")
            with T.Kernel(1, threads=8) as _:
                for i in T.Parallel(8):
                    W[i] = A[i]


def test_statement_between_kernels_is_rejected():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as _:
            for i in T.Parallel(8):
                A[i] = A[i] + 1
        A[0] = 5.0
        with T.Kernel(1, threads=8) as _:
            for i in T.Parallel(8):
                A[i] = A[i] * 2

    with pytest.raises(errors.CompileError, match="several T.Kernel blocks"):
        tilelang.compile(main, target="cpu")


def test_memory_read_between_kernels_is_rejected():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        x = A[0]
        with T.Kernel(1, threads=8) as _:
            for i in T.Parallel(8):
                B[i] = A[i] + x
        with T.Kernel(1, threads=8) as _:
            for i in T.Parallel(8):
                B[i] = B[i] * x

    with pytest.raises(errors.CompileError, match="'x' reads tensor memory"):
        tilelang.compile(main, target="cpu")


def test_scalar_parameter_shared_by_kernels(rng):
    """A scalar argument and a value computed from it outside the kernels reach both."""

    @T.prim_func
    def main(A: T.Tensor((40,), "float32"), s: T.float32, B: T.Tensor((40,), "float32")):
        W = T.alloc_global((40,), "float32")
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(20):
                W[bx * 20 + i] = A[bx * 20 + i] * s
        with T.Kernel(4, threads=32) as bx:
            for i in T.Parallel(10):
                B[bx * 10 + i] = W[bx * 10 + i] + s * 2

    kernel = tilelang.compile(main, out_idx=[-1], target="cpu")
    a = rng.standard_normal(40).astype(np.float32)
    out = kernel(torch.from_numpy(a), 1.5)
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) * 1.5 + 3.0, rtol=1e-5, atol=1e-6)


def test_tilelang_lower_shows_each_kernel():
    """``tilelang.lower`` records each block's stages (the k-th block's as ``<stage>#k``)."""
    lowered = tilelang.lower(_chain(100), target={"kind": "cuda", "arch": "sm_90a"})
    assert {"layout_inference", "layout_inference#2", "layout_inference#3"} <= set(lowered.names())
    assert "layout_inference#4" not in lowered.names()
    kernels = set(re.findall(r"\b(main_kernel\w*)\(", lowered.kernel_source))
    assert kernels == {"main_kernel", "main_kernel_1", "main_kernel_2"}


def test_single_kernel_with_workspace(rng):
    """One T.Kernel using a workspace as scratch (each thread reads back what it wrote)."""

    @T.prim_func
    def main(A: T.Tensor((50,), "float32"), B: T.Tensor((50,), "float32")):
        W = T.alloc_global((64,), "float32")
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < 50:
                    W[bx * 32 + i] = A[bx * 32 + i] - 1
                    B[bx * 32 + i] = W[bx * 32 + i] * 3

    kernel = tilelang.compile(main, out_idx=[1], target="cpu")
    a = rng.standard_normal(50).astype(np.float32)
    out = kernel(torch.from_numpy(a)).numpy()
    np.testing.assert_allclose(out, (a.astype(np.float64) - 1) * 3, rtol=1e-5, atol=1e-6)
    lowered = cuda_pipeline.lower(main, {"kind": "cuda", "arch": "sm_80"})
    emulated = cuda_emulator.emulate(lowered, a, np.zeros(50, np.float32), np.zeros(64, np.float32))
    np.testing.assert_allclose(emulated[1], (a.astype(np.float64) - 1) * 3, rtol=1e-5, atol=1e-6)
