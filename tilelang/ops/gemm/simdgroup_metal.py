"""Metal ``T.gemm``: ``simdgroup_matrix`` 8x8 multiply-accumulates of 32-lane SIMD-groups.

Layout rule (``@layout_rule("gemm", "metal")``): when the gemm maps onto 8x8 simdgroup
matrices (:func:`simdgroup_plan`), C gets
:func:`tilelang.layout.simdgroup_layouts.make_simdgroup_accumulator_fragment` over the
``group_m x group_n`` split of upstream's warp policy; otherwise the scalar rule's layout.

Lowering (``@lower_rule("gemm", "metal")``): for every 8-wide k step each SIMD-group calls
``tl::simdgroup_gemm_8x8<tm, tn>(c, &A[..], lda, &B[..], ldb, trans_a, trans_b)``
(``tilelang/backends/metal/include/tl_metal.h``): its ``tm`` A atoms and ``tn`` B atoms are
``simdgroup_load``-ed from threadgroup memory once (transposed loads for ``transpose_A/B``),
then for each ``(ti, tj)`` atom the lane's two accumulators go into a ``simdgroup_float8x8``
through ``thread_elements()``, one ``simdgroup_multiply_accumulate`` runs, and they come back.

A fragment A or B (FlashAttention's P) is first staged into threadgroup memory.
Instructions: half x half -> float and float x float -> float. Anything else (bf16, int8,
swizzled shared tiles, tiles that are not multiples of 8, a C layout fixed
elsewhere) uses the scalar fallback (``scalar_cuda.py``): plain FMAs.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ...layout import expr as E
from ...layout.simdgroup_layouts import SIMD, group_partition, make_simdgroup_accumulator_fragment
from ...lowering.irb import seq
from ...lowering.thread_utils import for_, is_fragment, is_shared
from ..registry import layout_rule, lower_rule
from .matrix_units import (
    accumulator_layout_rule,
    clear_accumulator,
    matrix_unit_lowering,
    staged_operands,
)
from .op import gemm_dims

SUPPORTED = {("float16", "float32"), ("float32", "float32")}


@dataclass
class SimdgroupPlan:
    """How one gemm maps onto 8x8 simdgroup matrices."""

    m: int
    n: int
    k: int
    group_m: int
    group_n: int

    def c_fragment(self):
        """The accumulator Fragment of C."""
        return make_simdgroup_accumulator_fragment(self.m, self.n, self.group_m, self.group_n)


def simdgroup_plan(v, ctx) -> SimdgroupPlan | None:
    """A :class:`SimdgroupPlan` when the gemm maps onto simdgroup matrices, else None."""
    a, b, c, m, n, k = gemm_dims(v)
    if not is_fragment(c.tensor):
        return None
    for view in (a, b):  # a fragment operand is staged into threadgroup memory first
        if not (is_fragment(view.tensor) or is_shared(view.tensor)):
            return None
        if is_shared(view.tensor) and ctx.get_layout(view.tensor) is not None:
            return None
    m, n, k = E.as_const_int(m), E.as_const_int(n), E.as_const_int(k)
    if None in (m, n, k) or a.dtype != b.dtype or (a.dtype, c.dtype) not in SUPPORTED:
        return None
    if m % 8 or n % 8 or k % 8 or ctx.threads % SIMD:
        return None
    if any(E.as_const_int(s) is None for s in (*a.tensor.ty.shape, *b.tensor.ty.shape)):
        return None
    split = group_partition(m, n, ctx.threads // SIMD, int(v.policy))
    return None if split is None else SimdgroupPlan(m, n, k, *split)


#: C's simdgroup accumulator fragment (strict level), or the scalar fallback's C layout
infer_gemm_layout_metal = layout_rule("gemm", "metal")(accumulator_layout_rule(simdgroup_plan))


def lower_gemm_simdgroup(v, ctx, plan: SimdgroupPlan):
    """Thread-level code of one gemm on simdgroup matrices (see the module docstring)."""
    a, b, c, stmts = staged_operands(v, ctx)
    mw, nw = plan.m // plan.group_m, plan.n // plan.group_n
    tm, tn = mw // 8, nw // 8
    cl = ctx.local_of(c.tensor)
    if v.clear_accum:
        stmts.append(clear_accumulator(cl, tm * tn * 2, c.dtype))
    group = ctx.thread_var // SIMD
    row0 = (group // plan.group_n) * mw
    col0 = (group % plan.group_n) * nw
    lda, ldb = E.as_const_int(a.tensor.ty.shape[-1]), E.as_const_int(b.tensor.ty.shape[-1])
    ra, rb = len(a.extents), len(b.extents)
    kv = ir.Var("gk", "int32")
    inner = ctx.with_range(kv, 0, plan.k // 8)
    row, col, kk = row0, col0, kv * 8
    ai = a.index({ra - 2: kk, ra - 1: row} if v.transpose_A else {ra - 2: row, ra - 1: kk})
    bi = b.index({rb - 2: col, rb - 1: kk} if v.transpose_B else {rb - 2: kk, rb - 1: col})
    call = _tirx.call_extern(
        f"tl::simdgroup_gemm_8x8<{tm}, {tn}>",
        _tirx.address_of(ir.TensorLoad(cl, [0])),
        _tirx.address_of(ir.TensorLoad(a.tensor, [inner.simplify(x) for x in ai])),
        ir.const(lda, "int32"),
        _tirx.address_of(ir.TensorLoad(b.tensor, [inner.simplify(x) for x in bi])),
        ir.const(ldb, "int32"),
        ir.const(bool(v.transpose_A), "bool"),
        ir.const(bool(v.transpose_B), "bool"),
        ty="void",
    )
    body = [ir.Evaluate(call)]
    stmts.append(for_(kv, plan.k // 8, seq(body), loc=v.loc))
    return seq(stmts)


#: simdgroup_matrix MMAs when C has the plan's fragment, else the scalar fallback
lower_gemm_metal = lower_rule("gemm", "metal")(
    matrix_unit_lowering(simdgroup_plan, lower_gemm_simdgroup)
)


__all__ = ["SimdgroupPlan", "infer_gemm_layout_metal", "lower_gemm_metal", "simdgroup_plan"]
