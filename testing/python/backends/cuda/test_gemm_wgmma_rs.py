"""``T.gemm`` with A in a register fragment on sm_90a: the RS form of ``wgmma.mma_async``.

CPU:

* the layout: ``make_wgmma_a_fragment`` against the PTX ISA's wgmma A-register table, and
  its thread map equal to the wgmma accumulator's (a cast accumulator is a valid A);
* dispatch: register A lowers to ``tl::wgmma_m64n<N>k16_rs`` (shared A keeps ``_ss``);
  transposed register A, other archs and the layout-conflict retry stay on mma.sync;
* emulation (``tilelang.testing.cuda_emulator`` plus the wgmma model of
  ``test_gemm_wgmma_emulation``, extended here with the RS form): a chained gemm
  ``S = Q @ K^T; P = cast(S); O = P @ V`` and a register-A gemm fed from global memory,
  fp16 and bf16, several N, 1-2 warpgroups along M or N, against float64 numpy on fresh
  random inputs; register A is read when ``wgmma.wait_group`` retires the instruction
  (``late_reads``), and rewriting it while the wgmma is in flight is an error; the
  FlashAttention example's configurations end to end;
* nvcc: the FlashAttention configurations compile for sm_90a with both gemms on wgmma
  and no spills.

GPU (``cuda`` marker): the FlashAttention configurations and the chained gemm against torch.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as _emu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_emulation import WgmmaMachine, operand_addresses  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ROOT = Path(__file__).resolve().parents[4]


# ------------------------------------------------------------------------- kernels
def chained(M, N1, N2, K, bM, bN, threads, stages, dtype="float16", policy0=1, policy1=1):
    """O = cast(Q @ Kt^T) @ V block by block over N1: the FlashAttention gemm chain."""

    @T.prim_func
    def main(
        Q: T.Tensor((M, K), dtype),
        Kt: T.Tensor((N1, K), dtype),
        V: T.Tensor((N1, N2), dtype),
        O: T.Tensor((M, N2), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            Q_s = T.alloc_shared((bM, K), dtype)
            K_s = T.alloc_shared((bN, K), dtype)
            V_s = T.alloc_shared((bN, N2), dtype)
            S = T.alloc_fragment((bM, bN), "float32")
            P = T.alloc_fragment((bM, bN), dtype)
            acc = T.alloc_fragment((bM, N2), "float32")
            T.copy(Q[bx * bM, 0], Q_s)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(N1, bN), num_stages=stages):
                T.copy(Kt[k * bN, 0], K_s)
                T.copy(V[k * bN, 0], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True, policy=policy0)
                T.copy(S, P)
                T.gemm(P, V_s, acc, policy=policy1)
            T.copy(acc, O[bx * bM, 0])

    return main


def register_a_gemm(M, N, K, bM, bN, bK, threads, stages, dtype="float16", policy=0):
    """C = A @ B with A staged in a fragment straight from global memory (the gemm picks
    its layout), B through a pipelined shared tile."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            B_s = T.alloc_shared((bK, bN), dtype)
            A_f = T.alloc_fragment((bM, bK), dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(B[k * bK, bx * bN], B_s)
                T.copy(A[by * bM, k * bK], A_f)
                T.gemm(A_f, B_s, C_f, policy=policy)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def _fa_tir(bm, bn, threads, stages, causal, batch=1, heads=1, seq=256, dim=64):
    from test_pipeline_emulate import _example

    fa = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    return fa.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
    )


def _instructions(text):
    return sorted(set(re.findall(r"tl::(wgmma_m64n\d+k16_[rs]s<[^>]*>|mma_m16n8k16_\w+)", text)))


# ------------------------------------------------------------------------- the RS model
_RS = re.compile(r"tl::wgmma_m64n(\d+)k16_rs<(true|false), ([01])>")
_SS = re.compile(r"tl::wgmma_m64n(\d+)k16_ss<(true|false), ([01]), ([01])>")


def _np_type(bf16: bool):
    import ml_dtypes

    return ml_dtypes.bfloat16 if bf16 else np.float16


class RSMachine(WgmmaMachine):
    """:class:`WgmmaMachine` plus the RS form and bf16 operands.

    An RS wgmma keeps a live view of its A registers; it reads them when it executes (at
    the ``wgmma.wait_group`` that retires it in ``late_reads`` mode) and fails when they
    changed since it was issued: a register A must not be rewritten while in flight.
    """

    def _extern(self, fname, args, e, mask):
        if fname.startswith("tl::wgmma_m64n"):
            op = self._op(fname, args, mask)
            if self.mode == "late_reads":
                self.wg_open.append(op)
            else:
                self._execute_wgmma(op)
            return None
        return super()._extern(fname, args, e, mask)

    def _op(self, fname, args, mask):
        rs, ss = _RS.fullmatch(fname), _SS.fullmatch(fname)
        assert rs or ss, fname
        m = rs or ss
        n, bf16 = int(m.group(1)), m.group(2) == "true"
        op = dict(n=n, dtype=_np_type(bf16), rs=bool(rs), mask=np.broadcast_to(mask, (self.lanes,)))
        if rs:
            op["ta"], op["tb"] = 0, int(m.group(3))
            raw, off = self._local_bytes(args[0], mask, 16, fname)
            op["a_regs"] = (raw, off.copy())
            op["a_issued"] = _emu.wgmma_a_tiles(raw, off, op["dtype"])
            _emu.whole_warpgroups(op["mask"], self.lanes, fname)
        else:
            op["ta"], op["tb"] = int(m.group(3)), int(m.group(4))
            op["desc_a"] = np.broadcast_to(self.eval(args[0], mask), (self.lanes,)).copy()
        op["desc_b"] = np.broadcast_to(self.eval(args[1], mask), (self.lanes,)).copy()
        acc_buf, acc_flat = self._pointer(args[2], mask)
        op["acc"] = (acc_buf, acc_flat.copy())
        op["scale"] = int(self.scalar(args[3]))
        self.instructions += 1
        self.rs_instructions = getattr(self, "rs_instructions", 0) + int(bool(rs))
        return op

    def _execute_wgmma(self, op):
        smem = self.smem_root.view(op["dtype"])
        rows, cols = _acc_coords(op["n"])
        acc_buf, acc_flat = op["acc"]
        if op["rs"]:
            raw, off = op["a_regs"]
            a_tiles = _emu.wgmma_a_tiles(raw, off, op["dtype"])
            if not np.array_equal(a_tiles, op["a_issued"], equal_nan=True):
                raise _emu.EmulationError("register A was rewritten while its wgmma was in flight")
        for w in _emu.whole_warpgroups(op["mask"], self.lanes, "wgmma"):
            lanes = slice(128 * w, 128 * w + 128)
            db = op["desc_b"][lanes]
            if len(set(db.tolist())) != 1:
                raise _emu.EmulationError("wgmma descriptors differ inside a warpgroup")
            if op["rs"]:
                a = a_tiles[w]
            else:
                da = op["desc_a"][lanes]
                if len(set(da.tolist())) != 1:
                    raise _emu.EmulationError("wgmma descriptors differ inside a warpgroup")
                a = smem[operand_addresses(da[0], 64, k_major=op["ta"] == 0) // 2]
            b_addr = operand_addresses(db[0], op["n"], k_major=op["tb"] == 0)
            if b_addr.max() // 2 >= smem.size:
                raise _emu.EmulationError("wgmma operand outside shared memory")
            if op["rs"]:
                self._report_reads(w, b_addr)
            else:
                a_desc = op["desc_a"][lanes][0]
                self._report_reads(w, operand_addresses(a_desc, 64, k_major=op["ta"] == 0), b_addr)
            b = smem[b_addr // 2].astype(np.float64).T  # (16, n)
            d = np.asarray(a, np.float64) @ b
            base = acc_flat[lanes][:, None] + np.arange(op["n"] // 2)[None, :]
            t = np.arange(128 * w, 128 * w + 128)[:, None]
            old = acc_buf.data[t, base].astype(np.float64)
            new = d[rows, cols] + (old if op["scale"] else 0.0)
            acc_buf.data[t, base] = new.astype(acc_buf.data.dtype)


def _acc_coords(n):
    lane = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, l32 = lane // 32, lane % 32
    return 16 * warp + l32 // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (l32 % 4) + i % 2


def emulate_rs(func, *arrays, mode="late_reads", race=None):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    m = RSMachine(func, arrays, mode, race=race)
    m.run(func.body, True)
    m.finish()
    return arrays, m


def _round(x, dtype):
    if dtype == "bfloat16" and "bfloat16" not in getattr(_emu, "_NP", {}):
        pytest.skip("the emulator has no bfloat16 tensors yet")
    return np.asarray(x).astype(_np_type(dtype == "bfloat16"))


# ------------------------------------------------------------------------- layouts
@pytest.mark.parametrize(
    "m,k,wm,wn", [(64, 16, 1, 1), (128, 64, 1, 1), (128, 32, 2, 1), (64, 32, 1, 2)]
)
def test_a_fragment_is_the_ptx_register_layout(m, k, wm, wn):
    from tilelang.layout import make_wgmma_a_fragment

    frag = make_wgmma_a_fragment(m, k, wm, wn)
    threads = frag.thread_table()  # (replicas, m, k)
    assert frag.get_replicate() == wn and frag.get_thread_size() == 128 * wm * wn
    tk = k // 16
    for i, j in np.ndindex(m, k):
        gm, row = divmod(i, m // wm)
        mi, r64 = divmod(row, 64)
        (loc,) = frag.map_forward_index([i, j])
        a_idx = int(loc.value) % 8
        tile = int(loc.value) // 8
        assert tile == mi * tk + j // 16
        for rep in range(wn):
            t = int(threads[rep, i, j])
            assert t // 128 == gm + wm * rep
            assert _emu.wgmma_a_coords((t % 128) // 32, t % 32, a_idx) == (r64, j % 16)


@pytest.mark.parametrize("m,k,wm", [(64, 64, 1), (128, 64, 1), (128, 128, 2), (256, 32, 2)])
def test_cast_accumulator_is_a_valid_a(m, k, wm):
    """Same threads, and the same registers when one instruction spans the width."""
    from tilelang.layout import make_wgmma_a_fragment, make_wgmma_accumulator_fragment

    a = make_wgmma_a_fragment(m, k, wm, 1)
    c = make_wgmma_accumulator_fragment(m, k, wm, 1, k)
    assert a.is_equal(c)


# ------------------------------------------------------------------------- dispatch
def test_register_a_lowers_to_rs_shared_a_to_ss():
    text = str(pipeline.lower(chained(256, 256, 128, 64, 128, 64, 256, 2), SM90A))
    assert _instructions(text) == [
        "wgmma_m64n128k16_rs<false, 1>",
        "wgmma_m64n64k16_ss<false, 0, 0>",
    ]
    # A's 32 registers (m64 x k64 per warpgroup) fenced before wgmma.fence and after the wait
    head, _, tail = text.partition("tl::wgmma_m64n128k16_rs")
    last_arrive = head.rindex("tl::wgmma_arrive")
    assert 'tl::wgmma_fence_operand<32>", T.address_of(P_local' in head[last_arrive - 300 :]
    after = tail.split("tl::wgmma_m64n128k16_rs")[-1]
    assert after.index("tl::wgmma_wait<0>") < after.index("tl::wgmma_fence_operand<32>")


def test_bf16_register_a():
    text = str(pipeline.lower(chained(128, 128, 64, 32, 64, 64, 128, 2, "bfloat16"), SM90A))
    assert _instructions(text) == ["wgmma_m64n64k16_rs<true, 1>", "wgmma_m64n64k16_ss<true, 0, 0>"]


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_other_archs_keep_mma(arch):
    text = str(
        pipeline.lower(chained(128, 128, 64, 32, 64, 64, 128, 2), {"kind": "cuda", "arch": arch})
    )
    assert "wgmma" not in text and "mma_m16n8k16_f16f16f32" in text


def test_transposed_register_a_stays_on_mma():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):  # fmt: skip
        with T.Kernel(1, threads=128):
            A_f = T.alloc_fragment((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_f)
            T.copy(B, B_s)
            T.gemm(A_f, B_s, C_f, transpose_A=True, clear_accum=True)
            T.copy(C_f, C)

    text = str(pipeline.lower(main, SM90A))
    assert "_rs<" not in text and "mma_m16n8k16_f16f16f32" in text


def test_layout_conflict_retry_keeps_register_a_on_mma():
    """The second layout-inference attempt (``prefer_mma``) never picks the RS form."""
    from test_gemm_wgmma_emulation import _tensor

    from tilelang.lowering.cuda_context import LayoutInferContext
    from tilelang.lowering.region import full_region
    from tilelang.ops.gemm.op import GEMM
    from tilelang.ops.gemm.wgmma_cuda import wgmma_plan_for

    a = _tensor("P", (64, 64), "float16", "local.fragment")
    b = _tensor("V_s", (64, 64), "float16", "shared.dyn")
    c = _tensor("O", (64, 64), "float32", "local.fragment")
    view = GEMM.view(GEMM.make(full_region(a), full_region(b), full_region(c)))
    ctx = LayoutInferContext(128, "sm_90a", "strict", {})
    plan = wgmma_plan_for(view, ctx)
    assert plan is not None and plan.a_in_regs
    ctx.prefer_mma = True
    assert wgmma_plan_for(view, ctx) is None


@pytest.mark.parametrize(
    "bm,bn,threads,stages,qk,pv",
    [
        (128, 128, 256, 2, "m64n128k16_ss<false, 0, 0>", "m64n128k16_rs<false, 1>"),
        (128, 64, 128, 2, "m64n64k16_ss<false, 0, 0>", "m64n128k16_rs<false, 1>"),
        (64, 64, 128, 1, "m64n64k16_ss<false, 0, 0>", "m64n128k16_rs<false, 1>"),
    ],
)
def test_flash_attention_configs_use_wgmma_for_both_gemms(bm, bn, threads, stages, qk, pv):
    text = str(pipeline.lower(_fa_tir(bm, bn, threads, stages, False, dim=128), SM90A))
    assert _instructions(text) == [f"wgmma_{pv}", f"wgmma_{qk}"]


# ------------------------------------------------------------------------- emulation
CHAINS = [
    # M, N1, N2, K, bM, bN, threads, stages, policy0, policy1
    (128, 128, 64, 32, 64, 64, 128, 2, 1, 1),  # one warpgroup, m64n64 rs
    (128, 256, 128, 64, 128, 64, 128, 2, 1, 1),  # one warpgroup, two m64 tiles, m64n128
    (256, 256, 96, 64, 128, 128, 256, 3, 1, 1),  # two warpgroups along M, m64n96
    (128, 128, 256, 32, 128, 64, 256, 1, 1, 1),  # m64n256, one stage
    (64, 128, 48, 16, 64, 32, 128, 2, 0, 0),  # Square policy, n48 (32B B swizzle)
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N1,N2,K,bM,bN,threads,stages,p0,p1", CHAINS)
def test_chained_gemm_emulated(M, N1, N2, K, bM, bN, threads, stages, p0, p1, dtype, rng):
    func = chained(M, N1, N2, K, bM, bN, threads, stages, dtype, p0, p1)
    lowered = pipeline.lower(func, SM90A)
    text = str(lowered)
    assert "k16_rs<" in text and "k16_ss<" in text and "mma_m16n8k16" not in text
    q = _round(rng.standard_normal((M, K)) / 4, dtype)
    kt = _round(rng.standard_normal((N1, K)) / 4, dtype)
    v = _round(rng.standard_normal((N1, N2)), dtype)
    o = np.full((M, N2), np.nan, np.float32)
    (_, _, _, o), machine = emulate_rs(lowered, q, kt, v, o)
    assert machine.rs_instructions > 0
    s = q.astype(np.float64) @ kt.astype(np.float64).T
    want = _round(s, dtype).astype(np.float64) @ v.astype(np.float64)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(o, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("mode", ["late_reads", "late_writes"])
@pytest.mark.parametrize(
    "M,N,K,bM,bN,bK,threads,stages,policy,dtype",
    [
        (128, 128, 128, 64, 128, 32, 128, 3, 0, "float16"),
        (256, 256, 64, 128, 256, 32, 256, 3, 2, "float16"),  # FullCol: A replicated on 2 wgs
        (128, 192, 96, 128, 192, 48, 256, 2, 1, "bfloat16"),  # FullRow, 2 wgs along M, n192
    ],
)
def test_register_a_from_global_emulated(M, N, K, bM, bN, bK, threads, stages, policy, dtype, mode, rng):  # fmt: skip
    lowered = pipeline.lower(
        register_a_gemm(M, N, K, bM, bN, bK, threads, stages, dtype, policy), SM90A
    )
    assert "k16_rs<" in str(lowered) and "mma_m16n8k16" not in str(lowered)
    a = _round(rng.standard_normal((M, K)), dtype)
    b = _round(rng.standard_normal((K, N)), dtype)
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), machine = emulate_rs(lowered, a, b, c, mode=mode)
    assert machine.rs_instructions > 0
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_rewriting_register_a_in_flight_is_caught(monkeypatch, rng):
    """Without the wait after the RS batch the next iteration rewrites A under the wgmma."""
    from tilelang.ops.gemm import wgmma_cuda as gemm_wgmma

    real = gemm_wgmma.wgmma_wait
    monkeypatch.setattr(gemm_wgmma, "wgmma_wait", lambda ctx, plan, n: real(ctx, plan, 1))
    lowered = pipeline.lower(register_a_gemm(64, 64, 64, 64, 64, 16, 128, 2), SM90A)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, 64)).astype(np.float16)
    c = np.zeros((64, 64), np.float32)
    with pytest.raises(_emu.EmulationError, match="register A was rewritten"):
        emulate_rs(lowered, a, b, c)


@pytest.mark.parametrize(
    "bm,bn,threads,stages,causal",
    [
        (128, 128, 256, 2, False),
        (128, 128, 256, 2, True),
        (128, 64, 128, 2, False),
        (64, 64, 128, 1, False),
        (64, 64, 128, 1, True),
    ],
)
def test_flash_attention_configs_emulated(bm, bn, threads, stages, causal, rng):
    from test_pipeline_emulate import _attention

    B, H, S, D = 1, 1, 256, 64
    lowered = pipeline.lower(_fa_tir(bm, bn, threads, stages, causal, B, H, S, D), SM90A)
    assert "k16_rs<" in str(lowered)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    (q, k, v, o), _ = emulate_rs(lowered, q, k, v, o)
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------------- nvcc
FA_CONFIGS = [(128, 128, 256, 2), (128, 64, 128, 2), (64, 64, 128, 1)]


@needs_nvcc
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bm,bn,threads,stages", FA_CONFIGS)
def test_flash_attention_configs_compile_without_spills(bm, bn, threads, stages, causal, tmp_path):
    from test_gemm_wgmma import ptxas_report

    func = _fa_tir(bm, bn, threads, stages, causal, batch=4, heads=16, seq=4096, dim=128)
    art = pipeline.build(func, SM90A, compiler="nvcc")
    rep = ptxas_report(art.get_kernel_source(), tmp_path)
    assert rep["spill"] == 0 and rep["stack"] == 0, rep["log"]
    assert "serialized" not in rep["log"], rep["log"]
    ptx = rep["ptx"]
    rs = re.findall(
        r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 \{[^}]*\}, \{", ptx
    )
    per_wg_m = bm // (threads // 128) // 64
    # P @ V: one m64n128 RS instruction per (m64, k16); twice when the example's
    # order/stage annotations software-pipeline the loop (P @ V also in the epilogue)
    assert len(rs) in (per_wg_m * bn // 16, 2 * per_wg_m * bn // 16)
    assert "mma.sync" not in ptx


# ------------------------------------------------------------------------- GPU
def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bm,bn,threads,stages", FA_CONFIGS)
def test_flash_attention_configs_gpu(bm, bn, threads, stages, causal):
    torch, load = _torch()
    from test_pipeline_emulate import _example

    fa = _example("flash_attention/example_mha_fwd_bshd.py")
    B, H, S, D = 2, 4, 512, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    load(_fa_tir(bm, bn, threads, stages, causal, B, H, S, D))(q, k, v, o)
    torch.cuda.synchronize()
    torch.testing.assert_close(o.double(), fa.ref_program(q, k, v, causal), rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M,N1,N2,K,bM,bN,threads,stages,p0,p1", CHAINS)
def test_chained_gemm_gpu(M, N1, N2, K, bM, bN, threads, stages, p0, p1, dtype):
    torch, load = _torch()
    tdt = getattr(torch, dtype)
    q = (torch.randn(M, K, device="cuda") / 4).to(tdt)
    kt = (torch.randn(N1, K, device="cuda") / 4).to(tdt)
    v = torch.randn(N1, N2, device="cuda").to(tdt)
    o = torch.full((M, N2), float("nan"), device="cuda")
    load(chained(M, N1, N2, K, bM, bN, threads, stages, dtype, p0, p1))(q, kt, v, o)
    torch.cuda.synchronize()
    want = (q.double() @ kt.double().T).to(tdt).double() @ v.double()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    torch.testing.assert_close(o.double(), want, rtol=tol, atol=tol * want.abs().max().item())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_register_a_from_global_gpu(dtype):
    torch, load = _torch()
    tdt = getattr(torch, dtype)
    M, N, K = 512, 512, 256
    a = torch.randn(M, K, device="cuda").to(tdt)
    b = torch.randn(K, N, device="cuda").to(tdt)
    c = torch.full((M, N), float("nan"), device="cuda")
    load(register_a_gemm(M, N, K, 128, 256, 32, 256, 3, dtype, 2))(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3)
