"""LowerTileOps: replace every ``tl.*`` tile-op call by the backend's thread-level code.

Assumes: tile ops are ``Evaluate(Call(tl.<op>))`` statements (as the frontend
emits them). Guarantees: no tile-op call remains; each was replaced by the rule
registered for (op, backend), or a CompileError names the op, target and the
user's line.
"""

from __future__ import annotations

from ..lowering.stmt import StmtMutator, uses_any
from ..ops import lowering_for, tile_op_of


class LowerTileOps(StmtMutator):
    """Rules see ``ctx.thread_guarded``: whether the op sits under an ``if`` whose condition
    reads the thread index (then only some threads run it: an atomic update that does not
    depend on the thread is done by each of them, not once per block by thread 0)."""

    _guarded = False

    def visit_If(self, stmt, ctx):
        t = getattr(ctx, "thread_var", None)
        if self._guarded or t is None or not uses_any(stmt.condition, [t]):
            return super().visit_If(stmt, ctx)
        threads = getattr(ctx, "threads", None)
        if threads and ctx.with_range(t, 0, threads).prove(stmt.condition):
            # true for every thread of the user's block (warp specialization's consumer
            # branch `tx < threads`, its producer threads added past them): no guard
            return super().visit_If(stmt, ctx)
        self._guarded = True
        try:
            return super().visit_If(stmt, ctx)
        finally:
            self._guarded = False

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None:
            return stmt
        op, call = found
        rule = lowering_for(op, self.backend, call)
        ctx.thread_guarded = self._guarded
        try:
            return rule(op.view(call), ctx)
        finally:
            ctx.thread_guarded = False


def lower_tile_ops(func, backend: str):
    """Run :class:`LowerTileOps` over a TIRx Function."""
    return func.with_body(LowerTileOps(backend)(func.body))
