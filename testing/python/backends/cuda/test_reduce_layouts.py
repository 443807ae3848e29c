"""``T.reduce_*`` whose destination fragment's layout is fixed by something other than the
reduce (a later or earlier ``T.Parallel`` loop, another reduce, a fragment copy): the
source must be laid out consistently, or compilation must fail with a message naming both
buffers -- never a silent wrong sum (the shuffle lowering once added a whole tile into
every row). Emulated on the CPU for CUDA (sm_80, sm_90a), ROCm and Metal against float64
numpy; marked ``cuda``, the same kernels run on the GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.backends.metal import pipeline as metal_pipeline
from tilelang.backends.rocm import pipeline as rocm_pipeline
from tilelang.testing import cuda_emulator, metal_emulator, rocm_emulator

KINDS = ["sum", "max", "min", "abssum", "absmax"]
PATTERNS = ["loop_after", "loop_before", "copy", "reduce_chain", "cumsum"]
SIZES = [(32, 32, 32), (45, 70, 128), (20, 100, 256)]  # (M, N, threads)
TARGETS = {
    "sm_80": (pipeline, {"kind": "cuda", "arch": "sm_80"}, cuda_emulator.emulate),
    "sm_90a": (pipeline, {"kind": "cuda", "arch": "sm_90a"}, cuda_emulator.emulate),
    "rocm": (rocm_pipeline, {"kind": "rocm", "arch": "gfx90a"}, rocm_emulator.emulate),
    "metal": (metal_pipeline, {"kind": "metal"}, metal_emulator.emulate),
}


def _reducer(kind):
    return {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min,
            "abssum": T.reduce_abssum, "absmax": T.reduce_absmax}[kind]  # fmt: skip


def reduce_kernel(M, N, threads, kind, dim, clear, pattern):
    """Reduce an (M, N) tile over ``dim`` into ``part``, whose layout ``pattern`` fixes:
    loop_after (``acc[i] = part[i] + 1`` after the reduce: the bug report), loop_before
    (``part[i] = Init[i]`` before it), copy (``T.copy(acc, part)`` from a loop-laid
    fragment), reduce_chain (``part`` is first the result of another reduce), cumsum (the
    reduced tile is a ``T.cumsum`` of the input). With ``clear=False`` the reduce combines
    into what ``part`` holds (Init, or the first reduce's sum for reduce_chain)."""
    L = M if dim == 1 else N
    reduce = _reducer(kind)

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Init: T.Tensor((L,), "float32"),
             Out: T.Tensor((L,), "float32")):  # fmt: skip
        with T.Kernel(1, threads=threads):
            tile = T.alloc_shared((M, N), "float32")
            tile_f = T.alloc_fragment((M, N), "float32")
            part = T.alloc_fragment((L,), "float32")
            acc = T.alloc_fragment((L,), "float32")
            T.copy(A, tile)
            T.copy(tile, tile_f)
            if pattern == "loop_after":
                T.copy(Init, part)
                reduce(tile_f, part, dim=dim, clear=clear)
                for i in T.Parallel(L):
                    acc[i] = part[i] + 1.0
                T.copy(acc, Out)
            elif pattern == "loop_before":
                for i in T.Parallel(L):
                    part[i] = Init[i]
                reduce(tile_f, part, dim=dim, clear=clear)
                T.copy(part, Out)
            elif pattern == "copy":
                for i in T.Parallel(L):
                    acc[i] = Init[i] * 1.0
                T.copy(acc, part)
                reduce(tile_f, part, dim=dim, clear=clear)
                T.copy(part, Out)
            elif pattern == "reduce_chain":
                half = T.alloc_fragment((M, N), "float32")
                for i, j in T.Parallel(M, N):
                    half[i, j] = tile[i, j] * 0.5
                T.reduce_sum(half, part, dim=dim)
                reduce(tile_f, part, dim=dim, clear=clear)
                for i in T.Parallel(L):
                    acc[i] = part[i] + 1.0
                T.copy(acc, Out)
            else:  # cumsum
                scan = T.alloc_fragment((M, N), "float32")
                T.copy(Init, part)
                T.cumsum(tile_f, scan, dim=dim)
                reduce(scan, part, dim=dim, clear=clear)
                for i in T.Parallel(L):
                    acc[i] = part[i] + 1.0
                T.copy(acc, Out)

    return main


def _reduce_ref(x, kind, dim):
    if kind in ("abssum", "absmax"):
        x = np.abs(x)
    return {"sum": x.sum, "abssum": x.sum, "max": x.max, "absmax": x.max, "min": x.min}[kind](dim)


def _combine_ref(kind, old, new):
    if kind in ("sum", "abssum"):
        return old + new
    return np.maximum(old, new) if kind in ("max", "absmax") else np.minimum(old, new)


def reference(a, init, kind, dim, clear, pattern):
    """float64 numpy result of :func:`reduce_kernel`."""
    a, init = a.astype(np.float64), init.astype(np.float64)
    src = np.cumsum(a, axis=dim) if pattern == "cumsum" else a
    out = _reduce_ref(src, kind, dim)
    if not clear:
        start = (0.5 * a).sum(dim) if pattern == "reduce_chain" else init
        out = _combine_ref(kind, start, out)
    return out + 1.0 if pattern in ("loop_after", "reduce_chain", "cumsum") else out


def _inputs(M, N, dim):
    rng = np.random.default_rng()
    L = M if dim == 1 else N
    a = rng.standard_normal((M, N)).astype(np.float32)
    return a, rng.standard_normal(L).astype(np.float32), np.zeros(L, np.float32)


def _check(target, M, N, threads, kind, dim, clear, pattern):
    lower_mod, spec, emulate = TARGETS[target]
    a, init, out = _inputs(M, N, dim)
    func = reduce_kernel(M, N, threads, kind, dim, clear, pattern)
    _, _, got = emulate(lower_mod.lower(func, spec), a, init, out)
    want = reference(a, init, kind, dim, clear, pattern)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("kind", KINDS)
def test_kinds_emulated(kind, pattern):
    _check("sm_80", 45, 70, 128, kind, 1, False, pattern)


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("M,N,threads", SIZES)
@pytest.mark.parametrize("dim", [0, 1])
def test_shapes_threads_emulated(M, N, threads, dim, pattern):
    _check("sm_80", M, N, threads, "sum", dim, dim == 0, pattern)


@pytest.mark.parametrize("target", ["sm_90a", "rocm", "metal"])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_other_targets_emulated(target, pattern):
    _check(target, 45, 70, 128, "max" if pattern == "copy" else "sum", 1, False, pattern)


def keepdim_3d_kernel(B, M, N, threads, keepdim):
    """A (B, M, N) tile reduced over N into ``part`` ((B, M) or keepdim (B, M, 1)), whose
    layout a later ``T.Parallel`` loop fixes first (the larger loop is laid out first)."""
    shape = (B, M, 1) if keepdim else (B, M)

    @T.prim_func
    def main(A: T.Tensor((B, M, N), "float32"), Out: T.Tensor(shape, "float32")):
        with T.Kernel(1, threads=threads):
            tile_f = T.alloc_fragment((B, M, N), "float32")
            part = T.alloc_fragment(shape, "float32")
            acc = T.alloc_fragment(shape, "float32")
            T.copy(A, tile_f)
            T.reduce_max(tile_f, part, dim=2)
            if keepdim:
                for b, i, k in T.Parallel(B, M, 1):
                    acc[b, i, k] = part[b, i, k] * 2.0
            else:
                for b, i in T.Parallel(B, M):
                    acc[b, i] = part[b, i] * 2.0
            T.copy(acc, Out)

    return main


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("threads", [32, 128])
def test_keepdim_3d_emulated(keepdim, threads):
    B, M, N = 3, 21, 40
    a = np.random.default_rng().standard_normal((B, M, N)).astype(np.float32)
    out = np.zeros((B, M, 1) if keepdim else (B, M), np.float32)
    lowered = pipeline.lower(keepdim_3d_kernel(B, M, N, threads, keepdim), TARGETS["sm_80"][1])
    _, got = cuda_emulator.emulate(lowered, a, out)
    want = 2.0 * a.astype(np.float64).max(2, keepdims=keepdim)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bug_report_repro():
    """The report: every row got the whole (32, 32) tile's sum on sm_80, 32 threads."""

    @T.prim_func
    def main(A: T.Tensor((32, 32), "float32"), Out: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            tile = T.alloc_shared((32, 32), "float32")
            tile_f = T.alloc_fragment((32, 32), "float32")
            part = T.alloc_fragment((32,), "float32")
            acc = T.alloc_fragment((32,), "float32")
            T.clear(acc)
            T.copy(A, tile)
            T.copy(tile, tile_f)
            T.reduce_sum(tile_f, part, dim=1)
            for i in T.Parallel(32):
                acc[i] += part[i]
            for i in T.Parallel(32):
                Out[i] = acc[i]

    a = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    lowered = pipeline.lower(main, {"kind": "cuda", "arch": "sm_80"})
    _, out = cuda_emulator.emulate(lowered, a, np.zeros(32, np.float32))
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def annotated_kernel(M, N, annotate_src):
    """``part`` annotated onto thread ``i``; with ``annotate_src`` ``tile_f`` is annotated
    onto thread ``j`` too (the two cannot both hold: a conflict)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Out: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            tile_f = T.alloc_fragment((M, N), "float32")
            part = T.alloc_fragment((M,), "float32")
            T.annotate_layout({part: T.Fragment((M,), forward_thread_fn=lambda i: i)})
            if annotate_src:
                T.annotate_layout(
                    {tile_f: T.Fragment((M, N), forward_thread_fn=lambda i, j: j % 64)}
                )
            for i, j in T.Parallel(M, N):
                tile_f[i, j] = A[i, j]
            T.reduce_sum(tile_f, part, dim=1)  # the line the error names
            T.copy(part, Out)

    return main


def test_annotated_destination_only():
    """Only ``part`` fixed (annotated): ``tile_f`` takes a consistent layout."""
    a = np.random.default_rng().standard_normal((37, 64)).astype(np.float32)
    lowered = pipeline.lower(annotated_kernel(37, 64, False), {"kind": "cuda", "arch": "sm_80"})
    _, out = cuda_emulator.emulate(lowered, a, np.zeros(37, np.float32))
    np.testing.assert_allclose(out, a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


def test_conflicting_fixed_layouts_raise():
    """Both sides fixed elsewhere and inconsistent: a compile error at the reduce's line
    naming both buffers and who fixed their layouts."""
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(annotated_kernel(37, 64, True), {"kind": "cuda", "arch": "sm_80"})
    msg = str(info.value)
    assert "T.reduce_sum(tile_f, part)" in msg and "T.annotate_layout" in msg, msg
    lines = Path(__file__).read_text().splitlines()
    line = 1 + next(
        k for k, text in enumerate(lines) if text.endswith("# the line the error names")
    )
    assert f"test_reduce_layouts.py:{line}:" in msg, msg


def test_fragment_part_raises():
    """A reduce over part of a fragment (the lowering works on whole fragments) is a
    compile error naming the buffer, not a reduce of the whole tile."""

    @T.prim_func
    def main(A: T.Tensor((32, 64), "float32"), Out: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128):
            tile_f = T.alloc_fragment((32, 64), "float32")
            part = T.alloc_fragment((32,), "float32")
            T.copy(A, tile_f)
            T.reduce_sum(tile_f[0:32, 0:32], part, dim=1)
            T.copy(part, Out)

    with pytest.raises(errors.CompileError, match=r"only whole fragments.*tile_f\[32, 32\]"):
        pipeline.lower(main, {"kind": "cuda", "arch": "sm_80"})


# ------------------------------------------------------------------------------ GPU twins
def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("M,N,threads", SIZES)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_reduce_layouts_gpu(kind, dim, M, N, threads, pattern):
    torch, load = _gpu()
    a, init, out = _inputs(M, N, dim)
    clear = dim == 0
    ta, ti, to = (torch.from_numpy(x).cuda() for x in (a, init, out))
    load(reduce_kernel(M, N, threads, kind, dim, clear, pattern))(ta, ti, to)
    torch.cuda.synchronize()
    want = reference(a, init, kind, dim, clear, pattern)
    got = to.cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * max(1.0, np.abs(want).max()))


@pytest.mark.cuda
@pytest.mark.parametrize("keepdim", [False, True])
def test_keepdim_3d_gpu(keepdim):
    torch, load = _gpu()
    B, M, N = 3, 21, 40
    a = torch.randn(B, M, N, device="cuda")
    out = torch.zeros((B, M, 1) if keepdim else (B, M), device="cuda")
    load(keepdim_3d_kernel(B, M, N, 128, keepdim))(a, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2.0 * a.amax(2, keepdim=keepdim))
