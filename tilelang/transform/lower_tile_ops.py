"""LowerTileOps: replace every ``tl.*`` tile-op call by the backend's thread-level code.

Assumes: tile ops are ``Evaluate(Call(tl.<op>))`` statements (as the frontend
emits them). Guarantees: no tile-op call remains; each was replaced by the rule
registered for (op, backend), or a CompileError names the op, target and the
user's line.
"""

from __future__ import annotations

from tvm_tirx import ir

from .. import errors
from ..lowering.region import RegionView
from ..lowering.stmt import StmtMutator, uses_any
from ..lowering.thread_range import guarded_range, lower_over_range, negate, split_uniform
from ..lowering.thread_range_marks import drop_work, has_work, mark_range, work_loc
from ..ops import lowering_for, tile_op_of
from .range_fences import RangeGemmReads

#: Tile ops whose shared/global work a thread range re-plans (backends/cuda/passes/
#: thread_guard.py): a branch lowering one is synchronised on its own by insert_sync.
_PLANNED_OPS = ("copy", "fill", "gemm", "reduce")
#: Of those, the ops lowered as on a block of the range's threads (lower_over_range).
_RANGE_RELATIVE_OPS = ("gemm", "reduce")


class LowerTileOps(StmtMutator):
    """Rules see ``ctx.thread_guarded``: whether the op sits under an ``if`` whose condition
    reads the thread index (then only some threads run it: an atomic update that does not
    depend on the thread is done by each of them, not once per block by thread 0). Where
    the threads such an ``if`` keeps are one contiguous range ``[lo, hi)`` and the context
    can say so (``CudaLowerContext.with_thread_range``), the branch is lowered with it:
    shared/global tile work is split over those threads (``backends/cuda/passes/
    thread_guard.py``)."""

    _guarded = False
    _conds: tuple = ()  # the thread conditions of the enclosing `if`s
    _planned = False  # a tile op was lowered with a thread range in the current branch

    def visit_If(self, stmt, ctx):
        t = getattr(ctx, "thread_var", None)
        if t is None or not uses_any(stmt.condition, [t]):
            return super().visit_If(stmt, ctx)
        threads = getattr(ctx, "threads", None)
        if not self._guarded and threads and ctx.with_range(t, 0, threads).prove(stmt.condition):
            # true for every thread of the user's block (warp specialization's consumer
            # branch `tx < threads`, its producer threads added past them): no guard
            return super().visit_If(stmt, ctx)
        saved = self._guarded, self._conds
        self._guarded = True
        try:
            on_threads, _ = split_uniform(stmt.condition, [t])
            then = self._branch(stmt.then_case, ctx, on_threads)
            other = None
            if stmt.else_case is not None:
                other = self._branch(stmt.else_case, ctx, negate(stmt.condition))
            return ir.If(stmt.condition, then, other, stmt.loc)
        finally:
            self._guarded, self._conds = saved

    def __call__(self, stmt, ctx=None):
        self._root, self._range_reads = stmt, None
        out = super().__call__(stmt, ctx)
        return drop_work(out) if has_work(out) else out  # branches no range was found for

    def _branch(self, stmt, ctx, cond):
        """``stmt`` lowered under one more thread condition ``cond``."""
        outer = self._conds
        self._conds = outer + (cond,)
        try:
            span = None
            if hasattr(ctx, "with_thread_range") and ctx.threads:
                span = guarded_range(self._conds, ctx.thread_var, ctx.threads)
                if span is not None and span != (0, ctx.threads):
                    ctx = ctx.with_thread_range(*span)
                else:
                    span = None
            planned, self._planned = self._planned, False
            loc = _first_tile_op_loc(stmt)
            out = self.body(stmt, ctx)
            work = has_work(out)
            if work:
                loc = loc or work_loc(out)
                out = drop_work(out)
            if span is not None and (self._planned or work):
                out = mark_range(out, *span, loc)  # insert_sync: the branch's own barriers
            self._planned = planned or self._planned
            return out
        finally:
            self._conds = outer

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None:
            return stmt
        op, call = found
        rule = lowering_for(op, self.backend, call)
        ctx.thread_guarded = self._guarded
        if op.name in _PLANNED_OPS:  # split over the range's threads (cooperative_loop)
            self._planned |= getattr(ctx, "thread_range", None) is not None
        span = getattr(ctx, "thread_range", None)
        try:
            if span is not None and op.name in _RANGE_RELATIVE_OPS:
                return lower_over_range(rule, op.view(call), ctx, *span)
            out = rule(op.view(call), ctx)
            if op.name in ("copy", "fill") and str(getattr(ctx, "arch", "")).startswith("sm_9"):
                out = self._fence_for_range_gemms(op.view(call), ctx, span, out)
            return out
        except errors.CompileError as err:
            if not getattr(err, "needs_loc", False):
                raise
            raise errors.compile_error(
                f"{op.spelling or 'T.' + op.name}: {err}", call.loc
            ) from None
        finally:
            ctx.thread_guarded = False

    def _fence_for_range_gemms(self, view, ctx, span, out):
        """``out`` followed by a proxy fence when a gemm under another thread range reads
        the tile it writes (``range_fences.py``)."""
        if out is None or not getattr(ctx, "threads", None):
            return out
        if self._range_reads is None:
            self._range_reads = RangeGemmReads(self._root, ctx.thread_var, ctx.threads)
        if not self._range_reads.readers:
            return out
        fence = self._range_reads.fence_after(RegionView.of(view.dst), span or (0, ctx.threads))
        return ir.SeqStmt([out, *fence]) if fence else out


def _first_tile_op_loc(stmt):
    """The user's line of the first tile op in ``stmt`` (None when it has none)."""
    import tvm_ffi

    from .. import errors

    found = []

    def visit(x):
        hit = tile_op_of(x)
        if not found and hit is not None and errors.where(hit[1].loc):
            found.append(hit[1].loc)

    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, visit)])
    return found[0] if found else None


def lower_tile_ops(func, backend: str):
    """Run :class:`LowerTileOps` over a TIRx Function."""
    return func.with_body(LowerTileOps(backend)(func.body))
