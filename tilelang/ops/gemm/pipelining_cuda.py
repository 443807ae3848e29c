"""What CUDA software pipelining needs to know about ``T.gemm`` (its pipelining rule).

The pipelining pass (``backends/cuda/passes/pipeline_planning.py``) asks this rule, through
``ops.registry.pipeline_rule_for``, instead of importing gemm code:

- wgmma gemms (sm_90a) read their shared operands through the async proxy and commit
  asynchronous groups: :meth:`GemmPipelining.async_reader` describes them, :meth:`mark`
  records the schedule's decisions on the call (operands already fenced by the loop, one
  group kept in flight, the wait deferred to the loop), :meth:`wait`/:meth:`drain` emit the
  waits the loop places itself.
- mma.sync gemms of two pipelined tiles can be split into phases with double-buffered
  fragment registers (:meth:`phase_plan`, :meth:`phase_buffers`, :meth:`phase`), so the
  next tile's first fragments load while the current tile's last mmas run.
"""

from __future__ import annotations

from tvm_tirx import ir

from ... import errors
from ..registry import pipeline_rule
from .mma_cuda import (
    ATTR_MMA_FRAG_A,
    ATTR_MMA_FRAG_B,
    ATTR_MMA_PHASE,
    ATTR_MMA_SLICES,
    PHASE_LAST,
    PHASE_MAIN,
    PHASE_PREFETCH,
    GemmPlan,
    mma_fragment_buffers,
    mma_phases_supported,
)
from .wgmma_cuda import (
    ATTR_DEFER_WAIT,
    ATTR_FENCED,
    ATTR_IN_FLIGHT,
    lowers_to_wgmma,
    wgmma_drain,
    wgmma_plan_for,
    wgmma_wait,
)


class AsyncReader:
    """A wgmma gemm as the pipeline sees it: shared operands read through the async proxy,
    whether A comes from registers, and the accumulator tensor."""

    def __init__(self, plan):
        self.plan = plan
        self.a_in_regs = bool(plan.a_in_regs)
        self.shared_operands = [plan.B.tensor] if plan.a_in_regs else [plan.A.tensor, plan.B.tensor]
        self.accumulator = plan.c.tensor


@pipeline_rule("gemm", "cuda")
class GemmPipelining:
    """The gemm's answers to the CUDA pipelining pass (see the module docstring)."""

    PREFETCH, MAIN, LAST = PHASE_PREFETCH, PHASE_MAIN, PHASE_LAST

    # ---- asynchronous readers (wgmma)
    def async_reader(self, view, ctx):
        """An :class:`AsyncReader` when the gemm lowers to wgmma in ``ctx``, else None."""
        if not lowers_to_wgmma(view, ctx):
            return None
        return AsyncReader(wgmma_plan_for(view, ctx, require_known=True))

    def mark(self, stmt, fenced=False, in_flight=False, defer_wait=False):
        """``stmt`` with the schedule's decisions recorded on its call."""
        attrs = {}
        if fenced:
            attrs[ATTR_FENCED] = True
        if in_flight:
            attrs[ATTR_IN_FLIGHT] = True
        if defer_wait:
            attrs[ATTR_DEFER_WAIT] = True
        return with_call_attrs(stmt, attrs) if attrs else stmt

    def wait(self, ctx, reader, pending: int) -> list:
        """Statements waiting until at most ``pending`` groups of ``reader`` are in flight."""
        return wgmma_wait(ctx, reader.plan, pending)

    def drain(self, ctx, reader) -> list:
        """Statements completing every pending group of ``reader``."""
        return wgmma_drain(ctx, reader.plan)

    # ---- phases (mma.sync)
    def phase_plan(self, view, tiles, ctx):
        """The GemmPlan when the gemm reads two distinct pipelined ``tiles`` and can be lowered
        in phases (16-bit, even number of k16 slices, layouts known), else None."""
        if ctx.options["gemm_scalar"]:
            return None
        try:
            plan = GemmPlan(view, int(ctx.threads))
        except (errors.CompileError, ValueError, TypeError):  # not an mma.sync gemm
            return None
        a, b = plan.a.tensor, plan.b.tensor
        if not (any(a.same_as(t) for t in tiles) and any(b.same_as(t) for t in tiles)):
            return None
        if a.same_as(b) or not mma_phases_supported(plan, view):
            return None
        if ctx.get_layout(a) is None or ctx.get_layout(b) is None:
            return None
        try:
            ctx.local_of(plan.c.tensor)
        except (AttributeError, KeyError):
            return None
        return plan

    def phase_slices(self, plan) -> int:
        """How many k slices a phased gemm has."""
        return int(plan.tk)

    def phase_buffers(self, plan):
        """(buffers, their Binds): the double-buffered fragment registers of the phases."""
        frag_a, frag_b, binds = mma_fragment_buffers(plan, f"{plan.a.name}_{plan.b.name}")
        return (frag_a, frag_b), binds

    def phase(self, stmt, which, buffers, slices=None):
        """``stmt`` lowered as phase ``which`` (PREFETCH/MAIN/LAST) over ``slices``."""
        attrs = {ATTR_MMA_PHASE: which, ATTR_MMA_FRAG_A: buffers[0], ATTR_MMA_FRAG_B: buffers[1]}
        if slices is not None:
            attrs[ATTR_MMA_SLICES] = list(slices)
        return with_call_attrs(stmt, attrs)


def with_call_attrs(stmt, extra):
    """The tile-op statement ``stmt`` with ``extra`` added to its call attributes."""
    call = stmt.value
    attrs = dict(call.attrs.items()) if call.attrs is not None else {}
    attrs.update(extra)
    return ir.Evaluate(ir.Call(call.op.name, list(call.args), attrs=attrs, ty="void", loc=call.loc))
