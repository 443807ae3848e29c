"""The CUDA op kernels of ``backends/cuda/test_ops_gpu.py`` (fill, copy forms, reductions,
layernorm, atomics, cumsum) lowered for ROCm and for Metal and executed by their emulators
against numpy references, tails included (inputs drawn fresh per test)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.metal import pipeline as metal_pipeline
from tilelang.backends.rocm import pipeline as rocm_pipeline
from tilelang.testing import metal_emulator, rocm_emulator

_spec = importlib.util.spec_from_file_location(
    "cuda_ops_kernels", Path(__file__).resolve().parent / "cuda" / "test_ops_gpu.py"
)
ops = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ops)

TARGETS = {
    "rocm": (rocm_pipeline, {"kind": "rocm", "arch": "gfx90a"}, rocm_emulator.emulate),
    "metal": (metal_pipeline, {"kind": "metal"}, metal_emulator.emulate),
}


def _run(target, func, *arrays):
    pipeline, spec, emulate = TARGETS[target]
    return emulate(pipeline.lower(func, spec), *arrays, check_races=True)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fill_copy(target, rng):
    a = rng.standard_normal((70, 100)).astype(np.float32)
    _, b, c = _run(target, ops.fill_copy(70, 100), a, np.zeros_like(a), np.zeros_like(a))
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(c, np.full_like(a, 3.5))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_copy_4d(target, rng):
    x = rng.standard_normal((2, 100, 3, 64)).astype(np.float16)
    _, y = _run(target, ops.copy_4d(2, 100, 3, 64), x, np.zeros_like(x))
    np.testing.assert_array_equal(y, (x.astype(np.float32) + 1).astype(np.float16))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_reduce_rows(target, rng):
    m, n = 37, 1000
    a = rng.standard_normal((m, n)).astype(np.float32)
    _, s, mx = _run(
        target, ops.reduce_rows(m, n), a, np.zeros(m, np.float32), np.zeros(m, np.float32)
    )
    np.testing.assert_allclose(s, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(mx, a.max(1))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_layernorm(target, rng):
    x, g = rng.standard_normal((20, 512)).astype(np.float32), rng.random(512).astype(np.float32)
    _, _, y = _run(target, ops.layernorm(20, 512), x, g, np.zeros_like(x))
    np.testing.assert_allclose(y, ops._layernorm(x.astype(np.float64), g), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_atomics(target, rng):
    idx = rng.integers(0, 16, 1000).astype(np.int32)
    _, h = _run(target, ops.histogram(1000, 16), idx, np.zeros(16, np.int32))
    np.testing.assert_array_equal(h, np.bincount(idx, minlength=16))
    a = rng.standard_normal((70, 64)).astype(np.float32)
    s, mx = np.zeros((32, 32), np.float32), np.full(32, -np.inf, np.float32)
    _, s, mx = _run(target, ops.tile_atomics(70, 64), a, s, mx)
    want_s, want_mx = ops._tile_atomic_refs(a)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mx, want_mx)


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("fragment,dim,reverse", [(False, 0, False), (True, 1, True)])
def test_cumsum(target, fragment, dim, reverse, rng):
    a = rng.standard_normal((16, 40)).astype(np.float32)
    _, b = _run(target, ops.cumsum_kernel(16, 40, dim, reverse, fragment), a, np.zeros_like(a))
    np.testing.assert_allclose(
        b, ops._cumsum(a.astype(np.float64), dim, reverse), rtol=1e-5, atol=1e-5
    )
