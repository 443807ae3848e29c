"""LegalizeSafeMemoryAccess: guard global-memory accesses the analyzer cannot prove in bounds.

A ``T.Parallel`` loop over a tile may reach past the end of a global tensor when the
problem size is not a tile multiple (or is dynamic), and SIMT code indexes with the thread
(``Logits[bx, n * block + tx] = ...`` past the row's end). As upstream TileLang does, such a
store is skipped and such a load reads zero. With ``everywhere=False`` only the accesses
inside ``T.Parallel`` loops are guarded; with ``inside_parallel=False`` only those outside
them (CUDA: ``lower_parallel`` guards a parallel loop's tails as it partitions the loop).

Facts the enclosing ``if``s establish are used in the proofs (``if idx < n: A[idx] = v``
gets no second guard).

Assumes: parallel loops carry the ``tl.parallel`` annotation (the frontend's ``T.Parallel``);
tile ops are not lowered yet (their own lowerings guard them; they are left alone).
Guarantees: every global TensorStore/TensorLoad in scope (stored values, bindings, ``if`` and
``while`` conditions) is in bounds or guarded; accesses proven in bounds are left alone.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ..lowering.bounds import in_bounds
from ..lowering.stmt import StmtMutator


def _is_parallel(stmt) -> bool:
    return bool(stmt.annotations) and "tl.parallel" in stmt.annotations


class LegalizeSafeMemoryAccess(StmtMutator):
    def __init__(self, backend="generic", everywhere=False, inside_parallel=True):
        super().__init__(backend)
        self.depth = 1 if everywhere else 0
        self.inside_parallel = inside_parallel

    def visit_For(self, stmt, ctx):
        if not _is_parallel(stmt):
            return super().visit_For(stmt, ctx)
        saved = self.depth
        self.depth = saved + 1 if self.inside_parallel else 0
        try:
            return super().visit_For(stmt, ctx)
        finally:
            self.depth = saved

    def _guard_loads(self, expr, ctx):
        def repl(load):
            pred = in_bounds(load.source, list(load.indices), ctx, {})
            if pred is None:
                return load
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
        cond = stmt.condition
        then = self.body(stmt.then_case, ctx.with_fact(cond))
        other = None
        if stmt.else_case is not None:
            other = self.visit(stmt.else_case, ctx.with_fact(_tirx.Not(cond)))
        if self.depth:
            cond = self._guard_loads(cond, ctx)
        return ir.If(cond, then, other, stmt.loc)

    def visit_While(self, stmt, ctx):
        out = super().visit_While(stmt, ctx)
        if self.depth == 0:
            return out
        return ir.While(self._guard_loads(out.condition, ctx), out.body, out.loc)

    def visit_Bind(self, stmt, ctx):
        if self.depth == 0:
            return stmt
        return ir.Bind(stmt.var, self._guard_loads(stmt.value, ctx), stmt.loc)


def legalize_safe_memory_access(body, backend="generic", everywhere=False, inside_parallel=True):
    """Run :class:`LegalizeSafeMemoryAccess` over a statement (``everywhere``: guard the
    global accesses outside ``T.Parallel`` loops too, as upstream does; ``inside_parallel=
    False``: leave the accesses inside ``T.Parallel`` loops to the backend's loop lowering)."""
    return LegalizeSafeMemoryAccess(backend, everywhere, inside_parallel)(body)
