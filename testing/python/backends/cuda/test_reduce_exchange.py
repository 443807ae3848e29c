"""``T.reduce_*`` over rows that span warps (a gemm accumulator split along its columns,
``GemmWarpPolicy.FullCol``: MLA decode's scores): with ``tl.reduce_merged_exchange`` every
row partial of a thread crosses shared memory in one exchange (one lane per shuffle group
writes; one barrier), float32 max/min combining with ``fmaxf``/``fminf`` (the float_min_max
stage; ``tl.nan_propagating_max`` keeps TIRx's select). Emulated (mma.sync on sm_80, wgmma on sm_90a) against float64 numpy
with each switch on and off; the full-size MLA decode source is checked for the barriers
and the ``fmaxf`` combines (issue 13: 10 barriers per iteration before, 3 now)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from example_loader import load_example

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.ops.reduce.cuda import exchange_slots
from tilelang.testing import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402 - the wgmma (SS and RS) machine

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}
KINDS = ["max", "min", "sum", "absmax", "abssum"]


def _reducer(kind):
    return {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min,
            "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}[kind]  # fmt: skip


def scores_kernel(M, N, K, threads, kind, clear, nan_propagate=False):
    """``Out[i] = reduce_j (A @ B^T)[i, j]`` (combined with 0.25 when not ``clear``), the
    accumulator split over the warps along its columns."""
    reduce = _reducer(kind)
    ann = {"nan_propagate": True} if nan_propagate else None

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             Out: T.Tensor((M,), "float32")):  # fmt: skip
        with T.Kernel(1, threads=threads):
            a_s = T.alloc_shared((M, K), "float16")
            b_s = T.alloc_shared((N, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            row = T.alloc_fragment((M,), "float32")
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.gemm(a_s, b_s, acc, transpose_B=True, clear_accum=True,
                   policy=T.GemmWarpPolicy.FullCol)  # fmt: skip
            T.fill(row, 0.25)
            if ann is None:
                reduce(acc, row, dim=1, clear=clear)
            else:
                T.reduce(acc, row, kind, 1, clear, annotations=ann)
            T.copy(row, Out)

    return main


def _reference(a, b, kind, clear):
    s = a.astype(np.float64) @ b.astype(np.float64).T
    if kind.startswith("abs"):
        s = np.abs(s)
    out = {"max": s.max, "absmax": s.max, "min": s.min, "sum": s.sum, "abssum": s.sum}[kind](1)
    if clear:
        return out
    if kind.endswith("sum"):
        return out + 0.25
    return np.maximum(out, 0.25) if kind != "min" else np.minimum(out, 0.25)


def _configs(merged, fast):
    """``merged``: tl.reduce_merged_exchange; ``fast``: float max/min as fmaxf/fminf (the
    float_min_max stage; off: ``tl.nan_propagating_max``)."""
    return {"tl.reduce_merged_exchange": merged, "tl.nan_propagating_max": not fast}


def _run(target, func, a, b, configs):
    lowered = pipeline.lower(func, target, configs)
    out = np.zeros(a.shape[0], np.float32)
    if target is SM90A:
        arrays, _ = emulate_rs(lowered, a, b, out)
        return lowered, arrays[2]
    return lowered, cuda_emulator.emulate(lowered, a, b, out)[2]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("merged,fast", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("clear", [True, False])
def test_cross_warp_rows_mma_emulated(kind, merged, fast, clear):
    """sm_80: 32 x 56 scores over 4 warps (each 32 x 14 -> rows on 4 warps, 4 rows per
    thread): merged, one slot per (row, quad) fills the 128-slot workspace exactly."""
    rng = np.random.default_rng()
    M, N, K = 32, 64, 48
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    lowered, got = _run(SM80, scores_kernel(M, N, K, 128, kind, clear), a, b,
                        _configs(merged, fast))  # fmt: skip
    want = _reference(a, b, kind, clear)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    src = lowered.script()
    assert ("fmaxf" in src or "fminf" in src) == (fast and kind != "sum" and kind != "abssum")


@pytest.mark.parametrize("kind", ["max", "sum", "absmax"])
@pytest.mark.parametrize("merged", [True, False])
def test_cross_warpgroup_rows_wgmma_emulated(kind, merged):
    """sm_90a: 64 x 64 scores over two warpgroups (MLA's split), each 64 x 32 on wgmma."""
    rng = np.random.default_rng()
    M, N, K = 64, 64, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    func = scores_kernel(M, N, K, 256, kind, False)
    lowered, got = _run(SM90A, func, a, b, _configs(merged, merged))
    assert "wgmma" in lowered.script()
    want = _reference(a, b, kind, False)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("kind", ["max", "min"])
def test_nan_propagate_still_propagates(kind):
    """``nan_propagate=True`` keeps the NaN-propagating combine on the merged path: a row
    with a NaN score gives NaN, the others their max/min."""
    M, N, K = 32, 64, 48
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    a[5, 3] = np.nan
    func = scores_kernel(M, N, K, 128, kind, True, nan_propagate=True)
    _, got = _run(SM80, func, a, b, _configs(True, True))
    want = _reference(a, b, kind, True)
    assert np.isnan(got[5]) and np.isnan(want[5])
    keep = ~np.isnan(want)
    np.testing.assert_allclose(
        got[keep], want[keep], rtol=1e-3, atol=1e-3 * np.abs(want[keep]).max()
    )


def test_exchange_slots_compress_is_a_bijection():
    """The compact slot of each lane group is distinct and inside the workspace, for lane
    generators that are not the low bits too."""
    for lanes, warps, threads, rows in [([1, 2], [128], 256, 2), ([4, 8], [32, 64], 128, 4),
                                         ([1, 16], [32], 64, 1), ([2], [64], 128, 2),
                                         ([], [32], 64, 1), ([1, 2, 4, 8, 16], [32, 64], 128, 4)]:  # fmt: skip
        width, compress = exchange_slots(lanes, warps, threads, rows)
        mask = sum(lanes)
        slots = {compress(t) for t in range(threads) if t & mask == 0}
        assert len(slots) == threads >> len(lanes) == width
        assert slots == set(range(width))
        assert all(compress(t) == compress(t & ~mask) for t in range(threads))
    assert exchange_slots([1, 2], [128], 256, 8) is None  # 8 rows x 64 > 256 slots
    assert exchange_slots([1, 2], [], 256, 2) is None  # no warp exchange at all


def _mla_consumer_loop(configs):
    """The CUDA source of the consumer's main loop of the full-size MLA decode kernel."""
    module = load_example("deepseek_mla/example_mla_decode.py")
    func = module.flashattn.get_tir(64, 128, 1, 8192, 512, 64, 64, 64, 1)
    src = pipeline.lower(func, SM90A, {"tl.enable_fast_math": True, **configs}).script()
    start = src.index("tma_full_k")  # the consumer loop waits on the full barriers first
    loop = src[src.index("for k in", start) :]
    return loop[: loop.index("mbarrier_arrive")]


def test_mla_decode_loop_barriers():
    """Full size (batch 64, 128 heads, 512 + 64): the two cross-warpgroup reductions
    take one named barrier each (plus the one before P @ V): 3 per iteration. With both
    switches off each reduction loops over its 2 rows with 2 barriers in the loop body, and
    one more barrier comes before the ``S_shared`` stores: 6 in the source, 10 executed per
    iteration. The max combines are fmaxf calls."""

    def count(loop):
        return len(re.findall(r"bar\.sync|named_barrier_sync|barrier_sync", loop))

    on = _mla_consumer_loop({})
    off = _mla_consumer_loop(_configs(False, False))
    assert count(on) == 3, on
    assert count(off) == 6, off
    assert len(re.findall(r"for rw(?:_1)? in range\(2\)", off)) == 2
    assert "fmaxf" in on and "fmaxf" not in off
