"""``T.annotate_layout``: IR form, layout inference, CUDA lowering (emulated), CPU, errors.

The annotation is a ``tl.annotate_layout`` statement carrying the layout (an IndexMap) and
the user's line; CUDA layout inference fixes it before any rule runs; copies, gemm and
element code in ``T.Parallel`` address the shared tile through it (padded tiles get a
larger allocation); conflicts name both lines. GPU runs are in
``testing/python/backends/cuda/test_annotate_layout_gpu.py``.
"""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest
import tvm_ffi
from source_lines import line_of
from tvm_tirx import ir

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes.layout_inference import infer_layouts
from tilelang.layout import Fragment, Layout, make_swizzled_layout
from tilelang.layout.annotation import contiguous_vectors, decode, encode, storage_elements
from tilelang.testing.cuda_emulator import emulate

THIS_FILE = os.path.basename(__file__)
SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def names_line(err, func, needle) -> bool:
    return f"{THIS_FILE}:{line_of(func, needle)}" in str(err)


from annotate_layout_kernels import elementwise, frag_layout, gemm, padded  # noqa: E402


def _gemm_ref(rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


# ------------------------------------------------------------------------------ IR form
def test_annotation_in_ir_and_round_trip():
    func = gemm(128, 128, 64, ann="pad")
    text = str(func)
    assert text.count("tl.annotate_layout") == 2, text
    calls = []

    def visit(call):
        if getattr(call.op, "name", "") == "tl.annotate_layout":
            calls.append(call)

    tvm_ffi.structural_walk(func.body, [(ir.Call, visit)])
    assert len(calls) == 2
    a_call = calls[0]
    assert a_call.args[0].name == "A_shared"
    assert a_call.loc.start_line == line_of(gemm, "# padded")
    assert decode(a_call.attrs).is_equal(padded(64, 32))
    # fresh trace, same annotation: same structural hash (the kernel cache keys on it)
    again = gemm(128, 128, 64, ann="pad")
    assert tvm_ffi.structural_hash(func) == tvm_ffi.structural_hash(again)
    other = gemm(128, 128, 64, ann="swizzle")
    assert tvm_ffi.structural_hash(func) != tvm_ffi.structural_hash(other)


def test_encode_decode_fragment():
    frag = frag_layout(64, 64)
    back = decode(encode(frag))
    assert isinstance(back, Fragment) and back.is_equal(frag)
    rep = Fragment((16,), forward_thread_fn=lambda i, r: i % 8 + 8 * r, replicate=2)
    assert decode(encode(rep)).is_equal(rep)


def test_tilelang_lower_shows_annotation_and_inferred_layout():
    func = gemm(128, 128, 64, ann="pad")
    lowered = tilelang.lower(func, target=SM80)
    assert "tl.annotate_layout" in str(lowered.stages["trace"])
    # consumed by layout inference (later passes see the layout map only)
    assert "tl.annotate_layout" not in str(lowered.stages["plan_shared_memory"])
    info = infer_layouts(func, 128, "sm_80")
    shared = {var.name: lay for var, lay in info.layouts.items()}
    assert shared["A_shared"].is_equal(padded(64, 32))
    assert shared["B_shared"].is_equal(padded(32, 64))
    # without the annotation gemm picks its swizzle: the annotation really wins
    plain = {
        v.name: lay
        for v, lay in infer_layouts(gemm(128, 128, 64, ann=None), 128, "sm_80").layouts.items()
    }
    assert not plain["A_shared"].is_equal(padded(64, 32))


def test_inferred_fragment_equals_annotation():
    func = elementwise(128, 128)
    info = infer_layouts(func, 128, "sm_80")
    frag = [lay for var, lay in info.layouts.items() if var.name == "F"][0]
    assert frag.is_equal(frag_layout(64, 64))
    # the loop over F takes F's layout (the loop filling S gets a free one)
    assert sum(loop.is_equal(frag_layout(64, 64)) for loop in info.loops.values()) == 1


# ------------------------------------------------------------------------------ storage
def test_padded_tile_gets_larger_storage():
    lay = padded(64, 32)
    assert storage_elements(lay) == 63 * 40 + 32
    assert storage_elements(make_swizzled_layout(((64, 32), "float16"))) == 64 * 32
    assert contiguous_vectors(lay, 8) and not contiguous_vectors(padded(64, 32, pad=4), 8)
    lowered = pipeline.lower(gemm(128, 128, 96, ann="pad", stages=3), SM80)
    # 3 stages of (63 * 40 + 32) halves each, in whole (64 x 32) slices of the typed view
    need_a = 3 * (63 * 40 + 32) * 2
    off, size = lowered.attrs["tl.shared_memory"]["A_shared_mb"]
    assert size >= need_a and size > 3 * 64 * 32 * 2


def test_generated_cuda_uses_annotated_address_mapping():
    src_pad = tilelang.lower(gemm(128, 128, 64, ann="pad", stages=1), target=SM80).stages["source"]
    kernel = src_pad[src_pad.index("__global__ void") :]
    # A rows are 40 halves = 80 bytes apart, B rows 72 halves = 144 bytes apart
    assert re.search(r"\* 80\)", kernel) and re.search(r"\* 144\)", kernel), kernel[:3000]
    src_plain = tilelang.lower(gemm(128, 128, 64, ann=None, stages=1), target=SM80).stages["source"]
    plain = src_plain[src_plain.index("__global__ void") :]
    assert not re.search(r"\* 80\)", plain)


# ------------------------------------------------------------------------------ emulation
@pytest.mark.parametrize("ann", ["swizzle", "pad"])
@pytest.mark.parametrize("M,N,K,stages", [(128, 128, 96, 3), (100, 72, 80, 2)])
def test_gemm_emulated(ann, M, N, K, stages, rng):
    lowered = pipeline.lower(gemm(M, N, K, ann=ann, stages=stages), SM80)
    a, b, ref = _gemm_ref(rng, M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    _, _, c = emulate(lowered, a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shared", ["pad", "swizzle"])
def test_parallel_access_through_layout_emulated(shared, rng):
    """T.Parallel writes the tile and T.copy reads it: both must use the annotated map."""
    M, N = 100, 136
    lowered = pipeline.lower(elementwise(M, N, shared=shared), SM80)
    a = rng.standard_normal((M, N)).astype(np.float16)
    b = np.full_like(a, np.nan)
    _, b = emulate(lowered, a, b)
    ref = a.astype(np.float64) * 2 + 1
    np.testing.assert_allclose(b.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------------------ CPU
def test_cpu_results_unchanged(randn):
    import torch

    M, N, K = 70, 50, 40
    bM = bN = bK = 32

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"),
             C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), "float32")
            B_shared = T.alloc_shared((bK, bN), "float32")
            C_local = T.alloc_fragment((bM, bN), "float32")
            T.annotate_layout({
                A_shared: make_swizzled_layout(A_shared),
                B_shared: lambda i, j: i * (bN + 4) + j,
                C_local: frag_layout(bM, bN),
            })  # fmt: skip
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], A_shared)
                T.copy(B[k * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bM, bx * bN])

    kernel = tilelang.compile(main, target="cpu")
    a, b, c = randn(M, K), randn(K, N), torch.zeros(M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)


def test_cpu_parallel_kernel_unchanged(rng):
    import torch

    M, N = 100, 136
    kernel = tilelang.compile(elementwise(M, N, shared="pad"), target="cpu")
    a = torch.from_numpy(rng.standard_normal((M, N))).half()
    b = torch.empty_like(a)
    kernel(a, b)
    torch.testing.assert_close(b.double(), a.double() * 2 + 1, rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------------------ nvcc
@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("ann", ["swizzle", "pad"])
def test_nvcc_compiles(target, ann):
    art = pipeline.build(
        gemm(256, 256, 128, bM=128, bN=128, ann=ann, stages=3), target, compiler="nvcc"
    )
    assert art.device_binary, "nvcc produced no device binary"
    art = pipeline.build(
        elementwise(256, 256, shared=ann if ann == "pad" else "swizzle"), target, compiler="nvcc"
    )
    assert art.device_binary


# ------------------------------------------------------------------------------ conflicts
def _lower_raises(kernel, target=SM80):
    with pytest.raises(tilelang.TileLangError) as info:
        pipeline.lower(kernel(), target)
    return info.value


def _conflict_kernel(kind):
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):  # fmt: skip
        with T.Kernel(1, 1, threads=128):
            A_shared = T.alloc_shared((64, 32), "float16")
            B_shared = T.alloc_shared((32, 64), "float16")
            C_local = T.alloc_fragment((64, 64), "float32")
            if kind == "fragment":
                T.annotate_layout({C_local: frag_layout(64, 64)})  # ann-frag
            elif kind == "column_major":
                T.annotate_layout({A_shared: lambda i, j: j * 64 + i})  # ann-col
            elif kind == "twice":
                T.annotate_layout({A_shared: make_swizzled_layout(A_shared)})  # first
                T.annotate_layout({A_shared: padded(64, 32)})  # ann-twice
            T.clear(C_local)
            T.copy(A, A_shared)
            T.copy(B, B_shared)
            T.gemm(A_shared, B_shared, C_local)  # the gemm
            T.copy(C_local, C)

    return main


def test_conflict_fragment_vs_gemm_names_both_lines():
    err = _lower_raises(lambda: _conflict_kernel("fragment"))
    assert "layout conflict for C_local" in str(err)
    assert names_line(err, _conflict_kernel, "# ann-frag") and names_line(
        err, _conflict_kernel, "# the gemm"
    ), err


@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_conflict_unreadable_shared_layout_names_both_lines(target):
    err = _lower_raises(lambda: _conflict_kernel("column_major"), target)
    assert "A_shared" in str(err) and "ldmatrix" in str(err)
    assert names_line(err, _conflict_kernel, "# ann-col") and names_line(
        err, _conflict_kernel, "# the gemm"
    ), err


def test_conflict_two_annotations_names_both_lines():
    err = _lower_raises(lambda: _conflict_kernel("twice"))
    assert "layout conflict for A_shared" in str(err)
    assert names_line(err, _conflict_kernel, "# first") and names_line(
        err, _conflict_kernel, "# ann-twice"
    ), err


def test_annotating_the_gemm_accumulator_layout_is_no_conflict(rng):
    M, N, K = 100, 72, 80
    plain = infer_layouts(gemm(M, N, K, ann=None), 128, "sm_80")
    acc = [lay for var, lay in plain.layouts.items() if var.name == "C_local"][0]
    lowered = pipeline.lower(gemm(M, N, K, ann="pad", c_layout=acc), SM80)
    a, b, ref = _gemm_ref(rng, M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    _, _, c = emulate(lowered, a, b, c)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    # same threads, other registers: gemm cannot use it
    swapped = Fragment.from_parts(
        acc.get_input_shape(), acc._vars, [acc.get_output_shape()[0] - 1 - acc.index[0]], acc.thread
    )
    with pytest.raises(tilelang.TileLangError, match="layout conflict for C_local"):
        pipeline.lower(gemm(M, N, K, ann="pad", c_layout=swapped), SM80)


def test_no_conflict_with_compatible_annotation_sm90():
    """A padded tile on sm_90a: the gemm leaves wgmma for mma.sync, which reads it."""
    lowered = pipeline.lower(gemm(128, 128, 64, ann="pad"), SM90)
    assert "ldmatrix" in str(lowered) and "wgmma" not in str(lowered)


# ------------------------------------------------------------------------------ bad input
BAD = {
    "not one-to-one": lambda S, F, A: {S: lambda i, j: i * 16 + j},
    "out of range": lambda S, F, A: {S: lambda i, j: i * 32 + j - 5},
    "has shape [64, 32]": lambda S, F, A: {S: Layout((32, 64), lambda i, j: i * 64 + j)},
    "must permute its storage": lambda S, F, A: {A: lambda i, j: i * 40 + j},
    "needs a tilelang.layout.Fragment": lambda S, F, A: {F: padded(64, 32)},
    "got a Fragment": lambda S, F, A: {S: frag_layout(64, 32)},
    "takes a dict": lambda S, F, A: [S],
    "must be a Layout, a Fragment or a function": lambda S, F, A: {S: 3},
    "layout function of S": lambda S, F, A: {S: lambda i: i},
    "keys must be buffers": lambda S, F, A: {"S": padded(64, 32)},
    "of F is not one-to-one": lambda S, F, A: {
        F: Fragment(
            (64, 32), forward_thread_fn=lambda i, j: j, forward_index_fn=lambda i, j: i // 2
        )
    },
}


@pytest.mark.parametrize("needle", list(BAD))
def test_bad_annotation_names_argument_and_line(needle):
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 32), "float16")
                F = T.alloc_fragment((64, 32), "float32")
                T.annotate_layout(BAD[needle](S, F, A))  # bad
                T.copy(A, S)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert needle in str(info.value), info.value
    assert names_line(info.value, kernel, "# bad"), info.value


def test_fragment_wider_than_block_is_rejected():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=64):
                F = T.alloc_fragment((64, 64), "float32")
                T.annotate_layout({F: frag_layout(64, 64, threads=128)})  # bad
                T.copy(A, F)
                T.copy(F, A)

        return main

    err = _lower_raises(kernel)
    assert "128 threads" in str(err) and names_line(err, kernel, "# bad"), err
