"""Shared reads issued before a wgmma wait (``passes/wgmma_prefetch.py``,
``tl.wgmma_prefetch_shared_reads``).

CPU:

* the FlashAttention backward at head dim 128: the ``lse``/``Delta`` ``copy_vec`` loads of the
  ``P^T`` and ``dS^T`` loops come before their ``tl::wgmma_wait<1>``, into register arrays,
  and the decisions are recorded (``tl.wgmma_prefetch``); with the config off nothing moves;
* the pass leaves the loop alone when the shared tile is written between the wait and the loop
  or inside the loop (programs built from the backward's IR), when the loop is not unrolled,
  or when the prefetch would take more than ``MAX_PREFETCH_REGISTERS`` registers;
* a small gemm kernel reading a shared row in the loop after its wait: applied, and not
  applied when that loop also writes a shared tile;
* emulation (the CUDA emulator's strict wgmma model): that kernel and the backward at lengths
  that are not tile multiples, config on and off, against float64;
* nvcc: ``ptxas -v`` of the benchmark's bwd128 shows no spills with the prefetch.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tvm_tirx import ir

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import wgmma_prefetch as pf
from tilelang.lowering.stmt import StmtMutator, flatten_seq
from tilelang.lowering.thread_utils import extern_name

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_loader import load_example  # noqa: E402
from test_wgmma_overlap import emulate  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
OFF = {"tl.wgmma_prefetch_shared_reads": False}
BWD_BHSD = "flash_attention/example_mha_bwd_bhsd.py"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _notes(lowered) -> list[str]:
    attrs = lowered.stages["wgmma_prefetch_shared_reads"].attrs
    found = attrs.get(pf.ATTR) if attrs is not None else None
    return [str(x) for x in found] if found is not None else []


def _bwd(S=140, D=128, causal=False):
    m = load_example(BWD_BHSD)
    return m, m.flashattn_bwd.get_tir(1, 1, S, D, causal, **m.bwd_config(D))


# ------------------------------------------------------------------ the backward at d = 128
def test_bwd128_loads_before_the_wait():
    _, func = _bwd()
    lowered = tilelang.lower(func, SM90A)
    notes = _notes(lowered)
    assert any("lse_shared" in n and "read before the wait" in n for n in notes), notes
    assert any("delta" in n and "read before the wait" in n for n in notes), notes
    body = str(lowered.stages["wgmma_prefetch_shared_reads"])
    lines = body.splitlines()
    for tile, use in (("lse_shared", "T.exp2("), ("delta", "dsT_local[")):
        read = next(i for i, ln in enumerate(lines) if "copy_vec" in ln and f"({tile}" in ln)
        waits = [i for i, ln in enumerate(lines) if "wgmma_wait<1>" in ln]
        first_use = next(i for i, ln in enumerate(lines) if i > read and use in ln and "= " in ln)
        wait = max(w for w in waits if w < first_use)
        assert read < wait < first_use, (tile, read, wait, first_use)
        assert "_pf" in lines[read], lines[read]  # into the prefetch register array


def test_bwd128_config_off_keeps_the_loads():
    _, func = _bwd()
    lowered = tilelang.lower(func, SM90A, OFF)
    assert "wgmma_prefetch_shared_reads" in lowered.names()
    assert not _notes(lowered)
    assert "_pf" not in str(lowered.stages["wgmma_prefetch_shared_reads"])


class _Inject(StmtMutator):
    """Inserts ``lse_shared[0, 0] = 0`` after the wait block before the ``lse`` loop
    (``where="between"``) or at the end of that loop's body (``where="inside"``), or makes
    that loop a serial one (``where="serial"``)."""

    def __init__(self, where):
        super().__init__("cuda")
        self.where, self.done = where, 0

    def visit_SeqStmt(self, stmt, ctx):
        flat = []
        for s in flatten_seq(stmt):
            r = self.visit(s, ctx)
            flat += flatten_seq(r) if r is not None else []
        for i, s in enumerate(flat):
            if not isinstance(s, ir.For) or "lse_shared" not in str(s) or "copy_vec" not in str(s):
                continue
            if not (extern_name(flat[i - 1]) or "").startswith("tl::wgmma_fence_operand"):
                continue
            first = flatten_seq(s.body)[0]
            tile = first.value.args[2].args[0].source
            store = ir.TensorStore(tile, [ir.const(0, "int32")] * 2, ir.const(0.0, "float32"))
            self.done += 1
            if self.where == "between":
                return ir.SeqStmt([*flat[:i], store, *flat[i:]])
            if self.where == "serial":  # the same loop, not unrolled
                loop = ir.For(s.var, s.begin, s.end, s.step, ir.ForKind.DEFAULT, s.body,
                              s.annotations, s.loc)  # fmt: skip
                return ir.SeqStmt([*flat[:i], loop, *flat[i + 1 :]])
            body = ir.SeqStmt([*flatten_seq(s.body), store])
            loop = ir.For(s.var, s.begin, s.end, s.step, s.kind, body, s.annotations, s.loc)
            return ir.SeqStmt([*flat[:i], loop, *flat[i + 1 :]])
        if not flat:
            return None
        return ir.SeqStmt(flat) if len(flat) > 1 else flat[0]


@pytest.mark.parametrize("where", ["between", "inside", "serial"])
def test_not_applied_when_the_tile_is_written(where):
    """The backward's IR right before the stage, with a store to ``lse_shared`` between the
    wait block and the loop, or in the loop, or the loop not unrolled: the ``lse`` loads stay where they are (the
    ``Delta`` loop, untouched, is still prefetched)."""
    _, func = _bwd()
    before = tilelang.lower(func, SM90A).stages["wgmma_wait_sinking"]
    inject = _Inject(where)
    body = inject(before.body)
    assert inject.done == 1
    out, notes = pf.prefetch_shared_reads(body)
    text = str(out)
    assert "lse_shared_mb_pf" not in text and "delta_mb_pf" in text, notes
    if where == "inside":
        assert any("lse_shared" in n and "kept (the loop writes" in n for n in notes), notes
    if where == "serial":
        assert any("lse_shared" in n and "not unrolled" in n for n in notes), notes


def test_not_applied_over_the_register_limit(monkeypatch):
    _, func = _bwd()
    before = tilelang.lower(func, SM90A).stages["wgmma_wait_sinking"]
    monkeypatch.setattr(pf, "MAX_PREFETCH_REGISTERS", 16)
    out, notes = pf.prefetch_shared_reads(before.body)
    assert "_pf" not in str(out)
    assert any("32 registers > 16" in n for n in notes), notes


# ------------------------------------------------------------------ a small gemm kernel
def gemm_minus_row(M, N, K, store_tile=False, dtype="float16"):
    """O = (A @ B^T) * 2 - r[None, :] (r read from a shared row in the loop after the gemm's
    wait); ``store_tile``: the loop also writes the result into a shared tile."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        r: T.Tensor((N,), "float32"),
        O: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            r_s = T.alloc_shared((N,), "float32")
            O_s = T.alloc_shared((M, N), "float32")
            C = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(r, r_s)
            T.gemm(A_s, B_s, C, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(M, N):
                C[i, j] = C[i, j] * 2.0 - r_s[j]
                if store_tile:
                    O_s[i, j] = C[i, j]
            if store_tile:
                T.copy(O_s, O)
            else:
                T.copy(C, O)

    return main


def test_small_kernel_applied():
    lowered = tilelang.lower(gemm_minus_row(64, 64, 32), SM90A)
    notes = _notes(lowered)
    assert any("r_s" in n and "read before the wait" in n for n in notes), notes
    text = pipeline.lower(gemm_minus_row(64, 64, 32), SM90A).script()
    lines = text.splitlines()
    commit = next(i for i, ln in enumerate(lines) if '"tl::wgmma_commit"' in ln)
    read = next(i for i, ln in enumerate(lines) if "copy_vec" in ln and "(r_s_pf" in ln)
    wait = next(i for i, ln in enumerate(lines) if '"tl::wgmma_wait<' in ln)
    use = next(i for i, ln in enumerate(lines) if "C_local[" in ln and "r_s_pf" in ln)
    assert commit < read < wait < use, (commit, read, wait, use)


def test_small_kernel_not_applied_when_the_loop_writes_shared():
    func = gemm_minus_row(64, 64, 32, store_tile=True)
    assert "_pf" not in pipeline.lower(func, SM90A).script()
    notes = _notes(tilelang.lower(func, SM90A))
    assert any("r_s" in n and "kept" in n for n in notes), notes


@pytest.mark.parametrize("store_tile", [False, True])
@pytest.mark.parametrize("cfg", [{}, OFF], ids=["on", "off"])
def test_small_kernel_emulated(store_tile, cfg, rng):
    M, N, K = 64, 64, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    r = rng.standard_normal(N).astype(np.float32)
    o = np.full((M, N), np.nan, np.float32)
    lowered = pipeline.lower(gemm_minus_row(M, N, K, store_tile), SM90A, cfg)
    assert ("_pf" in lowered.script()) == (not cfg and not store_tile)
    arrays, _ = emulate(lowered, a, b, r, o)
    want = a.astype(np.float64) @ b.astype(np.float64).T * 2 - r.astype(np.float64)[None, :]
    np.testing.assert_allclose(arrays[3], want, rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------ backward emulation
@pytest.mark.parametrize("cfg", [{}, OFF], ids=["on", "off"])
def test_bwd128_emulated(cfg, rng):
    """The d=128 backward at 140 positions (the last lse/Delta boxes past the end), config
    on and off, against float64 autograd."""
    m = load_example(BWD_BHSD)
    B, H, S, D = 1, 1, 140, 128
    q, k, v, do = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, False)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, False, **m.bwd_config(D))
    lowered = pipeline.lower(func, SM90A, cfg)
    assert ("lse_shared_mb_pf" in lowered.script()) == (not cfg)
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v)
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, False),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


# ------------------------------------------------------------------ nvcc
@needs_nvcc
def test_bwd128_ptxas_no_new_spills():
    """The benchmark's bwd128 (B4 H16 S4096) with and without the prefetch: no spills with
    it, and no more registers than ptxas's budget allowed without it."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import sass_audit

    on = sass_audit.audit("bwd128", {})
    off = sass_audit.audit("bwd128", OFF)
    assert (on["spill_stores"], on["spill_loads"]) == (0, 0), on
    assert on["spill_stores"] <= off["spill_stores"] and on["spill_loads"] <= off["spill_loads"]
    assert on["registers"] is not None and on["registers"] <= max(off["registers"], 168), on


# ------------------------------------------------------------------ GPU
@pytest.mark.cuda
@pytest.mark.parametrize("cfg", [{}, OFF], ids=["on", "off"])
@pytest.mark.parametrize("causal", [False, True])
def test_bwd128_gpu(cfg, causal):
    """The d=128 backward on the H200 at 1000 positions, config on and off, dQ/dK/dV against
    float64 autograd."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m = load_example(BWD_BHSD)
    B, H, S, D = 2, 4, 1000, 128
    q, k, v, do = (torch.randn(B, H, S, D, dtype=torch.half, device="cuda") for _ in range(4))
    o, lse = m.flashattn_fwd(B, H, S, D, causal, **m.fwd_config(D))(q, k, v)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, do)
    func = m.flashattn_bwd.get_tir(B, H, S, D, causal, **m.bwd_config(D))
    kernel = tilelang.compile(func, target="cuda", pass_configs=cfg)
    dq = q.new_zeros(m.dq_accum_shape(B, H, S, D), dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    kernel(q, k, v, do, lse, delta, dq, dk, dv)
    dq = m.flashattn_bwd_postprocess(B, H, S, D)(dq)
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
