"""Fixes found running upstream's linear-attention / utility examples unchanged.

- CPU: per-thread shared-memory exchanges without a written barrier (upstream's
  ``example_hadamard.py``) see every thread's write, as CUDA's inserted ``__syncthreads``
  guarantees (``backends/cpu/implicit_sync.py``);
- ``T.tvm_warp_shuffle`` (TVM's builtin form of ``__shfl_sync``) and its up/down forms;
- ``scope="shared"`` tiles build for CUDA (they join the planned ``shared.dyn`` buffer);
- ``@autotune`` ``.compile(...)`` with an eager kernel's ``T.const`` values as keywords;
- ``T.dynamic("M, N")`` (a tuple), ``T.Parallel(prefer_async=...)``, ``parse_cache_key``.

Each runs on the CPU against a float64 numpy reference on fresh random inputs.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.testing import cuda_emulator

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
SM90 = {"kind": "cuda", "arch": "sm_90a"}


def _exchange_kernel(threads, elems, rounds, in_loop):
    """Each round: every thread writes its row of ``sh``, then reads the row of thread
    ``(tx * 5 + 3) % threads`` and adds its own value; no barrier is written."""

    @T.prim_func
    def exchange(
        A: T.Tensor((threads * elems,), T.float64), B: T.Tensor((threads * elems,), T.float64)
    ):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            loc = T.alloc_local((elems,), T.float64)
            sh = T.alloc_shared((threads, elems), T.float64)
            for i in T.serial(elems):
                loc[i] = A[tx * elems + i]
            if in_loop:
                for _ in T.serial(rounds):
                    for j in T.serial(elems):
                        sh[tx, j] = loc[j]
                    for j in T.serial(elems):
                        loc[j] = sh[(tx * 5 + 3) % threads, j] + loc[j] * 0.5
            else:
                for j in T.serial(elems):
                    sh[tx, j] = loc[j]
                for j in T.serial(elems):
                    loc[j] = sh[(tx * 5 + 3) % threads, j] + loc[j] * 0.5
            for i in T.serial(elems):
                B[tx * elems + i] = loc[i]

    return exchange


def _exchange_reference(a, threads, elems, rounds):
    v = a.reshape(threads, elems).copy()
    src = [(t * 5 + 3) % threads for t in range(threads)]
    for _ in range(rounds):
        v = v[src] + v * 0.5
    return v.ravel()


@pytest.mark.parametrize("threads,elems,rounds,in_loop", [(96, 3, 3, True), (40, 5, 1, False)])
def test_shared_exchange_without_barrier_cpu(threads, elems, rounds, in_loop):
    a = np.random.default_rng().standard_normal(threads * elems)
    kernel = tilelang.compile(_exchange_kernel(threads, elems, rounds, in_loop), target="cpu")
    b = torch.zeros(threads * elems, dtype=torch.float64)
    kernel(torch.from_numpy(a), b)
    rounds = rounds if in_loop else 1
    np.testing.assert_allclose(b.numpy(), _exchange_reference(a, threads, elems, rounds))


def test_shared_exchange_emulated_matches():
    """The CUDA lowering of the same program (its own sync insertion) agrees on the emulator."""
    threads, elems, rounds = 64, 3, 2
    a = np.random.default_rng().standard_normal(threads * elems)
    lowered = cuda_pipeline.lower(_exchange_kernel(threads, elems, rounds, True), SM90)
    out = cuda_emulator.emulate(lowered, a.copy(), np.zeros_like(a), race_check=True)[-1]
    np.testing.assert_allclose(out, _exchange_reference(a, threads, elems, rounds))


def _butterfly_kernel(n, threads, mode):
    @T.prim_func
    def shuffle(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding(0)
            x = T.alloc_local((1,), T.float32)
            x[0] = T.if_then_else(tx < n, A[tx % n], 0.0)
            for i in T.serial(3):
                if mode == "idx":
                    y = T.tvm_warp_shuffle(0xFFFFFFFF, x[0], (tx ^ (1 << i)) % 32, 32, 32)
                elif mode == "down":
                    y = T.tvm_warp_shuffle_down(0xFFFFFFFF, x[0], 1 << i, 16, 32)
                else:
                    y = T.tvm_warp_shuffle_up(0xFFFFFFFF, x[0], 1 << i, 16, 32)
                x[0] = x[0] * 2.0 + y
            if tx < n:
                B[tx] = x[0]

    return shuffle


def _butterfly_reference(a, n, threads, mode):
    v = np.zeros(threads)
    v[:n] = a
    for i in range(3):
        lane = np.arange(threads) % 32
        base = np.arange(threads) - lane
        if mode == "idx":
            src = base + ((lane ^ (1 << i)) % 32)
        else:
            group, width = lane // 16 * 16, 16
            off = lane % width + (1 << i if mode == "down" else -(1 << i))
            src = np.where((off >= 0) & (off < width), base + group + off, np.arange(threads))
        v = v * 2.0 + v[src]
    return v[:n]


@pytest.mark.parametrize("mode", ["idx", "down", "up"])
def test_tvm_warp_shuffle_cpu(mode):
    n, threads = 53, 64
    a = np.random.default_rng().standard_normal(n).astype(np.float32)
    kernel = tilelang.compile(_butterfly_kernel(n, threads, mode), target="cpu")
    b = torch.zeros(n, dtype=torch.float32)
    kernel(torch.from_numpy(a), b)
    ref = _butterfly_reference(a.astype(np.float64), n, threads, mode)
    np.testing.assert_allclose(b.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_tvm_warp_shuffle_checks_warp_size():
    with pytest.raises(tilelang.errors.TraceError, match="warp_size must be 32"):

        @T.prim_func
        def bad(A: T.Tensor((32,), T.float32)):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding(0)
                A[tx] = T.tvm_warp_shuffle(0xFFFFFFFF, A[tx], 0, 32, 64)


def _static_shared_kernel(n, block):
    @T.prim_func
    def rowsum(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            s = T.alloc_shared((1, block), T.float32, scope="shared")
            T.copy(A[bx * block : (bx + 1) * block], s)
            T.cumsum(s, dim=1)
            T.copy(s, B[bx * block : (bx + 1) * block])

    return rowsum


def _cumsum_reference(a, block):
    out = np.zeros_like(a)
    for lo in range(0, len(a), block):
        out[lo : lo + block] = np.cumsum(a[lo : lo + block])
    return out


def test_static_shared_scope_cpu_and_emulated():
    """``scope="shared"`` (upstream's static shared memory) lowers for CUDA (one planned
    dynamic buffer) and gives the CPU's answer on the emulator."""
    n, block = 300, 64
    a = np.random.default_rng().standard_normal(n).astype(np.float32)
    func = _static_shared_kernel(n, block)
    ref = _cumsum_reference(a.astype(np.float64), block)
    b = torch.zeros(n, dtype=torch.float32)
    tilelang.compile(func, target="cpu")(torch.from_numpy(a), b)
    np.testing.assert_allclose(b.numpy(), ref, rtol=1e-5, atol=1e-5)
    lowered = cuda_pipeline.lower(func, SM90)
    out = cuda_emulator.emulate(lowered, a.copy(), np.zeros_like(a), race_check=True)[-1]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@needs_nvcc
def test_static_shared_scope_nvcc_build():
    artifact = cuda_pipeline.build(_static_shared_kernel(300, 64), SM90, compiler="nvcc")
    assert artifact.meta["kernel_names"]


@tilelang.autotune(configs=[{"block": 32}, {"block": 64}], warmup=1, rep=1)
@tilelang.jit
def _scaled_rows(X, block=32, scale=2.0):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), threads=32) as bx:
        for i, j in T.Parallel(block, N):
            Y[bx * block + i, j] = X[bx * block + i, j] * scale
    return Y


def test_autotune_compile_with_const_keywords_cpu():
    """Upstream's mamba examples call ``kernel = fn.compile(batch=..., block_M=...)``: the
    eager kernel's ``T.const`` values as keywords, every tunable given (no tuning)."""
    m, n = 45, 7
    kernel = _scaled_rows.compile(M=m, N=n, block=32, scale=3.0)
    x = torch.randn(m, n, dtype=torch.float32)
    y = kernel(x)
    np.testing.assert_allclose(y.double().numpy(), x.double().numpy() * 3.0, rtol=1e-6)


@tilelang.jit
def _dyn_copy_scaled(A):
    M, N = T.dynamic("M, N")
    A: T.Tensor[[M, N], T.float32]
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 16), threads=32) as bx:
        for i, j in T.Parallel(16, N):
            if bx * 16 + i < M:
                B[bx * 16 + i, j] = A[bx * 16 + i, j] * 2.0
    return B


def test_dynamic_several_names_cpu():
    """``M, N = T.dynamic("M, N")`` (upstream's eager notebook): one kernel for every shape."""
    for m, n in [(37, 5), (19, 11)]:
        a = torch.randn(m, n, dtype=torch.float32)
        np.testing.assert_allclose(
            _dyn_copy_scaled(a).double().numpy(), a.double().numpy() * 2.0, rtol=1e-6
        )
    assert not isinstance(T.dynamic("K"), tuple) and len(T.dynamic("M N")) == 2
    with pytest.raises(tilelang.errors.TraceError, match="not a valid name"):
        T.dynamic("M, 2N")


def test_parallel_prefer_async_cpu():
    """``T.Parallel(..., prefer_async=True)`` then ``T.ptx_commit_group()`` /
    ``T.ptx_wait_group(0)`` (minference's prefetch): synchronous copies, same values."""
    n, block = 100, 32

    @T.prim_func
    def gather(A: T.Tensor((n,), T.float32), Idx: T.Tensor((n,), T.int32),
               B: T.Tensor((n,), T.float32)):  # fmt: skip
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            s = T.alloc_shared((block,), T.float32)
            for i in T.Parallel(block, prefer_async=True):
                s[i] = T.if_then_else(bx * block + i < n, A[Idx[T.min(bx * block + i, n - 1)]], 0)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = s[i] + 1.0

    a = torch.randn(n, dtype=torch.float32)
    idx = torch.randperm(n).to(torch.int32)
    b = torch.zeros(n, dtype=torch.float32)
    tilelang.compile(gather, target="cpu")(a, idx, b)
    np.testing.assert_allclose(b.double().numpy(), a.double().numpy()[idx.numpy()] + 1.0)
    with pytest.raises(tilelang.errors.TraceError, match="prefer_async must be a bool"):
        T.Parallel(4, prefer_async="yes")


def test_parse_cache_key():
    key = _dyn_copy_scaled.parse_cache_key(1, 2, b=3, a=4)
    assert key == ((1, 2), (("a", 4), ("b", 3)), ())


def _row_stats_kernel(m, n, k):
    """gdn chunk_o_bwd's pattern: ``dg`` gets its layout from a reduce of one gemm
    accumulator, then a scratch fragment written elementwise from another accumulator is
    reduced into it (the scratch must take the accumulator's layout, not one derived
    from ``dg``)."""

    @T.prim_func
    def row_stats(
        A: T.Tensor((m, k), T.float16),
        B: T.Tensor((n, k), T.float16),
        C: T.Tensor((n, k), T.float16),
        Out: T.Tensor((m,), T.float32),
    ):
        with T.Kernel(1, threads=128):
            a_s = T.alloc_shared((m, k), T.float16)
            b_s = T.alloc_shared((n, k), T.float16)
            c_s = T.alloc_shared((n, k), T.float16)
            acc1 = T.alloc_fragment((m, n), T.float32)
            acc2 = T.alloc_fragment((m, n), T.float32)
            tmp = T.alloc_fragment((m, n), T.float32)
            dg = T.alloc_fragment((m,), T.float32)
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.copy(C, c_s)
            T.gemm(a_s, b_s, acc1, transpose_B=True, clear_accum=True)
            T.gemm(a_s, c_s, acc2, transpose_B=True, clear_accum=True)
            T.clear(dg)
            T.reduce_sum(acc1, dg, dim=1, clear=False)
            for i, j in T.Parallel(m, n):
                tmp[i, j] = acc2[i, j] * 2.0
            T.reduce_sum(tmp, dg, dim=1, clear=False)
            T.copy(dg, Out)

    return row_stats


def test_reduce_source_follows_accumulator_emulated():
    m, n, k = 64, 64, 32
    rng = np.random.default_rng()
    a, b, c = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (n, k), (n, k)))
    func = _row_stats_kernel(m, n, k)
    lowered = cuda_pipeline.lower(func, SM90, {"tl.gemm_scalar": True})
    out = cuda_emulator.emulate(lowered, a, b, c, np.zeros(m, np.float32), race_check=True)[-1]
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    ref = (a64 @ b64.T).sum(1) + 2.0 * (a64 @ c64.T).sum(1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)


@needs_nvcc
def test_reduce_source_follows_accumulator_nvcc_build():
    artifact = cuda_pipeline.build(_row_stats_kernel(64, 64, 32), SM90, compiler="nvcc")
    assert artifact.meta["kernel_names"]
