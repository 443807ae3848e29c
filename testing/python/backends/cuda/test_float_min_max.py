"""Float max/min in CUDA source as ``fmaxf``/``fminf``/``__hmax``/``__hmin``
(``tilelang/transform/float_min_max.py``): one FMNMX each instead of TIRx's NaN-propagating
select (four SASS instructions). CPU: the source, the emulated semantics (a NaN operand is
dropped, as CUDA's ``fmaxf``; ``nan_propagate=True`` still gives NaN), the pass config, and
the SASS of FlashAttention's loop (nvcc + cuobjdump). ``cuda``: the same on the GPU."""

from __future__ import annotations

import collections
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate
from tilelang.tools.sass_loops import main_loop, opcode

sys.path.insert(0, str(Path(__file__).resolve().parent))
SM90A = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}
KEEP = {"tl.nan_propagating_max": True}


def row_max_min(M, N, dtype="float32", nan=False):
    """Row max and min of ``A`` (a fragment reduce) and the elementwise T.max / T.min of
    ``A`` and ``B``."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), dtype),
        B: T.Tensor((M, N), dtype),
        Mx: T.Tensor((M,), dtype),
        Mn: T.Tensor((M,), dtype),
        E: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(1, threads=128):
            Af = T.alloc_fragment((M, N), dtype)
            Bf = T.alloc_fragment((M, N), dtype)
            R = T.alloc_fragment((M,), dtype)
            S = T.alloc_fragment((M,), dtype)
            T.copy(A, Af)
            T.copy(B, Bf)
            T.reduce_max(Af, R, dim=1, annotations={"nan_propagate": nan})
            T.reduce_min(Af, S, dim=1, annotations={"nan_propagate": nan})
            for i, j in T.Parallel(M, N):
                Bf[i, j] = T.max(Af[i, j], Bf[i, j]) + T.min(Af[i, j], 0.5)
            T.copy(R, Mx)
            T.copy(S, Mn)
            T.copy(Bf, E)

    return main


def test_source_calls_the_device_functions():
    text = pipeline.build(row_max_min(24, 40), SM90A).kernel_source
    assert "fmaxf(" in text and "fminf(" in text
    assert not re.search(r"\((\w+) != \1\)", text)  # no NaN-propagating select left
    kept = pipeline.build(row_max_min(24, 40), SM90A, KEEP).kernel_source
    assert "fmaxf(" not in kept and re.search(r"\((\w+) != \1\)", kept)
    half = pipeline.build(row_max_min(24, 40, "float16"), SM80).kernel_source
    assert "__hmax(" in half and "__hmin(" in half
    # a NaN-propagating reduce keeps its isnan test (printed x != x) around the fmaxf
    nan = pipeline.build(row_max_min(24, 40, nan=True), SM90A).kernel_source
    assert "fmaxf(" in nan and re.search(r"\((\w+) != \1\)", nan)


def _inputs(rng, M, N, dtype):
    a = rng.standard_normal((M, N)).astype(dtype)
    b = rng.standard_normal((M, N)).astype(dtype)
    rows = rng.choice(M, size=M // 3, replace=False)
    a[rows, rng.integers(0, N, size=rows.size)] = np.nan
    return a, b, rows


def _check(a, b, rows, mx, mn, e, nan):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-6 if a.dtype == np.float32 else 1e-3
    if nan:  # NaN in, NaN out
        assert np.isnan(mx[rows]).all() and np.isnan(mn[rows]).all()
        np.testing.assert_allclose(mx, a64.max(1), rtol=tol, equal_nan=True)
    else:  # fmaxf: the NaN operand is dropped
        assert not np.isnan(mx).any() and not np.isnan(mn).any()
        np.testing.assert_allclose(mx, np.nanmax(a64, 1), rtol=tol)
        np.testing.assert_allclose(mn, np.nanmin(a64, 1), rtol=tol)
    want = np.fmax(a64, b64) + np.fmin(a64, 0.5)
    np.testing.assert_allclose(e, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("dtype,target", [("float32", SM90A), ("float16", SM80)])
def test_emulated_semantics(nan, dtype, target, rng):
    M, N = 24, 64
    a, b, rows = _inputs(rng, M, N, dtype)
    outs = [np.zeros(M, dtype), np.zeros(M, dtype), np.zeros((M, N), dtype)]
    _, _, mx, mn, e = emulate(pipeline.lower(row_max_min(M, N, dtype, nan), target), a, b, *outs)
    _check(a, b, rows, mx, mn, e, nan)


# ----------------------------------------------------------------------------- SASS
def _steady_loop_ops(sass):
    """Opcode counts (modifiers dropped) of the main loop (``tilelang.tools.sass_loops``):
    the FlashAttention consumer's steady state, 16 HGMMAs (Q @ K^T and P @ V, 8 each)."""
    body = main_loop(sass)
    assert body, "no loop found"
    ops = collections.Counter(opcode(t).split(".")[0] for t in body)
    assert ops["HGMMA"] == 16, ops
    return dict(ops) | {"total": len(body)}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_flash_attention_loop_sass():
    from test_tma import _sass
    from test_wgmma_overlap import PLAIN, _fa_tir

    func = _fa_tir(PLAIN, False, 4096, batch=4, heads=16, dim=128)
    new = _steady_loop_ops(_sass(pipeline.build(func, SM90A, compiler="nvcc")))
    old = _steady_loop_ops(_sass(pipeline.build(func, SM90A, KEEP, compiler="nvcc")))
    # the row max of 64 scores per thread: one FMNMX each instead of FSETP x2, PLOP3, FSEL
    assert new.get("FMNMX", 0) >= 64 and old.get("FMNMX", 0) < 8
    assert new["total"] <= old["total"] - 150, (new, old)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gpu(nan, dtype, rng):
    import torch

    import tilelang

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N = 24, 64
    a, b, rows = _inputs(rng, M, N, dtype)
    kernel = tilelang.compile(row_max_min(M, N, dtype, nan), target="cuda")
    args = [torch.from_numpy(x).cuda() for x in (a, b)]
    tdt = getattr(torch, dtype)
    outs = [torch.zeros(M, dtype=tdt, device="cuda") for _ in range(2)]
    outs.append(torch.zeros(M, N, dtype=tdt, device="cuda"))
    kernel(*args, *outs)
    _check(a, b, rows, *(o.cpu().numpy() for o in outs), nan)


def test_rocm_source_uses_fmaxf():
    """ROCm prints through the same C printer: float32 max/min become HIP's fmaxf/fminf."""
    from tilelang.backends.rocm import pipeline as rocm

    text = str(rocm.lower(row_max_min(24, 40), {"kind": "rocm", "arch": "gfx90a"}))
    assert "fmaxf" in text and "fminf" in text
    kept = str(rocm.lower(row_max_min(24, 40), {"kind": "rocm", "arch": "gfx90a"}, KEEP))
    assert "fmaxf" not in kept
