"""Fragments whose threads start past 0 (a later warpgroup's tile: thread ``128 + ...``).

The lowerings guarded such a fragment with ``t < thread span`` only, so threads
``0..lo-1`` ran its loops too: the fragment's inverse map gives them coordinates that
alias real elements (``T.copy(r, O)`` stored their zero registers over rows other
threads had written: a silently wrong result), or slots outside the register array
(``T.reduce`` indexed ``r_red[-1]``). Now every fragment loop runs on exactly the threads
``[lo, hi)`` holding elements (``lowering.fragments.owner_guard``); a fragment whose
threads have gaps is refused (``owner_guard`` raises; such layouts have no inverse
either). A reduce under an ``if`` on the thread index is planned over the threads it
keeps, as copies and ``T.Parallel`` loops there are (``test_thread_range_tile_ops.py``). Checked against float64 numpy in the CUDA emulator
(sm_80, sm_90a, race check), with nvcc and on the GPU.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.layout import Fragment
from tilelang.lowering.fragments import owner_guard
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FNS = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}


def offset_fragment(M, N, offset, rows=8, cols=16):
    """(M, N) on threads ``offset + (i % rows) * cols + j % cols`` (``rows * cols``
    threads), ``ceil(M / rows) * ceil(N / cols)`` registers each."""
    per_row = -(-N // cols)
    return Fragment(
        (M, N),
        forward_thread_fn=lambda i, j: offset + (i % rows) * cols + j % cols,
        forward_index_fn=lambda i, j: (i // rows) * per_row + j // cols,
    )


def offset_reduce(M, N, offset, threads, kind, dim, clear):
    """A tile on a later warpgroup's threads reduced over ``dim``; the result feeds a
    ``T.Parallel`` loop (centered tile) and is copied out."""
    fn = FNS[kind]
    out = M if dim == 1 else N

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        R: T.Tensor((out,), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((out,), "float32")
            T.annotate_layout({f: offset_fragment(M, N, offset)})
            T.copy(A, f)
            T.fill(r, 0.5)
            fn(f, r, dim=dim, clear=clear)
            T.copy(r, R)
            for i, j in T.Parallel(M, N):
                C[i, j] = f[i, j] - (r[i] if dim == 1 else r[j])

    return main


def reference(a, kind, dim, clear):
    x = np.abs(a) if kind == "absmax" else a
    op = {"sum": np.sum, "max": np.max, "min": np.min, "absmax": np.max}[kind]
    r = op(x, axis=dim)
    if not clear:
        r = r + 0.5 if kind == "sum" else (np.minimum if kind == "min" else np.maximum)(r, 0.5)
    c = a - (r[:, None] if dim == 1 else r[None, :])
    return r, c


CASES = [
    # M, N, offset, threads, kind, dim, clear
    (40, 48, 128, 256, "sum", 1, True),
    (40, 48, 128, 256, "max", 0, False),
    (24, 32, 64, 192, "min", 1, False),
    (64, 32, 128, 384, "absmax", 1, True),  # the middle warpgroup of three
    (56, 16, 32, 160, "sum", 0, True),  # starts at warp 1
]


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,offset,threads,kind,dim,clear", CASES)
def test_offset_fragment_reduce_emulated(rng, target, M, N, offset, threads, kind, dim, clear):
    a = rng.standard_normal((M, N)).astype(np.float32)
    out = M if dim == 1 else N
    lowered = pipeline.lower(offset_reduce(M, N, offset, threads, kind, dim, clear), target)
    _, r, c = emulate(lowered, a, np.full(out, 7.0, np.float32), np.zeros_like(a), race_check=True)
    want_r, want_c = reference(a.astype(np.float64), kind, dim, clear)
    np.testing.assert_allclose(r, want_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, want_c, rtol=1e-5, atol=1e-5)


def test_shared_source_into_offset_fragment_emulated(rng):
    """shared -> fragment reduce whose dst lives on threads 128..255."""
    M, N = 100, 37

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=256):
            s = T.alloc_shared((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.annotate_layout({r: Fragment((M,), forward_thread_fn=lambda i: 128 + i % 100)})
            T.copy(A, s)
            T.reduce_max(s, r, dim=1)
            T.copy(r, R)

    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(pipeline.lower(main, TARGETS[1]), a, np.zeros(M, np.float32), race_check=True)
    np.testing.assert_allclose(got[1], a.astype(np.float64).max(1), rtol=1e-6)


def test_owner_guard():
    from tvm_tirx import ir

    t = ir.Var("t", "int32")
    assert owner_guard(offset_fragment(16, 16, 0), t, 128) is None
    assert "t >= 128" in str(owner_guard(offset_fragment(16, 16, 128), t, 256))
    both = str(owner_guard(offset_fragment(16, 16, 128), t, 384))
    assert "t >= 128" in both and "t < 256" in both
    gaps = Fragment((64,), forward_thread_fn=lambda i: i * 2)
    with pytest.raises(ValueError, match="gaps"):
        owner_guard(gaps, t, 128)


def _guarded_kernel(what):
    M, N = 64, 32

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            if what != "copy":
                T.copy(A, f)
            if tx >= 128:
                if what == "copy":
                    T.copy(A, f)  # the refused line
                elif what == "reduce":
                    T.reduce_max(f, r, dim=1)
                else:
                    for i in T.Parallel(M):  # the refused line
                        O[i] = f[i, 0]
            T.copy(r, O)

    return main


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_reduce_under_a_thread_condition_is_planned_there(rng, target):
    """``if tx >= 128: T.reduce_max(f, r)``: the reduce is planned over threads 128..255
    (upstream's behaviour; it was a CompileError), so ``f``, used by no other guarded
    statement, is laid out on those threads and the block-wide copy fills it there
    (``test_ws_thread_range_gemm.py`` has gemm + reduce under ``T.ws``)."""
    a = rng.standard_normal((64, 32)).astype(np.float32)
    low = pipeline.lower(_guarded_kernel("reduce"), target)
    got = emulate(low, a, np.zeros(64, np.float32), race_check=True)[1]
    np.testing.assert_allclose(got, a.astype(np.float64).max(axis=1), rtol=1e-6)


def test_per_thread_code_under_a_thread_condition_still_runs(rng):
    """Element code under the ``if`` is per-thread: unchanged (emulated)."""
    N = 200

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), O: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            if tx < N:
                O[tx] = A[tx] * 3.0

    a = rng.standard_normal(N).astype(np.float32)
    got = emulate(pipeline.lower(main, TARGETS[0]), a, np.zeros_like(a))[1]
    np.testing.assert_allclose(got, a.astype(np.float64) * 3.0, rtol=1e-6)


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for case in CASES[:3]:
        assert pipeline.build(offset_reduce(*case), {**target, "compiler": "nvcc"}).device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,offset,threads,kind,dim,clear", CASES)
def test_offset_fragment_reduce_gpu(M, N, offset, threads, kind, dim, clear):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    a = torch.randn(M, N)
    out = M if dim == 1 else N
    r = torch.full((out,), 7.0, device="cuda")
    c = torch.zeros(M, N, device="cuda")
    kernel = load_kernel(
        pipeline.build(offset_reduce(M, N, offset, threads, kind, dim, clear), {"kind": "cuda"})
    )
    kernel(a.cuda(), r, c)
    torch.cuda.synchronize()
    want_r, want_c = reference(a.double().numpy(), kind, dim, clear)
    np.testing.assert_allclose(r.cpu().numpy(), want_r, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c.cpu().numpy(), want_c, rtol=1e-5, atol=1e-5)
