"""Tile ops and ``T.Parallel`` loops under an ``if`` on the thread index.

Upstream re-plans ``T.copy``/``T.fill``/``T.clear``/``T.Parallel`` under ``if tx < 128:``
(``tx >= 128``, ``lo <= tx < hi``, an ``else`` of one) over the threads the condition
keeps. They were a CompileError here (before that, a silently half-filled tile); now the
kept threads, proven to be one contiguous range, share the work (CUDA: split over
``t - lo``, fragments laid out on those threads, barriers inside the branch as
``bar.sync id, hi - lo``; CPU: the work runs once, per-thread code over ``[lo, hi)``).
Anything else under such an ``if`` is a CompileError at the user's line. Checked against
float64 numpy on the CPU backend, in the CUDA emulator (sm_80, sm_90a, race check), with
nvcc and on the GPU.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
M, N = 40, 52  # not tile multiples


def _kept(cond, tx):
    return {
        "ge128": tx >= 128,
        "lt128": tx < 128,
        "mid": (tx >= 64) & (tx < 192),
        "warp": tx // 32 == 2,
    }[cond]


def branch_kernel(cond):
    """Under the ``if``: global -> shared copy, a transposed T.Parallel read of it (a
    barrier among the kept threads), shared -> fragment, an accumulating T.Parallel over
    the fragment, fragment -> global, T.clear of a shared tile; a per-thread store."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        O: T.Tensor((N, M), "float32"),
        P: T.Tensor((M, N), "float32"),
        Z: T.Tensor((M, N), "float32"),
        W: T.Tensor((256,), "float32"),
    ):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            s = T.alloc_shared((M, N), "float32")
            z = T.alloc_shared((M, N), "float32")
            f = T.alloc_fragment((M, N), "float32")
            T.fill(z, 5.0)

            @T.macro
            def kept_threads_work():
                T.copy(A, s)
                for i, j in T.Parallel(N, M):
                    O[i, j] = s[j, i] * 2.0
                T.copy(s, f)
                for i, j in T.Parallel(M, N):
                    f[i, j] += s[i, j]
                T.copy(f, P)
                T.clear(z)
                W[tx] = 1.0

            if cond == "ge128":
                if tx >= 128:
                    kept_threads_work()
            elif cond == "lt128":
                if tx < 128:
                    kept_threads_work()
            elif cond == "mid":
                if tx >= 64 and tx < 192:
                    kept_threads_work()
            elif cond == "warp":
                if tx // 32 == 2:
                    kept_threads_work()
            T.copy(z, Z)

    return main


def _check_branch(cond, outs, a):
    o, p, z, w = outs
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(o, 2 * a64.T, rtol=1e-6)
    np.testing.assert_allclose(p, 2 * a64, rtol=1e-6)
    np.testing.assert_allclose(z, np.zeros_like(a64))
    np.testing.assert_array_equal(w, _kept(cond, np.arange(256)).astype(np.float32))


CONDS = ["ge128", "lt128", "mid", "warp"]


def _inputs(rng):
    a = rng.standard_normal((M, N)).astype(np.float32)
    outs = [np.zeros((N, M), np.float32), np.zeros((M, N), np.float32)]
    return a, outs + [np.full((M, N), 9.0, np.float32), np.zeros(256, np.float32)]


@pytest.mark.parametrize("cond", CONDS)
def test_branch_cpu(rng, cond):
    a, outs = _inputs(rng)
    kernel = tilelang.compile(branch_kernel(cond), target="cpu")
    ts = [torch.from_numpy(x) for x in outs]
    kernel(torch.from_numpy(a), *ts)
    _check_branch(cond, [t.numpy() for t in ts], a)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("cond", CONDS)
def test_branch_emulated(rng, target, cond):
    a, outs = _inputs(rng)
    got = emulate(pipeline.lower(branch_kernel(cond), target), a, *outs, race_check=True)
    _check_branch(cond, got[1:], a)


def split_kernel():
    """Warp-specialization style: each branch of `if tx < 128 / else` copies its own tile
    and accumulates into it twice (a wrong thread count would add it more or fewer times)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((N,), "float32"),
        C: T.Tensor((M, N), "float32"),
        D: T.Tensor((N,), "float32"),
    ):
        with T.Kernel(2, threads=256) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((M, N), "float32")
            r = T.alloc_shared((N,), "float32")
            g = T.alloc_shared((N,), "float32")
            if tx < 128 and bx == 1:
                T.copy(A, s)
                for i, j in T.Parallel(M, N):
                    s[i, j] = s[i, j] + A[i, j]
                T.copy(s, C)
            # the two arms run at once on a GPU (different warps): each writes its own tile
            # (both writing r was a race: compute-sanitizer racecheck on the H200 found it)
            if tx < 96:
                T.fill(g, 1.0)
            else:
                T.copy(B, r)
                for j in T.Parallel(N):
                    r[j] = r[j] * 3.0
            for j in T.Parallel(N):
                D[j] = r[j] * g[j]

    return main


def _check_split(c, d, a, b):
    np.testing.assert_allclose(c, 2 * a.astype(np.float64), rtol=1e-6)
    np.testing.assert_allclose(d, 3 * b.astype(np.float64), rtol=1e-6)


def test_split_cpu(rng):
    a = rng.standard_normal((M, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    c, d = torch.zeros(M, N), torch.zeros(N)
    tilelang.compile(split_kernel(), target="cpu")(torch.from_numpy(a), torch.from_numpy(b), c, d)
    _check_split(c.numpy(), d.numpy(), a, b)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_split_emulated(rng, target):
    a = rng.standard_normal((M, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    low = pipeline.lower(split_kernel(), target)
    got = emulate(low, a, b, np.zeros_like(a), np.zeros_like(b), race_check=True)
    _check_split(got[2], got[3], a, b)


def refused(what):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32"), n: T.int32):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            s = T.alloc_shared((M, N), "float32")
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            for i, j in T.Parallel(M, N):  # f laid over the first threads of the block
                f[i, j] = A[i, j]
            if what == "odd":
                if tx % 2 == 0:
                    T.copy(A, s)  # the refused line
            elif what == "runtime":
                if tx < n:
                    T.copy(A, s)  # the refused line
            elif what == "reduce":  # re-planned over threads 128..255, but f is on 0..31
                if tx >= 128:
                    T.reduce_max(f, r, dim=1)  # the refused line
            elif what == "owners":
                if tx >= 128:
                    T.fill(f, 0.0)  # the refused line
            elif what == "else":
                if tx >= 64 and tx < 192:  # noqa: SIM300
                    T.copy(A, s)
                else:
                    T.copy(A, s)  # the refused line
            T.reduce_sum(f, r, dim=1)
            T.copy(r, O)

    return main


@pytest.mark.parametrize(
    "what,pattern",
    [
        ("odd", r"T.copy under `if tx % 2 == 0`.*not one contiguous range"),
        ("runtime", r"T.copy under `if tx < n`.*not one contiguous range"),
        ("reduce", r"T.reduce under `if tx >= 128`.*fragment f has elements on threads 0\.\.\d+"),
        ("owners", r"T.fill under `if tx >= 128`.*fragment f has elements on threads 0\.\.\d+"),
        ("else", r"T.copy under `if .*not one contiguous range"),
    ],
)
def test_refused_cuda(what, pattern):
    with pytest.raises(errors.CompileError, match=pattern) as info:
        pipeline.lower(refused(what), TARGETS[0])
    line = info.value.args[0].split(":")[1]
    assert "the refused line" in open(__file__).read().splitlines()[int(line) - 1]


@pytest.mark.parametrize("what", ["odd", "runtime", "else"])
def test_refused_cpu(what):
    with pytest.raises(errors.CompileError, match="not one contiguous range"):
        tilelang.compile(refused(what), target="cpu")


def test_partial_barrier_needs_whole_warps():
    """A barrier among threads 0..99 cannot be a ``bar.sync``: refused at the `if`."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            s = T.alloc_shared((M, N), "float32")
            if tx < 100:
                T.copy(A, s)
                for i, j in T.Parallel(N, M):
                    O[i, j] = s[j, i]

    with pytest.raises(errors.CompileError, match="whole warps"):
        pipeline.lower(main, TARGETS[0])


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for kernel in (branch_kernel("mid"), split_kernel()):
        assert pipeline.build(kernel, {**target, "compiler": "nvcc"}).device_binary


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return load_kernel


@pytest.mark.cuda
@pytest.mark.parametrize("cond", CONDS)
def test_branch_gpu(rng, cond):
    load_kernel = _gpu()
    a, outs = _inputs(rng)
    kernel = load_kernel(pipeline.build(branch_kernel(cond), {"kind": "cuda"}))
    ts = [torch.from_numpy(x).cuda() for x in outs]
    kernel(torch.from_numpy(a).cuda(), *ts)
    torch.cuda.synchronize()
    _check_branch(cond, [t.cpu().numpy() for t in ts], a)


@pytest.mark.cuda
def test_split_gpu(rng):
    load_kernel = _gpu()
    a = rng.standard_normal((M, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    c, d = torch.zeros(M, N, device="cuda"), torch.zeros(N, device="cuda")
    kernel = load_kernel(pipeline.build(split_kernel(), {"kind": "cuda"}))
    kernel(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c, d)
    torch.cuda.synchronize()
    _check_split(c.cpu().numpy(), d.cpu().numpy(), a, b)


def global_copy_kernel():
    """No shared memory changes hands inside the branch: no barrier needed there."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            if tx >= 64:
                T.copy(A, B)

    return main


@pytest.mark.parametrize(
    "target", [{"kind": "hip", "arch": "gfx90a"}, {"kind": "metal"}], ids=["rocm", "metal"]
)
def test_vendor_backends(target):
    """HIP/MSL have no barrier of part of a block: a branch needing one is refused at the
    user's line; one needing none lowers, split over the kept threads."""
    from tilelang.backends.metal import pipeline as metal
    from tilelang.backends.rocm import pipeline as rocm

    backend = rocm if target["kind"] == "hip" else metal
    with pytest.raises(
        errors.CompileError, match=r"test_thread_range_tile_ops.py:\d+: .*no barrier"
    ):
        backend.lower(branch_kernel("ge128"), target)
    text = str(backend.lower(global_copy_kernel(), target))
    assert "tx - 64" in text and "named_barrier" not in text


def test_global_copy_emulated(rng):
    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(pipeline.lower(global_copy_kernel(), TARGETS[0]), a, np.zeros_like(a))
    np.testing.assert_array_equal(got[1], a)


def test_per_thread_atomic_under_a_range_runs_per_thread_on_cpu():
    """``if tx < 4: T.atomic_add(C[0], 1)`` is per-thread work (4 adds on a GPU): the CPU
    backend runs one-element atomics per thread (it used to refuse them there)."""

    @T.prim_func
    def main(C: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            if tx < 4:
                T.atomic_add(C[0], 1)

    c = torch.zeros(1, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(c)
    assert c.item() == 4


def nested_kernel():
    """Nested conditions: `if tx >= 64:` then `if tx < 192:` keep threads 64..191; the
    T.Parallel accumulates, so a wrong thread count adds the wrong number of times."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            s = T.alloc_shared((M, N), "float32")
            if tx >= 64:
                if tx < 192:
                    T.copy(A, s)
                    for i, j in T.Parallel(M, N):
                        s[i, j] += A[i, j] * 2.0
                    T.copy(s, B)

    return main


def test_nested_conditions(rng):
    a = rng.standard_normal((M, N)).astype(np.float32)
    for target in TARGETS:
        got = emulate(pipeline.lower(nested_kernel(), target), a, np.zeros_like(a), race_check=True)
        np.testing.assert_allclose(got[1], 3 * a.astype(np.float64), rtol=1e-6)
    b = torch.zeros(M, N)
    tilelang.compile(nested_kernel(), target="cpu")(torch.from_numpy(a), b)
    np.testing.assert_allclose(b.numpy(), 3 * a.astype(np.float64), rtol=1e-6)
