"""ROCm ``T.gemm``: 16x16 MFMA instructions of 64-lane wavefronts (gfx90a, gfx940/942).

Layout rule (``@layout_rule("gemm", "rocm")``): when the gemm maps onto MFMA (see
:func:`mfma_plan`), C gets :func:`tilelang.layout.mfma_layouts.make_mfma_accumulator_fragment`
over the ``wave_m x wave_n`` split that upstream's warp policy picks; otherwise the scalar
rule's C layout (``scalar_cuda.gemm_layout``; that fragment only maps elements to threads
and holds for any lane count).

Lowering (``@lower_rule("gemm", "rocm")``): per k step of the instruction, every lane loads
its ``k_per_lane`` elements of each A atom and each B atom from LDS (the shared tiles; a
fragment A or B is first staged into LDS) into registers, then issues one MFMA per
``(ti, tj)`` atom of its wave's C tile through the ``tl::mfma_*`` wrappers of
``tilelang/backends/rocm/include/tl_hip.h`` (``__builtin_amdgcn_mfma_*``).

Instructions: f16 x f16 -> f32 and bf16 x bf16 -> f32 (``16x16x16``, gfx90a and gfx94x),
int8 x int8 -> int32 (``16x16x16i8`` on gfx90a, ``16x16x32_i8`` on gfx94x), and on gfx94x
fp8 x fp8 -> f32 in the FNUZ formats (``float8_e4m3fnuz``: ``16x16x32_fp8_fp8``,
``float8_e5m2fnuz``: ``16x16x32_bf8_bf8``). Any other gemm
(float32/float64 operands, tiles that are not multiples of 16 x 16 x K-atom, block sizes
that are not whole wavefronts, a C layout fixed elsewhere) uses the scalar fallback of
``scalar_cuda.py``: correct, but plain FMAs (no MFMA).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ...layout import expr as E
from ...layout.mfma_layouts import WAVE, make_mfma_accumulator_fragment, wave_partition
from ...lowering.irb import seq, store
from ...lowering.thread_utils import alloc, for_, is_fragment, new_tensor, physical
from ...lowering.vectorize import vector_call
from ..registry import layout_rule, lower_rule
from .matrix_units import (
    accumulator_layout_rule,
    clear_accumulator,
    matrix_unit_lowering,
    staged_operands,
)
from .op import gemm_dims

_CDNA3 = ("gfx940", "gfx941", "gfx942")
#: gfx94x fp8 formats (AMD's FNUZ encodings) and their 16x16x32 MFMA wrappers
FP8_FNUZ = {
    "float8_e4m3fnuz": "tl::mfma_f32_16x16x32_fp8",
    "float8_e5m2fnuz": "tl::mfma_f32_16x16x32_bf8",
}


@dataclass(frozen=True)
class Mfma:
    """One MFMA instruction: its tl_hip.h wrapper, operand/accumulator dtypes, k elements per lane."""

    helper: str
    in_dtype: str
    acc_dtype: str
    k_per_lane: int

    @property
    def k(self) -> int:
        """K extent of one instruction (4 lane groups of ``k_per_lane``)."""
        return 4 * self.k_per_lane


def mfma_instruction(arch: str, in_dtype: str, acc_dtype: str) -> Mfma | None:
    """The 16x16 MFMA for these dtypes on ``arch``, or None when there is none."""
    cdna3 = str(arch).startswith(_CDNA3)
    if not (str(arch).startswith(("gfx90a", "gfx908")) or cdna3):
        return None
    if acc_dtype == "float32" and in_dtype == "float16":
        return Mfma("tl::mfma_f32_16x16x16_f16", in_dtype, acc_dtype, 4)
    if acc_dtype == "float32" and in_dtype == "bfloat16" and not str(arch).startswith("gfx908"):
        return Mfma("tl::mfma_f32_16x16x16_bf16", in_dtype, acc_dtype, 4)
    if acc_dtype == "float32" and cdna3 and in_dtype in FP8_FNUZ:
        return Mfma(FP8_FNUZ[in_dtype], in_dtype, acc_dtype, 8)
    if acc_dtype == "int32" and in_dtype == "int8":
        if cdna3:
            return Mfma("tl::mfma_i32_16x16x32_i8", in_dtype, acc_dtype, 8)
        return Mfma("tl::mfma_i32_16x16x16_i8", in_dtype, acc_dtype, 4)
    return None


@dataclass
class MfmaPlan:
    """How one gemm maps onto MFMAs: instruction, wave split and C fragment."""

    inst: Mfma
    m: int
    n: int
    k: int
    wave_m: int
    wave_n: int

    def c_fragment(self):
        """The accumulator Fragment of C."""
        return make_mfma_accumulator_fragment(self.m, self.n, self.wave_m, self.wave_n)


def mfma_plan(v, ctx) -> MfmaPlan | None:
    """An :class:`MfmaPlan` when the gemm maps onto MFMAs on ``ctx.arch``, else None."""
    a, b, c, m, n, k = gemm_dims(v)
    if not is_fragment(c.tensor):
        return None
    m, n, k = E.as_const_int(m), E.as_const_int(n), E.as_const_int(k)
    if None in (m, n, k) or a.dtype != b.dtype:
        return None
    inst = mfma_instruction(ctx.arch, a.dtype, c.dtype)
    if inst is None or m % 16 or n % 16 or k % inst.k or ctx.threads % WAVE:
        return None
    split = wave_partition(m, n, ctx.threads // WAVE, int(v.policy))
    if split is None:
        return None
    return MfmaPlan(inst, m, n, k, *split)


#: C's MFMA accumulator fragment (strict level), or the scalar fallback's C layout
infer_gemm_layout_rocm = layout_rule("gemm", "rocm")(accumulator_layout_rule(mfma_plan))


def _vector_ok(view, kpl: int, ctx) -> bool:
    """Whether ``kpl`` consecutive k elements of ``view`` starting at a multiple of ``kpl``
    are one aligned vector (k is the storage's last axis; no swizzle; static offsets)."""
    if ctx.get_layout(view.tensor) is not None:
        return False
    nbytes = kpl * tvm_ffi.dtype(view.dtype).bits // 8
    last, begin = E.as_const_int(view.tensor.ty.shape[-1]), E.as_const_int(view.begins[-1])
    return (
        nbytes in (4, 8, 16)
        and last is not None
        and begin is not None
        and not (last % kpl or begin % kpl)
    )


def _operand_loads(view, regs, atoms, kpl, at, k_contiguous, element, ctx):
    """Each lane's ``kpl`` k elements of ``atoms`` operand atoms into ``regs``: one
    ``tl::copy_vec`` per atom when they are contiguous and aligned, else element by element."""
    stmts = []
    if k_contiguous and _vector_ok(view, kpl, ctx):
        nbytes = kpl * tvm_ffi.dtype(view.dtype).bits // 8
        for t in range(atoms):
            src = ir.TensorLoad(view.tensor, [ctx.simplify(x) for x in at(t, 0)])
            dst = ir.TensorLoad(regs, [t * kpl])
            stmts.append(
                vector_call("tl::copy_vec", nbytes, _tirx.address_of(dst), _tirx.address_of(src))
            )
        return stmts
    for t in range(atoms):
        for e in range(kpl):
            idx = [ctx.simplify(x) for x in physical(view.tensor, at(t, e), ctx)]
            stmts.append(store(regs, [t * kpl + e], element(ir.TensorLoad(view.tensor, idx))))
    return stmts


def lower_gemm_mfma(v, ctx, plan: MfmaPlan):
    """Thread-level code of one gemm on MFMAs (see the module docstring)."""
    a, b, c, stmts = staged_operands(v, ctx)
    inst, kpl = plan.inst, plan.inst.k_per_lane
    mw, nw = plan.m // plan.wave_m, plan.n // plan.wave_n
    tm, tn = mw // 16, nw // 16
    cl = ctx.local_of(c.tensor)
    if v.clear_accum:
        stmts.append(clear_accumulator(cl, tm * tn * 4, inst.acc_dtype))
    t = ctx.thread_var
    lane, wave = t % WAVE, t // WAVE
    row0 = (wave // plan.wave_n) * mw + lane % 16
    col0 = (wave % plan.wave_n) * nw + lane % 16
    kgrp = (lane // 16) * kpl
    # fp8 operands travel as their bytes (HIP has no fp8 type in ROCm 5.x's headers)
    raw = inst.in_dtype in FP8_FNUZ
    reg_dtype = "uint8" if raw else inst.in_dtype

    def element(value):
        return _tirx.reinterpret(value, ty="uint8") if raw else value

    a_regs = new_tensor(f"{a.name}_mfma", [tm * kpl], reg_dtype, "local")
    b_regs = new_tensor(f"{b.name}_mfma", [tn * kpl], reg_dtype, "local")
    stmts += [alloc(a_regs), alloc(b_regs)]
    kv = ir.Var("gk", "int32")
    inner = ctx.with_range(kv, 0, plan.k // inst.k)
    ra, rb = len(a.extents), len(b.extents)
    body = []

    def a_at(ti, e):
        row, kk = row0 + ti * 16, kv * inst.k + kgrp + e
        return a.index({ra - 2: kk, ra - 1: row} if v.transpose_A else {ra - 2: row, ra - 1: kk})

    def b_at(tj, e):
        col, kk = col0 + tj * 16, kv * inst.k + kgrp + e
        return b.index({rb - 2: col, rb - 1: kk} if v.transpose_B else {rb - 2: kk, rb - 1: col})

    # A (M, K) and B^T (N, K) keep a lane's k elements contiguous: one LDS vector read each
    body += _operand_loads(a, a_regs, tm, kpl, a_at, not v.transpose_A, element, inner)
    body += _operand_loads(b, b_regs, tn, kpl, b_at, bool(v.transpose_B), element, inner)
    for ti in range(tm):
        for tj in range(tn):
            call = _tirx.call_extern(
                inst.helper,
                _tirx.address_of(ir.TensorLoad(cl, [(ti * tn + tj) * 4])),
                _tirx.address_of(ir.TensorLoad(a_regs, [ti * kpl])),
                _tirx.address_of(ir.TensorLoad(b_regs, [tj * kpl])),
                ty="void",
            )
            body.append(ir.Evaluate(call))
    stmts.append(for_(kv, plan.k // inst.k, seq(body), loc=v.loc))
    return seq(stmts)


#: MFMA when the C layout is the plan's accumulator fragment, else the scalar fallback
lower_gemm_rocm = lower_rule("gemm", "rocm")(matrix_unit_lowering(mfma_plan, lower_gemm_mfma))


__all__ = [
    "Mfma",
    "MfmaPlan",
    "infer_gemm_layout_rocm",
    "lower_gemm_mfma",
    "lower_gemm_rocm",
    "mfma_instruction",
    "mfma_plan",
]
