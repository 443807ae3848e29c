"""T.tma_copy / T.tma_store_arrive / T.tma_store_wait (upstream's user-synchronized TMA
copies), performed synchronously here. CPU: the store form against numpy, the load form's
clear per-target refusal (its mbarrier); CUDA sm_90a: the CUDA emulator against numpy and
nvcc builds (a pipelined GEMM included); errors at the user's line; GPU runs for the lead."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.testing import cuda_emulator

SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def rows_kernel(m, k, bm, threads=128):
    """Load a row block with T.tma_copy + mbarrier, transform it, store it with T.tma_copy."""

    @T.prim_func
    def main(a: T.Tensor((m, k), "float32"), b: T.Tensor((m, k), "float32")):
        with T.Kernel(T.ceildiv(m, bm), threads=threads) as bx:
            s = T.alloc_shared((bm, k), "float32")
            o = T.alloc_shared((bm, k), "float32")
            bar = T.alloc_barrier(threads)
            T.tma_copy(a[bx * bm, 0], s, barrier=bar)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            for i, j in T.Parallel(bm, k):
                o[i, j] = s[i, j] * 3.0 + 1.0
            T.tma_copy(o, b[bx * bm, 0])
            T.tma_store_arrive()
            T.tma_store_wait()

    return main


def store_kernel(m, k, bm):
    @T.prim_func
    def main(a: T.Tensor((m, k), "float32"), b: T.Tensor((m, k), "float32")):
        with T.Kernel(T.ceildiv(m, bm), threads=64) as bx:
            o = T.alloc_shared((bm, k), "float32")
            for i, j in T.Parallel(bm, k):
                o[i, j] = T.exp(a[bx * bm + i, j]) if bx * bm + i < m else 0.0
            T.tma_copy(o, b[bx * bm, 0])
            T.tma_store_arrive()
            T.tma_store_wait(0, read=False)

    return main


def matmul_tma_copy(m, n, k, bm, bn, bk, stages, threads=128):
    @T.prim_func
    def main(
        a: T.Tensor((m, k), "float16"),
        b: T.Tensor((k, n), "float16"),
        c: T.Tensor((m, n), "float32"),
    ):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm), threads=threads) as (bx, by):
            a_s = T.alloc_shared((bm, bk), "float16")
            b_s = T.alloc_shared((bk, bn), "float16")
            c_l = T.alloc_fragment((bm, bn), "float32")
            bar_a = T.alloc_barrier(threads)
            bar_b = T.alloc_barrier(threads)
            T.clear(c_l)
            for ko in T.Pipelined(T.ceildiv(k, bk), num_stages=stages):
                T.tma_copy(a[by * bm, ko * bk], a_s, barrier=bar_a)
                T.barrier_arrive(bar_a)
                T.tma_copy(b[ko * bk, bx * bn], b_s, barrier=bar_b)
                T.barrier_arrive(bar_b)
                T.barrier_wait(bar_a, ko % 2)
                T.barrier_wait(bar_b, ko % 2)
                T.gemm(a_s, b_s, c_l)
            T.copy(c_l, c[by * bm, bx * bn])

    return main


def test_store_form_cpu(rng):
    m, k, bm = 45, 24, 16  # the last block's rows past m are not stored
    a = rng.standard_normal((m, k))
    at = torch.from_numpy(a).float()
    b = torch.zeros(m, k)
    tilelang.compile(store_kernel(m, k, bm), target="cpu")(at, b)
    np.testing.assert_allclose(b.double().numpy(), np.exp(at.double().numpy()), rtol=1e-5)


def test_load_form_is_refused_on_cpu_at_its_barrier():
    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.compile(rows_kernel(40, 16, 8), target="cpu")
    assert "T.alloc_barrier is not supported on the cpu target" in str(info.value)
    assert f":{line_of(rows_kernel, 'bar = T.alloc_barrier(threads)')}" in str(info.value)


def test_load_and_store_emulated_sm90(rng):
    m, k, bm = 50, 64, 16
    a = rng.standard_normal((m, k)).astype(np.float32)
    out = cuda_emulator.emulate(
        cuda_pipeline.lower(rows_kernel(m, k, bm), SM90), a, np.zeros_like(a)
    )[1]
    np.testing.assert_allclose(
        out.astype(np.float64), a.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6
    )


@needs_nvcc
def test_nvcc_builds_sm90a():
    for kernel in (
        rows_kernel(50, 64, 16),
        store_kernel(45, 24, 16),
        matmul_tma_copy(200, 136, 96, 64, 64, 32, 2),
    ):
        assert cuda_pipeline.build(kernel, SM90, compiler="nvcc").device_binary


def _with(body):
    @T.prim_func
    def main(a: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((16, 64), "float32")
            r = T.alloc_shared((16, 64), "float32")
            bar = T.alloc_barrier(128)
            body(a, s, r, bar)

    return main


@pytest.mark.parametrize(
    "body,words",
    [
        (lambda a, s, r, bar: T.tma_copy(a[0, 0], s), "needs barrier="),
        (lambda a, s, r, bar: T.tma_copy(a[0, 0], s, barrier=bar, cluster_mask=3), "multicast"),
        (
            lambda a, s, r, bar: T.tma_copy(a[0, 0], s, barrier=bar, leader_scope_threads=32),
            "per-warp",
        ),
        (lambda a, s, r, bar: T.tma_copy(s, r), "got shared.dyn -> shared.dyn"),
        (lambda a, s, r, bar: T.tma_copy(a[0, 0], s, barrier=s[0, 0]), "is not a barrier"),
        (lambda a, s, r, bar: T.tma_store_wait(-1), "count must be an int >= 0"),
    ],
    ids=["no-barrier", "multicast", "per-warp", "scopes", "not-a-barrier", "wait-count"],
)
def test_errors(body, words):
    with pytest.raises(tilelang.TileLangError, match=words):
        _with(body)


@pytest.mark.cuda
def test_on_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs sm_90 (mbarriers)")
    a = torch.from_numpy(rng.standard_normal((50, 64))).float().cuda()
    b = torch.zeros_like(a)
    tilelang.compile(rows_kernel(50, 64, 16), target="cuda")(a, b)
    torch.testing.assert_close(b, a * 3 + 1, rtol=1e-6, atol=1e-6)
    m, n, k = 200, 136, 96
    x = torch.from_numpy(rng.standard_normal((m, k))).half().cuda()
    y = torch.from_numpy(rng.standard_normal((k, n))).half().cuda()
    c = torch.zeros(m, n, device="cuda")
    tilelang.compile(matmul_tma_copy(m, n, k, 64, 64, 32, 2), target="cuda")(x, y, c)
    torch.testing.assert_close(c.double(), x.double() @ y.double(), rtol=1e-3, atol=1e-2)
