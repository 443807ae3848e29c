"""LowerTileOps: replace every ``tl.*`` tile-op call by the backend's thread-level code.

Assumes: tile ops are ``Evaluate(Call(tl.<op>))`` statements (as the frontend
emits them). Guarantees: no tile-op call remains; each was replaced by the rule
registered for (op, backend), or a CompileError names the op, target and the
user's line.
"""

from __future__ import annotations

from ..lowering.stmt import StmtMutator
from ..ops import lowering_for, tile_op_of


class LowerTileOps(StmtMutator):
    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None:
            return stmt
        op, call = found
        rule = lowering_for(op, self.backend, call)
        return rule(op.view(call), ctx)


def lower_tile_ops(func, backend: str):
    """Run :class:`LowerTileOps` over a TIRx Function."""
    return func.with_body(LowerTileOps(backend)(func.body))
