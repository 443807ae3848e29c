"""FlashAttention backward on sm_90a: lse/Delta through 1-d TMA boxes, the loop warp-specialized.

CPU:

* ``plan_tma_copy`` of a 1-d shared tile: one ``1 x n`` box without swizzle when the row is
  a multiple of 128 bytes and the global strides are 16-byte multiples; the reasons otherwise;
* the release check (``ws_stage_reads.stage_loads_reach_wgmma``): the backward's lse/Delta
  element loads reach a wgmma operand (released after the wgmma's wait); a load whose value
  only reaches a store after the last wgmma (or no wgmma) is released after a proxy fence;
* the backward examples' decisions (``tl.tma``): TMA for Q, dO, lse and Delta, warp-specialized,
  at head dims 64 and 128, causal and not; sequence lengths that are not a multiple of 4 (lse
  rows off 16 bytes) keep lse/Delta as synchronous copies and still specialize;
* emulation (the CUDA emulator with the wgmma RS model): the specialized backward at lengths
  that are not tile multiples against torch float64 autograd;
* nvcc: the specialized kernel compiles for sm_90a, and in its SASS every consumer mbarrier
  arrive follows a warpgroup wait (the ordering the release check relies on).

GPU (``cuda`` marker): the bhsd and GQA backward at moderate shapes against torch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_loader import load_example  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
BWD_BHSD = "flash_attention/example_mha_bwd_bhsd.py"
BWD_BSHD = "flash_attention/example_mha_bwd_bshd.py"
GQA_BWD = "flash_attention/example_gqa_bwd.py"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _tma_notes(lowered) -> list[str]:
    for name in reversed(lowered.names()):
        attrs = getattr(lowered.stages[name], "attrs", None)
        if attrs is not None and attrs.get("tl.tma") is not None:
            return [str(x) for x in attrs.get("tl.tma")]
    return []


# ------------------------------------------------------------------ 1-d tiles as TMA boxes
def _row_copy_kernel(n_rows, seq, block, stages=2):
    """A pipelined loop that copies a 1-d row tile of ``x`` and uses it elementwise."""

    @T.prim_func
    def main(x: T.Tensor((n_rows, seq), "float32"), y: T.Tensor((n_rows, seq), "float32")):
        with T.Kernel(n_rows, threads=128) as bx:
            tile = T.alloc_shared([block], "float32")
            acc = T.alloc_fragment([block], "float32")
            for k in T.Pipelined(T.ceildiv(seq, block), num_stages=stages):
                T.copy(x[bx, k * block : (k + 1) * block], tile)
                for i in T.Parallel(block):
                    acc[i] = tile[i] * 2.0
                T.copy(acc, y[bx, k * block : (k + 1) * block])

    return main


@pytest.mark.parametrize(
    "seq,block,expect",
    [
        (256, 64, "TMA, 1 box(es) of 1x64, swizzle NONE, 256 bytes"),
        (96, 32, "TMA, 1 box(es) of 1x32, swizzle NONE, 128 bytes"),
        (256, 16, "a 1-d tile of 64 bytes"),
    ],
)
def test_1d_tile_tma_decision(seq, block, expect):
    lowered = tilelang.lower(
        _row_copy_kernel(3, seq, block), SM90A, pass_configs={"tl.disable_tma_lower": False}
    )
    notes = " | ".join(_tma_notes(lowered))
    assert expect in notes, notes


def test_1d_tile_stride_not_16_bytes():
    """Rows of 250 floats (1000 bytes): the map's stride is no 16-byte multiple; cp.async
    cannot copy the rows either (no 16-byte vectors), so the copy stays synchronous."""
    lowered = tilelang.lower(
        _row_copy_kernel(3, 250, 64), SM90A, pass_configs={"tl.disable_tma_lower": False}
    )
    assert "tma_load" not in lowered.script("source")


def test_1d_tile_tma_emulated(rng):
    """The 1-d boxes run by the emulator: the last box reaches past the row (zero fill)."""
    from tilelang.testing import cuda_emulator as emu

    func = _row_copy_kernel(3, 96, 64)
    lowered = pipeline.lower(func, {**SM90A}, {"tl.disable_tma_lower": False})
    assert "tma_load_2d" in lowered.script()
    x = rng.standard_normal((3, 96)).astype(np.float32)
    y = np.full_like(x, np.nan)
    out = emu.emulate(lowered, x, y)
    np.testing.assert_allclose(out[1], 2.0 * x)


# ------------------------------------------------------------------ the release check
def _elementwise_after_last_wgmma(block=64, dim=64, use_in_gemm=False):
    """A loop with a pipelined Q tile (wgmma) and a 1-d ``s`` tile read elementwise; ``s``
    feeds the gemm's register operand with ``use_in_gemm=True``, only an accumulator that the
    next gemm clears with ``"cleared"``, only a global store otherwise."""

    @T.prim_func
    def main(
        q: T.Tensor((1024, dim), "float16"),
        s: T.Tensor((1024,), "float32"),
        w: T.Tensor((128, dim), "float16"),
        out: T.Tensor((128, 1024), "float32"),
    ):
        with T.Kernel(1, threads=256) as _bx:
            w_shared = T.alloc_shared([128, dim], "float16")
            q_shared = T.alloc_shared([block, dim], "float16")
            s_shared = T.alloc_shared([block], "float32")
            acc = T.alloc_fragment([128, block], "float32")
            acc2 = T.alloc_fragment([128, dim], "float32")
            p = T.alloc_fragment([128, block], "float16")
            T.copy(w, w_shared)
            T.clear(acc2)
            for k in T.Pipelined(T.ceildiv(1024, block), num_stages=2):
                T.copy(q[k * block : (k + 1) * block, :], q_shared)
                T.copy(s[k * block : (k + 1) * block], s_shared)
                T.gemm(w_shared, q_shared, acc, transpose_B=True, clear_accum=True)
                if use_in_gemm == "cleared":
                    for i, j in T.Parallel(128, dim):
                        acc2[i, j] = acc2[i, j] + s_shared[j % block]
                    T.gemm(w_shared, q_shared, acc2, clear_accum=True)
                    T.copy(acc, out[:, k * block : (k + 1) * block])
                elif use_in_gemm:
                    for i, j in T.Parallel(128, block):
                        p[i, j] = acc[i, j] * s_shared[j]
                    T.gemm(p, q_shared, acc2)
                    T.copy(acc, out[:, k * block : (k + 1) * block])
                else:
                    for i, j in T.Parallel(128, block):
                        acc[i, j] = acc[i, j] * s_shared[j]
                    T.copy(acc, out[:, k * block : (k + 1) * block])
            T.copy(acc2, out[:, 0:dim])

    return main


@pytest.mark.parametrize("use_in_gemm", [True, False, "cleared"])
def test_release_check_decides_specialization(use_in_gemm):
    lowered = tilelang.lower(_elementwise_after_last_wgmma(use_in_gemm=use_in_gemm), SM90A)
    notes = " | ".join(_tma_notes(lowered))
    assert "warp-specialized (" in notes and "s -> s_shared: TMA" in notes, notes
    # the s values reach only a global store after the last wgmma: not ordered by the
    # wgmma's wait, so each consumer thread fences before its release
    fenced = "generic-proxy stage reads: fence.proxy.async before each release" in notes
    assert fenced == (use_in_gemm is not True), notes


# ------------------------------------------------------------------ the backward's decisions
@pytest.mark.parametrize(
    "dim,causal,seq", [(128, False, 1000), (128, True, 1000), (64, False, 1000)]
)
def test_bwd_bhsd_decision(dim, causal, seq):
    m = load_example(BWD_BHSD)
    func = m.flashattn_bwd.get_tir(2, 2, seq, dim, causal, **m.bwd_config(dim))
    notes = _tma_notes(tilelang.lower(func, SM90A))
    text = " | ".join(notes)
    for tile in ("Q -> q", "lse -> lse_shared", "dO -> do", "Delta -> delta"):
        assert f"{tile}: TMA" in text, text
    assert "warp-specialized (" in text, text


def test_bwd_bhsd_decision_odd_length():
    """1001 positions: lse rows are not 16-byte multiples, so lse/Delta stay synchronous
    copies (no cp.async either) and the loop still specializes over Q and dO."""
    m = load_example(BWD_BHSD)
    func = m.flashattn_bwd.get_tir(1, 2, 1001, 128, False, **m.bwd_config(128))
    text = " | ".join(_tma_notes(tilelang.lower(func, SM90A)))
    assert "Q -> q: TMA" in text and "lse -> lse_shared" not in text, text
    assert "warp-specialized (" in text, text


# ------------------------------------------------------------------ emulation
def _emulated_bwd(m, causal, rng, S, D, boxes_1d=True, dq_layout=True):
    from test_gemm_wgmma_rs import emulate_rs

    B, H = 1, 1
    q, k, v, do = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, causal)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, causal, **m.bwd_config(D), dq_layout=dq_layout)
    lowered = pipeline.lower(func, SM90A)
    script = lowered.script()
    assert "named_barrier" in script  # specialized
    assert ("tl::AtomicAddx2" in script) == (not dq_layout)
    assert ("tma_load_3d" in script) == boxes_1d  # lse/Delta as 1-d boxes
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v)
    post = m.flashattn_bwd_postprocess(B, H, S, D, dq_layout=dq_layout)
    dq16 = post(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


def test_bwd_bhsd_dq_rows_emulated(rng):
    """``dq_layout=False``: dQ accumulated row-major with float2 atomics (d=128, causal)."""
    _emulated_bwd(load_example(BWD_BHSD), True, rng, 140, 128, dq_layout=False)


@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_warp_specialized_emulated(causal, rng):
    """The default d=128 backward (128 x 64 blocks, 2 consumer warpgroups, TMA Q/dO/lse/Delta)
    at 140 positions (the last Q/lse boxes past the end) against float64 autograd; dK/dV
    start as NaN so every stored row must be written."""
    _emulated_bwd(load_example(BWD_BHSD), causal, rng, 140, 128)


def test_bwd_bhsd_odd_length_warp_specialized_emulated(rng):
    """99 positions: lse/Delta rows are no 16-byte multiples, so the consumers copy them
    synchronously each iteration (named barriers) while Q/dO come by TMA."""
    _emulated_bwd(load_example(BWD_BHSD), True, rng, 99, 64, boxes_1d=False)


def test_bwd_bhsd_d64_warp_specialized_emulated(rng):
    """Head dim 64: dS K stays on mma.sync (it reads no pipelined tile), the loop specializes."""
    _emulated_bwd(load_example(BWD_BHSD), False, rng, 100, 64)


# ------------------------------------------------------------------ nvcc / SASS
def _sass(source: str, tmp_path) -> str:
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    cubin = tmp_path / "k.cubin"
    subprocess.run(
        ["nvcc", "-arch=sm_90a", "-cubin", "-O3", "-std=c++17", "-o", str(cubin), str(cu)],
        check=True,
        capture_output=True,
    )
    tool = shutil.which("cuobjdump")
    if tool is None:
        pytest.skip("needs cuobjdump")
    return subprocess.run([tool, "-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


@needs_nvcc
@pytest.mark.parametrize("dim", [128, 64])
def test_bwd_consumer_release_follows_wgmma_wait_in_sass(dim, tmp_path):
    """In the SASS of the specialized backward, each consumer ``SYNCS.ARRIVE`` on an empty
    barrier comes after a ``WARPGROUP.DEPBAR`` (``wgmma.wait_group``) with no shared load
    (``LDS``) between them: every lse/Delta element load has returned (its value fed a
    wgmma that was waited for) when the stage is handed back."""
    m = load_example(BWD_BHSD)
    func = m.flashattn_bwd.get_tir(2, 16, 1024, dim, False, **m.bwd_config(dim))
    artifact = pipeline.build(func, {**SM90A, "compiler": "nvcc"})
    sass = _sass(artifact.kernel_source, tmp_path)
    lines = [ln.split(";")[0] for ln in sass.splitlines() if re.search(r"/\*[0-9a-f]{4,6}\*/", ln)]
    arrives = [i for i, ln in enumerate(lines) if "SYNCS.ARRIVE" in ln and "TRANS64" in ln]
    assert arrives, "no mbarrier arrive in the SASS"
    checked = 0
    for i in arrives:
        window = lines[max(0, i - 400) : i]
        waits = [j for j, ln in enumerate(window) if "WARPGROUP.DEPBAR" in ln]
        if not waits:
            continue  # the producer's arrive.expect_tx (no wgmma in its branch)
        after = window[waits[-1] + 1 :]
        assert not any(re.search(r"\bLDS(\.|\s)", ln) for ln in after), "\n".join(after)
        checked += 1
    assert checked >= 1


@needs_nvcc
def test_bwd_builds_with_nvcc_no_spills():
    m = load_example(BWD_BHSD)
    func = m.flashattn_bwd.get_tir(2, 16, 1000, 128, True, **m.bwd_config(128))
    artifact = pipeline.build(func, {**SM90A, "compiler": "nvcc"})
    assert artifact.meta["kernel_names"]


# ------------------------------------------------------------------ GPU
@pytest.mark.cuda
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_gpu(dim, causal):
    m = load_example(BWD_BHSD)
    m.main(2, 4, 1000, dim, causal, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_dq_rows_gpu(causal):
    """The row-major dQ variant (float2 atomics) against torch float64 autograd on the GPU."""
    m = load_example(BWD_BHSD)
    B, H, S, D = 2, 4, 1000, 128
    q, k, v, do = (torch.randn(B, H, S, D, dtype=torch.half, device="cuda") for _ in range(4))
    o, lse = m.flashattn_fwd(B, H, S, D, causal, **m.fwd_config(D))(q, k, v)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, do)
    kernel = m.flashattn_bwd(B, H, S, D, causal, **m.bwd_config(D), dq_layout=False)
    dq = torch.zeros(m.dq_accum_shape(B, H, S, D), dtype=torch.float32, device="cuda")
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    kernel(q, k, v, do, lse, delta, dq, dk, dv)
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D, dq_layout=False)(dq)
    ref = m._grads(
        lambda a, b, c: m.ref_program(a, b, c, causal), [x.double() for x in (q, k, v)], do
    )
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16, dk, dv), ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_bwd_gpu(causal):
    m = load_example(GQA_BWD)
    m.main(1, 8, 1000, 128, 128, 4, causal, device="cuda")


@pytest.mark.parametrize("dq_layout", [False, True])
def test_bwd_bshd_gpu_config_emulated(dq_layout, rng):
    """The bshd example at its GPU config (``bwd_config``): warp-specialized with 1-d TMA
    boxes; dQ row-major (tile atomics from the fragment) or permuted (element atomics),
    causal, 72 positions, against float64 autograd."""
    from test_gemm_wgmma_rs import emulate_rs

    m = load_example(BWD_BSHD)
    B, H, S, D = 1, 1, 72, 64
    q, k, v, do = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, True)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, True, dq_layout=dq_layout, **m.bwd_config(D))
    lowered = pipeline.lower(func, SM90A)
    script = lowered.script()
    assert "named_barrier" in script and "tma_load_3d" in script
    # row-major dQ: float2 atomics (under the base pointer's alignment test); permuted: scalar
    assert ("tl::AtomicAddx2" in script) == (not dq_layout)
    dq = np.zeros(q.shape, np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v)
    dq = arrays[6]
    if dq_layout:
        dq = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(dq)).numpy()
    ref = m.ref_program(tq, tk, tv, tdo, True)
    for name, got, want in zip(("dQ", "dK", "dV"), (dq, arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.detach().numpy(), rtol=2e-2,
                                   atol=2e-2, err_msg=name)  # fmt: skip


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bshd_gpu(causal):
    load_example(BWD_BSHD).main(2, 4, 1000, 128, causal, device="cuda")


# ------------------------------------------------------------------ float2 atomics
def _gemm_atomic(M, N, K, rows):
    @T.prim_func
    def main(
        a: T.Tensor((M, K), "float16"), b: T.Tensor((N, K), "float16"),
        out: T.Tensor((rows, N), "float32"),
    ):  # fmt: skip
        with T.Kernel(1, threads=128) as _bx:
            a_s = T.alloc_shared([M, K], "float16")
            b_s = T.alloc_shared([N, K], "float16")
            acc = T.alloc_fragment([M, N], "float32")
            T.copy(a, a_s)
            T.copy(b, b_s)
            T.gemm(a_s, b_s, acc, transpose_B=True, clear_accum=True)
            T.atomic_add(out[0:M, 0:N], acc)

    return main


@pytest.mark.parametrize("aligned", [True, False])
def test_fragment_atomic_add_float2_emulated(aligned, rng):
    """A wgmma accumulator added into a float32 tensor whose rows end before the tile's
    (50 of 64): one ``tl::AtomicAddx2`` per column pair when the base pointer is 8-byte
    aligned, the scalar atomics otherwise; both add every element once (twice-run check)."""
    from test_gemm_wgmma_rs import RSMachine

    M, N, K, rows = 64, 64, 32, 50
    lowered = pipeline.lower(_gemm_atomic(M, N, K, rows), SM90A)
    script = lowered.script()
    assert "tl::AtomicAddx2" in script and "tl::is_aligned" in script
    assert "tl::AtomicAddx2" not in pipeline.lower(_gemm_atomic(M, N, K, rows), {
        "kind": "cuda", "arch": "sm_80"}).script()  # fmt: skip
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    start = rng.standard_normal((rows, N)).astype(np.float32)
    arrays = [a, b, start.copy()]
    for _ in range(2):
        m = RSMachine(lowered, arrays)
        m.aligned = aligned
        m.run(lowered.body, True)
        m.finish()
        arrays = m.arrays if hasattr(m, "arrays") else arrays
    want = start + 2 * (a.astype(np.float64) @ b.astype(np.float64).T)[:rows]
    np.testing.assert_allclose(arrays[2], want, rtol=1e-3, atol=1e-2)
