"""LegalizeSafeMemoryAccess: guard global-memory accesses of ``T.Parallel`` loops at tails.

A ``T.Parallel`` loop over a tile may reach past the end of a global tensor
when the problem size is not a tile multiple (or is dynamic). As upstream
TileLang does, such a store is skipped and such a load reads zero.

Assumes: parallel loops carry the ``tl.parallel`` annotation (the frontend's
``T.Parallel``). Guarantees: every global TensorStore/TensorLoad inside one (in stored values,
bindings and ``if`` conditions) is in bounds or guarded; accesses the analyzer proves in bounds are left alone.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ..lowering.bounds import in_bounds
from ..lowering.stmt import StmtMutator


def _is_parallel(stmt) -> bool:
    return bool(stmt.annotations) and "tl.parallel" in stmt.annotations


class LegalizeSafeMemoryAccess(StmtMutator):
    def __init__(self, backend="generic"):
        super().__init__(backend)
        self.depth = 0

    def visit_For(self, stmt, ctx):
        if not _is_parallel(stmt):
            return super().visit_For(stmt, ctx)
        self.depth += 1
        try:
            return super().visit_For(stmt, ctx)
        finally:
            self.depth -= 1

    def _guard_loads(self, expr, ctx):
        def repl(load):
            pred = in_bounds(load.source, list(load.indices), ctx, {})
            if pred is None:
                return load
            from tvm_tirx import tirx as _tirx

            return _tirx.if_then_else(pred, load, ir.const(0, str(load.source.ty.dtype)))

        return tvm_ffi.structural_map(expr, [(ir.TensorLoad, repl)])

    def visit_TensorStore(self, stmt, ctx):
        if self.depth == 0:
            return stmt
        value = self._guard_loads(stmt.value, ctx)
        store = ir.TensorStore(stmt.dest, list(stmt.indices), value, stmt.loc)
        pred = in_bounds(stmt.dest, list(stmt.indices), ctx, {})
        return store if pred is None else ir.If(pred, store, None, stmt.loc)

    def visit_If(self, stmt, ctx):
        out = super().visit_If(stmt, ctx)
        if self.depth == 0:
            return out
        cond = self._guard_loads(out.condition, ctx)
        return ir.If(cond, out.then_case, out.else_case, out.loc)

    def visit_Bind(self, stmt, ctx):
        if self.depth == 0:
            return stmt
        return ir.Bind(stmt.var, self._guard_loads(stmt.value, ctx), stmt.loc)


def legalize_safe_memory_access(body, backend="generic"):
    """Run :class:`LegalizeSafeMemoryAccess` over a statement."""
    return LegalizeSafeMemoryAccess(backend)(body)
