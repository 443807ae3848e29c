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
    unordered = {**PINGPONG, "tl.wgmma_overlap": False}  # (else the derived order applies)
    text = str(pipeline.lower(func, SM90A, unordered))
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


def _gemm_reading_a_tile(mode):
    """A wgmma GEMM whose loop also reads the pipelined A tile with ordinary loads
    (``mode``: an element-wise T.Parallel, or a T.copy into a fragment)."""
    import tilelang.language as T

    @T.prim_func
    def main(
        A: T.Tensor((256, 256), "float16"),
        B: T.Tensor((256, 256), "float16"),
        C: T.Tensor((256, 256), "float32"),
        S: T.Tensor((256, 64), "float32"),
    ):
        with T.Kernel(2, 2, threads=256) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            R_l = T.alloc_fragment((128, 64), "float32")
            T.clear(C_l)
            T.clear(R_l)
            for k in T.Pipelined(4, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
                if mode == "parallel":
                    for i, j in T.Parallel(128, 64):
                        R_l[i, j] += A_s[i, j]
            T.copy(C_l, C[by * 128, bx * 128])
            T.copy(R_l, S[by * 128, 0])

    return main


def _consumer_loop(text):
    """The consumer's ``for k`` loop of a lowered specialized kernel (up to the producer)."""
    return text.split("for k in")[1].split("for k_load in")[0]


@pytest.mark.parametrize("mode", ["plain", "parallel"])
def test_ordinary_reads_of_a_pipelined_tile_are_fenced_before_the_release(mode):
    """Both loops are specialized. Stages read only by the wgmma are handed back after its
    wait; element loads of the stage (``R_l += A_s``) make every consumer thread run
    ``fence.proxy.async`` before its arrive (a generic-proxy read, then the producer's TMA
    write of the stage: ``ws_stage_reads.stage_release``)."""
    text = str(pipeline.lower(_gemm_reading_a_tile(mode), SM90A))
    assert "tma_full_k" in text and "tl::cp_async_gs" not in text
    loop = _consumer_loop(text)
    lines = [x.strip() for x in loop.splitlines()]
    arrives = [i for i, x in enumerate(lines) if '"tl::mbarrier_arrive"' in x]
    assert arrives
    fenced = all("tl::fence_proxy_async_shared" in lines[i - 1] for i in arrives)
    assert fenced == (mode == "parallel"), loop
    assert ("generic-proxy stage reads" in text) == (mode == "parallel")


@pytest.mark.parametrize("mode", ["plain", "parallel"])
def test_gemm_reading_a_tile_specialized_emulated(mode):
    """The two loops above run by the emulator (producer and consumers interleaved) against
    float64: C = A @ B and, with ``parallel``, S = the sum of A over its K blocks."""
    rng = np.random.default_rng(11)
    lowered = pipeline.lower(_gemm_reading_a_tile(mode), SM90A)
    a = _round(rng.standard_normal((256, 256)), "float16")
    b = _round(rng.standard_normal((256, 256)), "float16")
    c = np.full((256, 256), np.nan, np.float32)
    s = np.zeros((256, 64), np.float32)
    (_, _, c, s), _ = emulate_rs(lowered, a, b, c, s)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(c, a64 @ b64, rtol=1e-3, atol=1e-3)
    if mode == "parallel":
        want = a64.reshape(256, 4, 64).sum(axis=1)
        np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["plain", "parallel"])
def test_gemm_reading_a_tile_specialized_gpu(mode):
    """The loops above on the GPU (the fenced release with ``parallel``) against float64."""
    import torch

    from tilelang.backends.cuda.runtime import load_kernel

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90a GPU")
    kern = load_kernel(pipeline.build(_gemm_reading_a_tile(mode), SM90A))
    a, b = (torch.randn(256, 256, dtype=torch.float16, device="cuda") for _ in range(2))
    c = torch.full((256, 256), float("nan"), device="cuda")
    s = torch.zeros(256, 64, device="cuda")
    for _ in range(3):
        kern(a, b, c, s)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3)
        if mode == "parallel":
            want = a.double().reshape(256, 4, 64).sum(1)
            torch.testing.assert_close(s.double(), want, rtol=1e-4, atol=1e-4)
