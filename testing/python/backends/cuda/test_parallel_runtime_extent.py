"""``T.Parallel`` with a run-time extent on CUDA: a strided loop over the threads.

``for i in T.Parallel(n)`` with ``n`` a dynamic shape, a scalar parameter or a value read
from a tensor was a CompileError ("needs static extents"); upstream lowers it as
``for it: i = it * threads + t; if i < n: body`` (``passes/strided_parallel.py``). Checked
against float64 numpy in the CUDA emulator (sm_80, sm_90a), on the CPU backend, with nvcc
and on the GPU.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def dynamic_2d(threads):
    """O = 2 A + row index over a (M, N) tensor of run-time shape, one block."""
    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            for i, j in T.Parallel(M, N):
                O[i, j] = A[i, j] * 2.0 + i

    return main


def ragged_rows(W, threads):
    """Row b: O[b, :L[b]] = A[b, :L[b]] * s + the shared row sum of A[b] (a shared tile and a
    replicated fragment read in the strided loop; the extent read from a tensor)."""
    B = T.dynamic("B")

    @T.prim_func
    def main(
        L: T.Tensor((B,), "int32"),
        A: T.Tensor((B, W), "float32"),
        O: T.Tensor((B, W), "float32"),
    ):
        with T.Kernel(B, threads=threads) as bx:
            s = T.alloc_fragment((1,), "float32")
            row = T.alloc_shared((W,), "float32")
            T.copy(A[bx, 0:W], row)
            s[0] = 3.0
            for i in T.Parallel(L[bx]):
                O[bx, i] = row[i] * s[0] + row[W - 1 - i]

    return main


def offset_scalar(threads):
    """A 1-d loop over [0, n) with n a scalar parameter, writing a shifted window."""
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), O: T.Tensor((N,), "float32"), n: T.int32):
        with T.Kernel(1, threads=threads):
            for i in T.Parallel(n):
                O[i + 1] = A[i] - 1.0

    return main


def _ragged_want(lens, a):
    want = np.zeros(a.shape)
    w = a.shape[1]
    for b, n in enumerate(lens):
        n = min(int(n), w)
        want[b, :n] = a[b, :n].astype(np.float64) * 3.0 + a[b, ::-1][:n]
    return want


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,threads", [(37, 29, 128), (5, 3, 64), (130, 7, 96), (0, 4, 32)])
def test_dynamic_2d_emulated(rng, target, M, N, threads):
    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(pipeline.lower(dynamic_2d(threads), target), a, np.zeros_like(a))[1]
    want = a.astype(np.float64) * 2.0 + np.arange(M)[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_extent_read_from_a_tensor_emulated(rng, target):
    W = 100
    lens = np.array([5, 100, 0, 77, 33], np.int32)
    a = rng.standard_normal((len(lens), W)).astype(np.float32)
    lowered = pipeline.lower(ragged_rows(W, 32), target)
    got = emulate(lowered, lens, a, np.zeros_like(a), race_check=True)[2]
    np.testing.assert_allclose(got, _ragged_want(lens, a), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [0, 1, 200, 517])
def test_scalar_extent_emulated_and_cpu(rng, n):
    N = 600
    a = rng.standard_normal(N).astype(np.float32)
    want = np.zeros(N)
    want[1 : n + 1] = a[:n].astype(np.float64) - 1.0
    got = emulate(pipeline.lower(offset_scalar(128), TARGETS[0]), a, np.zeros_like(a), np.int32(n))
    np.testing.assert_allclose(got[1], want, rtol=1e-6, atol=1e-6)
    kernel = tilelang.compile(offset_scalar(128), target="cpu")
    out = torch.zeros(N)
    kernel(torch.from_numpy(a), out, n)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)


def test_dynamic_2d_cpu(rng):
    a = rng.standard_normal((41, 13)).astype(np.float32)
    out = torch.zeros(41, 13)
    tilelang.compile(dynamic_2d(128), target="cpu")(torch.from_numpy(a), out)
    want = a.astype(np.float64) * 2.0 + np.arange(41)[:, None]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)


def test_strided_loop_shape():
    """One loop of ceildiv(M * N, threads) iterations, guarded by the flat index."""
    text = pipeline.lower(dynamic_2d(128), TARGETS[1]).script()
    assert "(M * N + 127) // 128" in text
    assert "* 128 + tx < M * N" in text


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for func in (dynamic_2d(128), ragged_rows(100, 32), offset_scalar(64)):
        assert pipeline.build(func, {**target, "compiler": "nvcc"}).device_binary


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
@pytest.mark.parametrize("M,N", [(37, 29), (1000, 513)])
def test_dynamic_2d_gpu(M, N):
    load = _gpu()
    a = torch.randn(M, N, device="cuda")
    out = torch.zeros_like(a)
    load(dynamic_2d(128))(a, out)
    torch.cuda.synchronize()
    want = a.double() * 2 + torch.arange(M, device="cuda", dtype=torch.float64)[:, None]
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
def test_extent_read_from_a_tensor_gpu():
    load = _gpu()
    W = 100
    lens = np.array([5, 100, 0, 77, 33], np.int32)
    a = torch.randn(len(lens), W)
    out = torch.zeros(len(lens), W, device="cuda")
    load(ragged_rows(W, 32))(torch.from_numpy(lens).cuda(), a.cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), _ragged_want(lens, a.numpy()), rtol=1e-6)


def histogram(bins, threads=128):
    """Hist[v] += 1 over a run-time number of values (a per-thread atomic in the loop)."""
    N = T.dynamic("N")

    @T.prim_func
    def main(V: T.Tensor((N,), "int32"), Hist: T.Tensor((bins,), "int32")):
        with T.Kernel(1, threads=threads):
            for i in T.Parallel(N):
                T.atomic_add(Hist[V[i]], 1)

    return main


@pytest.mark.parametrize("target", ["cpu", *TARGETS], ids=["cpu", "sm_80", "sm_90a"])
def test_histogram_with_runtime_extent(rng, target):
    bins, n = 13, 1000
    v = rng.integers(0, bins, n).astype(np.int32)
    hist = np.zeros(bins, np.int32)
    if target == "cpu":
        out = torch.from_numpy(hist)
        tilelang.compile(histogram(bins), target="cpu")(torch.from_numpy(v), out)
        got = out.numpy()
    else:
        got = emulate(pipeline.lower(histogram(bins), target), v, hist)[1]
    np.testing.assert_array_equal(got, np.bincount(v, minlength=bins))


@pytest.mark.parametrize("inner", ["tile_op", "parallel"])
def test_block_wide_work_inside_a_strided_loop_is_an_error(inner):
    @T.prim_func
    def main(A: T.Tensor((300, 4), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((4,), "float32")
            for i in T.Parallel(n):
                if inner == "tile_op":
                    T.copy(A[i, 0:4], s)  # the refused line
                else:
                    A[i, 0] = 1.0
                    for j in T.Parallel(4):  # not perfectly nested: a loop of its own
                        A[i, j] = 0.0

    with pytest.raises(tilelang.errors.CompileError, match="inside a T.Parallel loop") as info:
        pipeline.lower(main, TARGETS[0])
    assert "test_parallel_runtime_extent.py:" in str(info.value)
