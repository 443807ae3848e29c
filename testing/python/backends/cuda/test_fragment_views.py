"""Fragments whose layout is not a clean split, and views of fragments.

* ``T.reshape`` of a fragment on CUDA: the view's accesses went to a register array of its
  own that nothing filled (its ``decl_tensor`` pointed at the fragment's data, which is
  registers: an internal error or garbage). Now the view shares the base's registers: its
  layout is the base's reshaped (layout inference, either side first), and its accesses
  use the base's register array (``lower_fragments.alias_fragment_views``).
* ``T.annotate_layout`` with a ``T.Fragment`` whose thread map is not a clean split (gaps
  such as ``forward_thread = 3 * i``): an internal TIRx check failure in the lowering. Now
  a CompileError naming the buffer and the annotation's line; a ``Fragment`` whose register
  index cannot be inferred from its thread expression says so and what to pass instead.
* Odd thread counts (96, 160, 48 threads over tiles they do not divide) are checked to
  give right answers.

Checked against float64 numpy on the CPU backend, in the CUDA emulator (sm_80, sm_90a,
race check), with nvcc and on the GPU.
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
from tilelang.layout import Fragment
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def views_kernel(M, N, threads, first, H=None):
    """f (M, N) and its views g (M * N,) and h (H, M * N // H) (a view of g): written
    through one, read through the others; a row sum of h (a reduce over a view)."""
    H = N if H is None else H
    W = M * N // H

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((M * N,), "float32"),
        C: T.Tensor((H, W), "float32"),
        R: T.Tensor((H,), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((H,), "float32")
            g = T.reshape(f, (M * N,))
            h = T.reshape(g, (H, W))
            if first == "view":
                for k in T.Parallel(M * N):
                    g[k] = A[k // N, k % N] * 2.0
            else:
                T.copy(A, f)
                for i, j in T.Parallel(M, N):
                    f[i, j] = f[i, j] * 2.0
            for k in T.Parallel(M * N):
                B[k] = g[k] + 1.0
            T.copy(h, C)
            T.reduce_sum(h, r, dim=1)
            T.copy(r, R)

    return main


def _want(a, H):
    flat = 2 * a.astype(np.float64).reshape(-1)
    return flat + 1, flat.reshape(H, -1), flat.reshape(H, -1).sum(1)


SHAPES = [
    (16, 16, 64, "base", 16),
    (16, 16, 64, "view", 32),
    (24, 20, 96, "base", 120),
    (12, 10, 160, "view", 30),
    (32, 8, 96, "view", 64),
]


def _outs(M, N, H):
    return [
        np.zeros(M * N, np.float32),
        np.zeros((H, M * N // H), np.float32),
        np.zeros(H, np.float32),
    ]


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,threads,first,H", SHAPES)
def test_views_emulated(rng, target, M, N, threads, first, H):
    a = rng.standard_normal((M, N)).astype(np.float32)
    low = pipeline.lower(views_kernel(M, N, threads, first, H), target)
    got = emulate(low, a, *_outs(M, N, H), race_check=True)
    for out, want in zip(got[1:], _want(a, H)):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N,threads,first,H", SHAPES[:3])
def test_views_cpu(rng, M, N, threads, first, H):
    a = rng.standard_normal((M, N)).astype(np.float32)
    outs = [torch.from_numpy(x) for x in _outs(M, N, H)]
    kernel = tilelang.compile(views_kernel(M, N, threads, first, H), target="cpu")
    kernel(torch.from_numpy(a), *outs)
    for out, want in zip(outs, _want(a, H)):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("first,H", [("base", 20), ("view", 24)])
def test_misaligned_reshape_is_a_clear_error(first, H):
    """A view across the base's thread splits (24 x 20 over 96 threads viewed as rows of
    24 or 20): no layout of ours inverts it, so a CompileError at the user's line names
    the buffers (was a raw ValueError / TIRx check)."""
    with pytest.raises(
        errors.CompileError, match=r"test_fragment_views.py:\d+: T\.(reshape|reduce)"
    ):
        pipeline.lower(views_kernel(24, 20, 96, first, H), TARGETS[0])


def test_view_as_another_dtype_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 16), "float16")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((8, 8), "float32")
            T.copy(A, f)
            g = T.view(f, (8, 16), "float16")  # the refused line
            T.copy(g, B)

    with pytest.raises(errors.CompileError, match=r"T.view of fragment f \(float32\) as float16"):
        pipeline.lower(main, TARGETS[0])


def test_view_layout_conflict_names_both():
    """An annotation on the view that is not the base's layout reshaped: a conflict."""

    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((16, 16), "float32")
            g = T.reshape(f, (256,))
            T.annotate_layout(
                {f: Fragment((16, 16), forward_thread_fn=lambda i, j: i * 4 + j // 4)}
            )
            T.annotate_layout({g: Fragment((256,), forward_thread_fn=lambda k: k % 64)})
            T.copy(A, f)
            T.copy(g, B)

    with pytest.raises(
        errors.CompileError, match=r"layout conflict for g: it is a T.reshape of fragment f"
    ):
        pipeline.lower(main, TARGETS[0])


def annotated(fn, idx=None, threads=96):
    @T.prim_func
    def main(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((32, 32), "float32")
            T.annotate_layout(
                {f: Fragment((32, 32), forward_thread_fn=fn, forward_index_fn=idx)}
            )  # here
            T.copy(A, f)
            T.copy(f, B)

    return main


def test_thread_map_with_gaps_names_buffer_and_line():
    with pytest.raises(errors.CompileError, match=r"the fragment of f.*holding no element") as info:
        pipeline.lower(annotated(lambda i, j: i * 3), TARGETS[0])
    line = int(str(info.value).split(":")[1])
    assert "T.annotate_layout(" in open(__file__).read().splitlines()[line - 1]


@pytest.mark.parametrize(
    "fn",
    [lambda i, j: (i * 7 + j) % 96, lambda i, j: (i * 4 + j // 8) ^ (j % 8)],
    ids=["mod", "xor"],
)
def test_unsplittable_thread_expression_says_what_to_pass(fn):
    with pytest.raises(errors.TraceError, match="not a clean split of the index.*forward_index_fn"):
        annotated(fn)


def test_clean_annotation_runs(rng):
    """A clean split that is not a default layout (column groups on warps) runs right."""
    fn = lambda i, j: (j % 4) * 32 + i  # noqa: E731 - 128 threads, 8 registers each
    a = rng.standard_normal((32, 32)).astype(np.float32)
    low = pipeline.lower(annotated(fn, lambda i, j: j // 4, threads=128), TARGETS[0])
    got = emulate(low, a, np.zeros_like(a), race_check=True)
    np.testing.assert_array_equal(got[1], a)


def odd_threads(M, N, threads):
    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), R: T.Tensor((M,), "float32")
    ):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(A, f)
            for i, j in T.Parallel(M, N):
                f[i, j] = f[i, j] * 2.0
            T.reduce_sum(f, r, dim=1)
            T.copy(r, R)
            T.copy(f, B)

    return main


@pytest.mark.parametrize("M,N,threads", [(64, 64, 96), (40, 52, 160), (30, 7, 48), (7, 100, 96)])
def test_odd_thread_counts_emulated(rng, M, N, threads):
    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(
        pipeline.lower(odd_threads(M, N, threads), TARGETS[1]),
        a,
        np.zeros_like(a),
        np.zeros(M, np.float32),
        race_check=True,
    )
    np.testing.assert_allclose(got[1], 2 * a.astype(np.float64), rtol=1e-6)
    np.testing.assert_allclose(got[2], 2 * a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for M, N, threads, first, H in SHAPES:
        kernel = views_kernel(M, N, threads, first, H)
        assert pipeline.build(kernel, {**target, "compiler": "nvcc"}).device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,threads,first,H", SHAPES)
def test_views_gpu(rng, M, N, threads, first, H):
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    a = rng.standard_normal((M, N)).astype(np.float32)
    outs = [torch.from_numpy(x).cuda() for x in _outs(M, N, H)]
    kernel = load_kernel(pipeline.build(views_kernel(M, N, threads, first, H), {"kind": "cuda"}))
    kernel(torch.from_numpy(a).cuda(), *outs)
    torch.cuda.synchronize()
    for out, want in zip(outs, _want(a, H)):
        np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["copy", "parallel"])
def test_bijective_layout_without_computable_inverse_names_op_and_line(mode):
    """``forward_thread = 5 * i % 32`` is one-to-one without gaps, but not a sum of splits:
    the lowering cannot invert it (a raw TIRx/ValueError before); now a CompileError
    naming the op and the user's line."""

    @T.prim_func
    def main(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((32,), "float32")
            T.annotate_layout(
                {
                    f: Fragment(
                        (32,), forward_thread_fn=lambda i: i * 5 % 32, forward_index_fn=lambda i: 0
                    )
                }
            )
            if mode == "copy":
                T.copy(A, f)
            else:
                for i in T.Parallel(32):
                    f[i] = A[i]
            T.copy(f, B)

    what = "T.copy" if mode == "copy" else "a T.Parallel loop"
    with pytest.raises(
        errors.CompileError, match=rf"test_fragment_views.py:\d+: {what}: .*no inverse"
    ):
        pipeline.lower(main, TARGETS[0])
