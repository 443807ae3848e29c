"""The split mma.sync pipeline (``pipeline_planning._plan_split``) without a GPU.

A pipelined ``T.gemm`` body on the mma.sync path (target ``sm_90`` without ``a``, so no
wgmma) is lowered in phases: the next tile's k16-slice-0 fragments are loaded after the
iteration's barrier, before the mmas of the last slice. The lowered IR is run by the
numpy emulator twice: with cp.async done at issue (a copy that overwrote a stage still
to be read would show) and with cp.async deferred to the ``cp.async.wait_group`` that
retires its group (a read before the wait would see stale or NaN data).
"""

import contextlib
import pathlib
import sys

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emu

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gemm_kernels import make  # noqa: E402

TARGET = {"kind": "cuda", "arch": "sm_90"}


@contextlib.contextmanager
def deferred_cp_async():
    """cp.async copies land at the ``cp_async_wait<N>`` that retires their group."""
    machine = emu._Machine
    orig_cp, orig_extern = machine._cp_async, machine._extern

    def cp_async(self, fname, args, mask):
        # do the copy, record the destination elements it covers, then undo it
        sb, sflat = self._pointer(args[0], mask)
        before = sb.data.copy()
        orig_cp(self, fname, args, mask)
        n = int(fname[fname.index("<") + 1 : fname.index(">")]) // sb.data.dtype.itemsize
        active = np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0]
        idx = np.concatenate([np.arange(int(sflat[t]), int(sflat[t]) + n) for t in active])
        record = (sb, idx, sb.data[idx].copy())
        sb.data[...] = before
        self._uncommitted = getattr(self, "_uncommitted", []) + [record]

    def extern(self, fname, args, e, mask):
        if fname.startswith("tl::cp_async_commit"):
            self._groups = getattr(self, "_groups", []) + [getattr(self, "_uncommitted", [])]
            self._uncommitted = []
            return None
        if fname.startswith("tl::cp_async_wait"):
            keep = int(fname[fname.index("<") + 1 : fname.index(">")])
            groups = getattr(self, "_groups", [])
            if keep == 0:
                groups = groups + [getattr(self, "_uncommitted", [])]
                self._uncommitted = []
            done, self._groups = groups[: max(len(groups) - keep, 0)], groups[len(groups) - keep :]
            if keep == 0:
                self._groups = []
            for group in done:
                for buf, idx, values in group:
                    buf.data[idx] = values
            return None
        return orig_extern(self, fname, args, e, mask)

    machine._cp_async, machine._extern = cp_async, extern
    try:
        yield
    finally:
        machine._cp_async, machine._extern = orig_cp, orig_extern


def _run(func, M, N, K, ta, tb, deferred):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float16)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    lowered = pipeline.lower(func, TARGET)
    ctx = deferred_cp_async() if deferred else contextlib.nullcontext()
    with ctx:
        emu.emulate(lowered, a, b, c, blocks=[(0, 0)])
    af = a.astype(np.float32).T if ta else a.astype(np.float32)
    bf = b.astype(np.float32).T if tb else b.astype(np.float32)
    ref = af @ bf
    bM, bN = 64, 64
    np.testing.assert_allclose(c[:bM, :bN], ref[:bM, :bN], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "bK,stages,k_tiles,ta,tb",
    [
        (32, 3, 5, False, False),
        (32, 2, 3, False, False),
        (64, 4, 6, False, False),
        (32, 3, 2, False, False),  # fewer tiles than stages - 1 + 1
        (32, 3, 4, True, True),
    ],
)
@pytest.mark.parametrize("deferred", [False, True])
def test_split_pipeline_emulated(bK, stages, k_tiles, ta, tb, deferred):
    M = N = 64
    K = bK * k_tiles
    func = make(M, N, K, 64, 64, bK, 128, stages, ta=ta, tb=tb)
    _run(func, M, N, K, ta, tb, deferred)


def test_split_pipeline_structure():
    """One barrier and no branch around the copies in the main loop; phases in order."""
    func = make(256, 256, 256, 128, 128, 32, 128, 3)
    text = pipeline.lower(func, TARGET).script()
    loop = text[text.index("for k in") :]
    loop = loop[: loop.index('"tl::cp_async_wait<0>"')]
    assert loop.count("__syncthreads") == 1
    assert "cp_async_gs_conditional" in loop and "if " not in loop
    first_sync = loop.index("__syncthreads")
    # next tile's slice 0 (stage (k + 1) % 3) is read after the barrier
    assert "(k + 1) % 3" in loop[first_sync:]


def test_split_pipeline_off_matches_plain_schedule():
    func = make(256, 256, 256, 128, 128, 32, 128, 3)
    configs = {"tl.mma_split_pipeline": False, "tl.disable_tma_lower": True}
    text = pipeline.lower(func, TARGET, configs).script()
    loop = text[text.index("for k in") :]
    assert "(k + 1) % 3" not in loop[: loop.index('"tl::cp_async_wait<0>"')]
