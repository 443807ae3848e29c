"""Automatic warp specialization (``backends/cuda/passes/warp_specialize_auto.py``): the
ping-pong option's barriers and an emulated chained gemm (Q @ K^T, then P @ V from
registers) with it, against numpy in float64. The structure of the plain split and its
emulated GEMMs with tails are in ``test_tma.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).parent))
from test_gemm_wgmma_rs import _round, chained, emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
PINGPONG = {"tl.ws_pingpong": True}


def test_pingpong_barriers_are_balanced():
    """Warpgroup w waits on barrier 2 + w before the first gemm and arrives on the other's
    after issuing it; warpgroup 1 opens, warpgroup 0 closes: 2 x 128 threads each time."""
    func = chained(256, 256, 96, 64, 128, 128, 256, 3)
    text = str(pipeline.lower(func, SM90A, PINGPONG))
    assert "take turns" in text
    loop = text.split("for k in")[1]
    sync = loop.index('"tl::named_barrier_sync", 2 + tx // 128, T.uint32(256)')
    commit = loop.index("tl::wgmma_commit", sync)
    arrive = loop.index('"tl::named_barrier_arrive", 3 - tx // 128, T.uint32(256)')
    assert sync < commit < arrive < loop.index("tl::wgmma_wait<0>", arrive)
    head, tail = text.split("for k in")[0], text.split("for k in")[1]
    assert '"tl::named_barrier_arrive", 2, T.uint32(256)' in head
    assert '"tl::named_barrier_sync", 2, T.uint32(256)' in tail
    plain = str(pipeline.lower(func, SM90A))
    assert "named_barrier_arrive" not in plain  # off by default


@pytest.mark.parametrize("pingpong", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_chained_gemm_specialized_emulated(pingpong, dtype):
    """Two warpgroups along M, three stages, a tail in M: the producer warpgroup and the
    consumers run interleaved in the emulator; the result matches float64."""
    M, N1, N2, K = 200, 256, 96, 64
    func = chained(M, N1, N2, K, 128, 128, 256, 3, dtype)
    lowered = pipeline.lower(func, SM90A, PINGPONG if pingpong else None)
    text = str(lowered)
    assert "tma_full_k" in text and 'T.launch_thread("threadIdx.x", 384)' in text
    rng = np.random.default_rng(7)
    q = _round(rng.standard_normal((M, K)) / 4, dtype)
    kt = _round(rng.standard_normal((N1, K)) / 4, dtype)
    v = _round(rng.standard_normal((N1, N2)), dtype)
    o = np.full((M, N2), np.nan, np.float32)
    (_, _, _, o), _ = emulate_rs(lowered, q, kt, v, o)
    s = q.astype(np.float64) @ kt.astype(np.float64).T
    want = _round(s, dtype).astype(np.float64) @ v.astype(np.float64)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(o, want, rtol=tol, atol=tol * np.abs(want).max())
