"""``tl.heavy_blocks_first``: block indices whose loops' work grows with them are reversed
(``passes/heavy_blocks_first.py``).

Structural: causal FlashAttention gets ``blockIdx.x -> gridDim.x - 1 - blockIdx.x``, the
non-causal one and stream-K do not; kernels with global atomics, ``while`` loops, clusters,
``T.use_swizzle`` or the pass config off are left alone with the reason in
``tl.block_order`` (shown in ``tilelang.lower``'s stage dump). Emulator: the remapped causal
FlashAttention (mma.sync and wgmma lowerings) vs float64 numpy, seq not a tile multiple.
nvcc: the sm_90a build compiles. GPU (``cuda``): against torch in float64, on and off.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes.heavy_blocks_first import ATTR, heavy_blocks_first
from tilelang.testing import cuda_emulator as emulator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pipeline_emulate import _attention, _example  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}
OFF = {"tl.heavy_blocks_first": False}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _fa(causal, seq=200, batch=1, heads=2, dim=64, blocks=(64, 64, 128), stages=2):
    bm, bn, threads = blocks
    prog = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    return prog.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
    )


def _notes(func):
    return list(func.attrs[ATTR]) if func.attrs is not None and ATTR in func.attrs else []


def _reversed(func, tag="blockIdx.x"):
    return any(n.startswith(f"{tag} reversed") for n in _notes(func))


def triangle(M, N, bm=32, bk=32, extra=None, grid_y=1, cluster=None, dynamic=False):
    """Out[r] = sum of A[r, :min(N, (bx + 1) * bm)]: block ``bx`` runs ``bx + 1`` K blocks
    (the causal pattern); ``extra(Out, bx, by)`` adds a statement (an atomic, a while loop,
    a swizzle hint)."""
    m = T.dynamic("m") if dynamic else M
    kw = {"cluster_dims": cluster} if cluster else {}

    @T.prim_func
    def main(A: T.Tensor((m, N), "float32"), Out: T.Tensor((m, grid_y), "float32")):
        with T.Kernel(T.ceildiv(m, bm), grid_y, threads=32, **kw) as (bx, by):
            tile = T.alloc_shared((bm, bk), "float32")
            acc = T.alloc_fragment((bm,), "float32")
            T.clear(acc)
            for kb in T.Pipelined(
                T.min(T.ceildiv(N, bk), T.ceildiv((bx + 1) * bm, bk)), num_stages=2
            ):
                T.copy(A[bx * bm, kb * bk], tile)
                for i in T.Parallel(bm):
                    for j in T.serial(bk):
                        acc[i] += tile[i, j]
            for i in T.Parallel(bm):
                if bx * bm + i < m:
                    Out[bx * bm + i, by] = acc[i]
            if extra is not None:
                extra(Out, bx, by)

    return main


def _triangle_ref(a, bm):
    out = np.zeros(a.shape[0])
    for r in range(a.shape[0]):
        out[r] = a[r, : min(a.shape[1], (r // bm + 1) * bm)].astype(np.float64).sum()
    return out


# ------------------------------------------------------------------------------ structure
def test_causal_flash_attention_is_reversed():
    func = heavy_blocks_first(_fa(True))
    assert _reversed(func), _notes(func)
    assert not _reversed(func, "blockIdx.y")
    text = str(func)
    assert "(3 - bx) * 64" in text  # ceildiv(200, 64) - 1 - bx, in the Q copy and the mask
    assert "bx * 64" not in text.replace("(3 - bx) * 64", "")


def test_non_causal_flash_attention_is_kept():
    func = heavy_blocks_first(_fa(False))
    assert not _reversed(func)
    assert "blockIdx.x kept: no loop extent grows with it" in _notes(func)
    assert str(func.body) == str(_fa(False).body)


def test_stream_k_is_kept():
    prog = _example("gemm_streamk/example_tilelang_gemm_streamk.py").tl_matmul_streamk
    func = heavy_blocks_first(prog.get_tir(200, 300, 256, 8))
    assert not _reversed(func)
    assert any("while loop" in n for n in _notes(func)), _notes(func)


def test_decision_in_tilelang_lower_stage_dump():
    lowered = tilelang.lower(_fa(True), target=SM90A)
    stage = str(lowered.stages["heavy_blocks_first"])
    assert "blockIdx.x reversed (heaviest blocks first)" in stage
    assert "(3 - bx) * 64" in stage
    off = tilelang.lower(_fa(True), target=SM90A, pass_configs=OFF)
    assert "tl.heavy_blocks_first = False" in str(off.stages["heavy_blocks_first"])


def test_dynamic_extent_is_reversed():
    func = heavy_blocks_first(triangle(0, 100, dynamic=True))
    assert _reversed(func), _notes(func)
    assert "(m + 32 - 1) // 32 - 1 - bx) * 32" in str(func)


@T.macro
def _atomic(Out, bx, by):
    T.atomic_add(Out[0, 0], 1.0)


@T.macro
def _spin(Out, bx, by):
    while Out[0, 0] < 0:
        T.evaluate(0)


@T.macro
def _swizzle(Out, bx, by):
    T.use_swizzle(4)


@pytest.mark.parametrize(
    "kwargs,configs,why",
    [
        ({"extra": _atomic}, None, "global-memory atomic (tl.atomic)"),
        ({"extra": _spin}, None, "while loop"),
        ({"extra": _swizzle, "grid_y": 4}, None, "T.use_swizzle"),
        ({"cluster": (2, 1, 1)}, None, "cluster launch (cluster_dims=[2, 1, 1])"),
        ({}, {"tl.cluster_multicast": 2}, "tl.cluster_multicast=2"),
        ({}, OFF, "tl.heavy_blocks_first = False"),
    ],
)
def test_unsafe_kernels_are_kept(kwargs, configs, why):
    lowered = tilelang.lower(triangle(256, 200, **kwargs), target=SM90A, pass_configs=configs)
    stage = lowered.stages["heavy_blocks_first"]
    notes = _notes(stage)
    assert not _reversed(stage), notes
    assert any(why in n for n in notes), notes


def test_safe_triangle_is_reversed():
    lowered = tilelang.lower(triangle(256, 200), target=SM90A)
    assert _reversed(lowered.stages["heavy_blocks_first"])


def test_decreasing_extent_is_kept():
    @T.prim_func
    def main(A: T.Tensor((256,), "float32"), Out: T.Tensor((256,), "float32")):
        with T.Kernel(8, threads=32) as bx:
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for k in T.serial(256 - bx * 32):
                acc[0] += A[k]
            Out[bx] = acc[0]

    func = heavy_blocks_first(main)
    assert not _reversed(func)
    assert any("not provably non-decreasing" in n for n in _notes(func)), _notes(func)


def _counting(extent_of):
    @T.prim_func
    def main(Lens: T.Tensor((4,), "int32"), Out: T.Tensor((8, 4), "int32")):
        with T.Kernel(8, 4, threads=32) as (bx, by):
            n = T.alloc_local((1,), "int32")
            n[0] = Lens[by]
            acc = T.alloc_local((1,), "int32")
            acc[0] = 0
            for k in T.serial(extent_of(Lens, n, bx, by)):
                acc[0] += k
            Out[bx, by] = acc[0]

    return main


def test_extent_reading_a_global_tensor_is_reversed():
    """varlen attention's pattern: a length read from global memory at an index free of bx"""
    func = heavy_blocks_first(_counting(lambda lens, n, bx, by: T.min(lens[by], (bx + 1) * 4)))
    assert _reversed(func), _notes(func)


def test_extent_reading_local_memory_is_kept():
    func = heavy_blocks_first(_counting(lambda lens, n, bx, by: T.min(n[0], (bx + 1) * 4)))
    assert not _reversed(func)
    assert any("data-dependent" in n for n in _notes(func)), _notes(func)


def test_pass_config_changes_the_cache_key():
    from tilelang.cache.kernel_cache import cache_key

    func = _fa(True)
    keys = {cache_key(func, target=SM90A, pass_configs=c) for c in ({}, OFF)}
    assert len(keys) == 2


# ------------------------------------------------------------------------------ emulator
@pytest.mark.parametrize("arch,seq", [("sm_80", 200), ("sm_80", 129)])
def test_reversed_causal_flash_attention_emulated(arch, seq):
    """mma.sync lowering (the emulator runs ldmatrix/mma.sync) vs float64."""
    B, H, D = 1, 2, 64
    lowered = pipeline.lower(_fa(True, seq, B, H, D, (64, 64, 128)), {"kind": "cuda", "arch": arch})
    assert _reversed(lowered)
    rng = np.random.default_rng(seq)
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    q, k, v, o = emulator.emulate(lowered, q, k, v, o)
    np.testing.assert_allclose(o, _attention(q, k, v, True), rtol=1e-2, atol=2e-3)


def test_reversed_causal_flash_attention_wgmma_emulated():
    """sm_90a: warp-specialized TMA + wgmma lowering of the remapped kernel vs float64."""
    from test_wgmma_overlap import emulate as emulate_wgmma

    B, H, D, seq = 1, 2, 64, 300
    lowered = pipeline.lower(_fa(True, seq, B, H, D, (128, 128, 256)), SM90A)
    assert _reversed(lowered)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    (_, _, _, o), _ = emulate_wgmma(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, True), rtol=1e-2, atol=2e-3)


def test_reversed_triangle_emulated():
    M, N, bm = 200, 150, 32
    lowered = pipeline.lower(triangle(M, N, bm=bm), SM80)
    assert _reversed(lowered)
    a = np.random.default_rng(1).standard_normal((M, N)).astype(np.float32)
    out = np.full((M, 1), np.nan, np.float32)
    _, out = emulator.emulate(lowered, a, out)
    np.testing.assert_allclose(out[:, 0], _triangle_ref(a, bm), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ nvcc
@needs_nvcc
def test_reversed_causal_flash_attention_compiles_sm90a():
    art = pipeline.build(_fa(True, 333, 2, 3, 128, (128, 128, 256)), SM90A, compiler="nvcc")
    assert "blockIdx.x" in art.get_kernel_source()


# ------------------------------------------------------------------------------ GPU
@pytest.mark.cuda
@pytest.mark.parametrize("configs", [None, OFF])
@pytest.mark.parametrize("blocks", [(128, 128, 256), (64, 64, 128)])
def test_causal_flash_attention_on_gpu(configs, blocks):
    import torch

    B, H, S, D = 2, 3, 333, 128
    kernel = tilelang.compile(_fa(True, S, B, H, D, blocks), out_idx=[3], pass_configs=configs)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = kernel(q, k, v)
    torch.cuda.synchronize()
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    scores = qd @ kd.transpose(-1, -2) / D**0.5
    mask = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
    ref = (scores.masked_fill(~mask, float("-inf")).softmax(-1) @ vd).transpose(1, 2)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)
