"""What the vendor matrix-unit gemm rules share (ROCm MFMA ``mfma_rocm.py``, Metal
simdgroup matrices ``simdgroup_metal.py``).

Each of them has a *plan* function ``plan_of(view, ctx) -> plan | None`` (None: the gemm
does not map onto the unit) whose plan has ``c_fragment()``, the accumulator layout of C,
and a ``lower_plan(view, ctx, plan)`` emitting the unit's code. The rules around them are
the same:

* :func:`accumulator_layout_rule`: at the strict level, an unlaid fragment C gets the
  plan's accumulator fragment, else the scalar rule's C layout (``scalar_cuda.gemm_layout``);
* :func:`matrix_unit_lowering`: the plan's code when C has the plan's fragment, else the
  scalar fallback (``scalar_cuda.lower_gemm_scalar``); pass config ``tl.gemm_scalar``
  (``ctx.options["gemm_scalar"]``) forces the fallback in both;
* ``scalar_cuda.staged_operands``: A, B, C with a fragment A or B first staged into shared
  memory (re-exported here);
* :func:`clear_accumulator`: the zeroing loop of ``clear_accum``.
"""

from __future__ import annotations

from tvm_tirx import ir

from ...lowering.irb import store
from ...lowering.region import RegionView
from ...lowering.thread_utils import for_
from .scalar_cuda import gemm_layout, lower_gemm_scalar, staged_operands


def _plan(plan_of, v, ctx):
    return None if ctx.options["gemm_scalar"] else plan_of(v, ctx)


def same_layout(got, want) -> bool:
    """Whether the layout ``got`` (None: none) is ``want``: ``is_equal``, or equal thread
    tables where ``is_equal`` cannot compare them."""
    if got is None:
        return False
    try:
        return bool(got.is_equal(want))
    except Exception:  # noqa: BLE001 - fall back to comparing thread tables
        import numpy as np

        return bool(np.array_equal(got.thread_table(), want.thread_table()))


def accumulator_layout_rule(plan_of):
    """A gemm layout rule ``fn(view, ctx)`` giving C ``plan_of``'s accumulator fragment."""

    def infer(v, ctx):
        scalar = gemm_layout(v, ctx)  # {} unless strict level and C an unlaid fragment
        plan = _plan(plan_of, v, ctx) if scalar else None
        if plan is None:
            return scalar
        return {RegionView.of(v.C).tensor: plan.c_fragment()}

    return infer


def matrix_unit_lowering(plan_of, lower_plan):
    """A gemm lowering rule ``fn(view, ctx)``: ``lower_plan(view, ctx, plan)`` when C has
    the plan's accumulator fragment, else the scalar fallback."""

    def lower(v, ctx):
        plan = _plan(plan_of, v, ctx)
        c = RegionView.of(v.C)
        if plan is None or not same_layout(ctx.get_layout(c.tensor), plan.c_fragment()):
            return lower_gemm_scalar(v, ctx)
        return lower_plan(v, ctx, plan)

    return lower


def clear_accumulator(local, count: int, dtype: str):
    """``local[0:count] = 0`` as an unrolled loop (``clear_accum``)."""
    z = ir.Var("gz", "int32")
    return for_(z, count, store(local, [z], ir.const(0, dtype)), ir.ForKind.UNROLLED)


__all__ = [
    "accumulator_layout_rule",
    "clear_accumulator",
    "matrix_unit_lowering",
    "same_layout",
    "staged_operands",
]
