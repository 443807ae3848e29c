"""Upstream's explicit async-copy API, performed synchronously here: T.ptx_cp_async,
T.ptx_commit_group, T.ptx_wait_group, T.cp_async_barrier_noinc, T.async_copy.

CPU: results against numpy on fresh inputs with tails; CUDA: nvcc builds for sm_80/sm_90a;
errors name the user's line."""

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


def staged_copy(rows, cols, vec, dtype, threads=32):
    """Each thread stages `vec`-element pieces of a row-block through shared memory with
    T.ptx_cp_async, waits, then writes `2 * x + 1` of the staged data."""
    pieces = cols // vec

    @T.prim_func
    def main(a: T.Tensor((rows, cols), dtype), b: T.Tensor((rows, cols), dtype)):
        with T.Kernel(rows, threads=threads) as r:
            tx = T.get_thread_binding()
            s = T.alloc_shared((1, cols), dtype)
            if tx < pieces:
                T.ptx_cp_async(
                    T.access_ptr(s[0, tx * vec], "w", vec),
                    T.access_ptr(a[r, tx * vec], "r", vec),
                    vec,
                )
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            for j in T.Parallel(cols):
                b[r, j] = s[0, j] * 2 + 1

    return main


@pytest.mark.parametrize("dtype,vec", [("float16", 8), ("float32", 4), ("uint8", 16)])
def test_ptx_cp_async_cpu(dtype, vec, rng):
    rows, cols = 5, vec * 6
    if dtype == "uint8":
        a = rng.integers(0, 100, (rows, cols))
        at = torch.from_numpy(a).to(torch.uint8)
    else:
        a = rng.standard_normal((rows, cols))
        at = torch.from_numpy(a).to(getattr(torch, dtype))
    b = torch.zeros_like(at)
    tilelang.compile(staged_copy(rows, cols, vec, dtype), target="cpu")(at, b)
    ref = at.double().numpy() * 2 + 1
    tol = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(b.double().numpy(), ref, rtol=tol, atol=tol)


def predicated_copy(n, vec):
    """Upstream's keyword names; copy only the pieces whose index is even."""

    @T.prim_func
    def main(a: T.Tensor((n,), "float32"), b: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n // vec) as _:
            tx = T.get_thread_binding()
            s = T.alloc_shared((n,), "float32")
            T.ptx_cp_async(
                dst_access_ptr=T.access_ptr(s[tx * vec], "w", vec),
                src_access_ptr=T.access_ptr(a[tx * vec], "r", vec),
                num_elems=vec,
                predicate=tx % 2 == 0,
            )
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            for i in T.Parallel(n):
                b[i] = T.if_then_else((i // vec) % 2 == 0, s[i], -1.0)

    return main


def test_predicated_ptx_cp_async_cpu(rng):
    n, vec = 48, 4
    a = rng.standard_normal(n)
    at = torch.from_numpy(a).float()
    b = torch.zeros(n)
    tilelang.compile(predicated_copy(n, vec), target="cpu")(at, b)
    ref = np.where((np.arange(n) // vec) % 2 == 0, at.double().numpy(), -1.0)
    np.testing.assert_allclose(b.double().numpy(), ref, rtol=1e-6)


def async_copy_kernel(n, block):
    @T.prim_func
    def main(a: T.Tensor((n,), "float32"), b: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=64) as bx:
            s = T.alloc_shared((block,), "float32")
            T.async_copy(a[bx * block : bx * block + block], s)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            for i in T.Parallel(block):
                b[bx * block + i] = s[i] - 0.5

    return main


def test_async_copy_cpu_with_tail(rng):
    n, block = 203, 64  # the last block's tail loads as zero and is not stored
    a = rng.standard_normal(n)
    at = torch.from_numpy(a).float()
    b = torch.zeros(n)
    tilelang.compile(async_copy_kernel(n, block), target="cpu")(at, b)
    np.testing.assert_allclose(b.double().numpy(), at.double().numpy() - 0.5, rtol=1e-6)


def _kernel_with(body):
    @T.prim_func
    def main(a: T.Tensor((64,), "float16"), f: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((64,), "float16")
            body(a, f, s)

    return main


@pytest.mark.parametrize(
    "call,words",
    [
        (
            lambda a, f, s: T.ptx_cp_async(T.access_ptr(s[0], "w"), T.access_ptr(f[0], "r"), 4),
            "dst s is float16 but src f is float32",
        ),
        (lambda a, f, s: T.ptx_cp_async(T.access_ptr(s[0], "w"), a, 4), "src must be T.access_ptr"),
        (
            lambda a, f, s: T.ptx_cp_async(T.access_ptr(s[0], "w"), T.access_ptr(a[0], "r"), 0),
            "positive int",
        ),
        (lambda a, f, s: T.ptx_wait_group(-1), "non-negative int"),
        (lambda a, f, s: T.async_copy(s, a), "src s is in shared.dyn memory"),
        (lambda a, f, s: T.async_copy(a, f), "dst f is in global memory"),
    ],
    ids=["dtype", "not-a-pointer", "count", "wait", "async-src", "async-dst"],
)
def test_errors_are_trace_errors(call, words):
    with pytest.raises(tilelang.TileLangError, match=words):
        _kernel_with(call)


def test_barrier_noinc_is_refused_on_cpu_at_the_line():
    def make():
        @T.prim_func
        def main(a: T.Tensor((64,), "float16")):
            with T.Kernel(1, threads=32):
                bar = T.alloc_barrier(32)
                s = T.alloc_shared((64,), "float16")
                T.ptx_cp_async(T.access_ptr(s[0], "w"), T.access_ptr(a[0], "r"), 8)
                T.cp_async_barrier_noinc(bar[0])

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.compile(make(), target="cpu")
    assert "is not supported on the cpu target" in str(info.value)


def noinc_kernel(n):
    @T.prim_func
    def main(a: T.Tensor((n,), "float16"), b: T.Tensor((n,), "float16")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            bar = T.alloc_barrier(32)
            s = T.alloc_shared((n,), "float16")
            T.ptx_cp_async(T.access_ptr(s[tx * 8], "w"), T.access_ptr(a[tx * 8], "r"), 8)
            T.cp_async_barrier_noinc(bar[0])
            T.mbarrier_wait_parity(bar[0], 0)
            for i in T.Parallel(n):
                b[i] = s[i]

    return main


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for kernel in (
        staged_copy(5, 48, 8, "float16"),
        async_copy_kernel(203, 64),
        predicated_copy(48, 4),
    ):
        assert cuda_pipeline.build(kernel, target, compiler="nvcc").device_binary
    if target is SM90:
        assert cuda_pipeline.build(noinc_kernel(256), target, compiler="nvcc").device_binary
    else:
        with pytest.raises(tilelang.TileLangError, match="not supported on CUDA sm_80"):
            cuda_pipeline.build(noinc_kernel(256), target, compiler="nvcc")


@pytest.mark.cuda
def test_staged_copy_on_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rows, cols = 7, 96
    a = torch.from_numpy(rng.standard_normal((rows, cols))).half().cuda()
    b = torch.zeros_like(a)
    tilelang.compile(staged_copy(rows, cols, 8, "float16"), target="cuda")(a, b)
    torch.testing.assert_close(b.double(), a.double() * 2 + 1, rtol=2e-3, atol=2e-3)
