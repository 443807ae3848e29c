"""CUDA pipeline without a GPU: the lowered thread-level IR run by the numpy emulator
(``tilelang.testing.cuda_emulator``), and Z3 proofs that the inferred layouts are sound.

Kernels: the pipeline's elementwise + row-sum kernel, the elementwise-add example (both
variants), the softmax example (row lengths that do and do not divide the threads) and
the FlashAttention example (gemm through the scalar rule, pass config ``tl.gemm_scalar``, which the emulator
can run; the mma path is covered by the GPU tests), plus a swizzled shared tile filled
from a 4-D region with unit dims.
"""

import pathlib
import sys

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes.layout_inference import infer_layouts
from tilelang.layout import make_swizzled_layout
from tilelang.layout.proofs import prove_fragment
from tilelang.testing.cuda_emulator import EmulationError, emulate

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from example_loader import load_example  # noqa: E402
from test_pipeline_kernels import elementwise_rowsum  # noqa: E402

TARGET = {"kind": "cuda", "arch": "sm_90a"}


_example = load_example


#: Pass configs that lower T.gemm to scalar FMAs, which the emulator can run.
SCALAR_GEMM = {"tl.gemm_scalar": True}


def check_layouts(func, threads=128):
    """Every fragment and T.Parallel layout: one slot per element and replica; loop
    layouts use every (thread < span, register) slot (lower_parallel runs the inverse)."""
    info = infer_layouts(func, threads, "sm_90a")
    for var, frag in info.layouts.items():
        if hasattr(frag, "get_thread_size"):
            result = prove_fragment(frag)
            assert result, f"{var.name}: {result}"
    for frag in info.loops.values():
        result = prove_fragment(frag, require_full=True)
        assert result, f"T.Parallel layout {frag}: {result}"
        table = frag.thread_table()
        assert table.min() >= 0 and table.max() < threads
    return info


# ------------------------------------------------------------------- elementwise + rowsum
@pytest.mark.parametrize("M,N", [(1000, 64), (70, 128)])
def test_elementwise_rowsum_emulated(M, N):
    func = elementwise_rowsum(M, N)
    check_layouts(func)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, N)).astype(np.float16)
    b = np.full_like(a, np.nan)
    s = np.full(M, np.nan, np.float32)
    a, b, s = emulate(pipeline.lower(func, TARGET), a, b, s)
    np.testing.assert_array_equal(b, (a.astype(np.float32) * 2).astype(np.float16))
    cols = (N + 63) // 64  # each column block writes its partial sum; the last one wins
    want = (a[:, (cols - 1) * 64 :].astype(np.float32) * 2).sum(1)
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------- elementwise example
@pytest.mark.parametrize("M,N", [(100, 72), (64, 64), (33, 1000)])
@pytest.mark.parametrize("variant", ["elementwise_add", "elementwise_add_direct"])
def test_elementwise_add_example_emulated(variant, M, N):
    factory = getattr(_example("elementwise/example_elementwise_add.py"), variant)
    func = factory.get_tir(M, N)
    check_layouts(func)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((M, N)).astype(np.float32) for _ in range(2))
    c = np.full_like(a, np.nan)
    a, b, c = emulate(pipeline.lower(func, TARGET), a, b, c)
    np.testing.assert_array_equal(c, a + b)


# ------------------------------------------------------------------- softmax example
@pytest.mark.parametrize("M,N", [(100, 256), (37, 1000), (16, 96)])
def test_softmax_example_emulated(M, N):
    func = _example("softmax/example_softmax.py").softmax.get_tir(M, N)
    check_layouts(func)
    x = np.random.default_rng(2).standard_normal((M, N)).astype(np.float32)
    y = np.full_like(x, np.nan)
    x, y = emulate(pipeline.lower(func, TARGET), x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_softmax_fused_default_is_split_per_axis():
    """N = 1000 used to give a thread expression mixing row and column bits."""
    func = _example("softmax/example_softmax.py").softmax.get_tir(64, 1000)
    info = check_layouts(func)
    for frag in info.loops.values():
        table = frag.thread_table()[0]
        rows = [set(table[i].tolist()) for i in range(table.shape[0])]
        assert all(len(r) == len(rows[0]) for r in rows)


# ------------------------------------------------------------------- flash attention
def _attention(q, k, v, causal):
    qf, kf, vf = (x.astype(np.float64).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = qf @ kf.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        n = q.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ vf).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_example_layouts(causal):
    func = _example("flash_attention/example_mha_fwd_bshd.py").flashattn.get_tir(
        1, 2, 128, 64, causal
    )
    check_layouts(func)
    pipeline.lower(func, TARGET)  # the 4-D Q/K/V/Output copies against swizzled tiles


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_example_emulated(causal):
    B, H, S, D = 1, 1, 128, 64
    func = _example("flash_attention/example_mha_fwd_bshd.py").flashattn.get_tir(B, H, S, D, causal)
    lowered = pipeline.lower(func, TARGET, SCALAR_GEMM)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    q, k, v, o = emulate(lowered, q, k, v, o)
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------- swizzled 4-D copies
def swizzled_roundtrip(B, S, H, D, bM=64):
    @T.prim_func
    def main(X: T.Tensor((B, S, H, D), "float16"), Y: T.Tensor((B, S, H, D), "float16")):
        with T.Kernel(T.ceildiv(S, bM), H, B, threads=128) as (bx, by, bz):
            Xs = T.alloc_shared((bM, D), "float16")
            T.annotate_layout({Xs: make_swizzled_layout(Xs)})
            T.copy(X[bz, bx * bM : (bx + 1) * bM, by, :], Xs)
            T.copy(Xs, Y[bz, bx * bM : (bx + 1) * bM, by, :])

    return main


def test_swizzled_copy_from_4d_region():
    B, S, H, D = 2, 100, 3, 64
    lowered = pipeline.lower(swizzled_roundtrip(B, S, H, D), TARGET)
    x = np.random.default_rng(4).standard_normal((B, S, H, D)).astype(np.float16)
    y = np.full_like(x, np.nan)
    x, y = emulate(lowered, x, y)
    np.testing.assert_array_equal(y, x)


# ------------------------------------------------------------------- the emulator itself
def test_emulator_reports_out_of_bounds_store():
    # under a run-time condition, so that tracing cannot prove it out of bounds (the
    # unconditional store is a CompileError: tilelang/transform/check_bounds.py), and with
    # the SIMT guards off (by default the store past the end is skipped, as upstream)
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), flag: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128) as bx:  # noqa: F841
            for i in T.serial(1):
                if flag[0] == 0.0:
                    A[T.get_thread_binding() + i] = 1.0

    with pytest.raises(EmulationError, match="outside shape"):
        unguarded = pipeline.lower(main, TARGET, {"tl.disable_safe_memory_legalize": True})
        emulate(unguarded, np.zeros(64, np.float32), np.zeros(1, np.float32))
