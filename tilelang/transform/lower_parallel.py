"""LowerParallel (CUDA): partition each ``T.Parallel`` nest over the threads by its layout.

Assumes: ``layout_inference`` gave the nest (keyed by its outermost For) a Fragment ``L``
over the iteration space; the thread variable and thread count of the block.

Guarantees: the nest is replaced by ``for l in range(L.local_size)`` (unrolled when
small) in which thread ``t`` runs iteration ``L^-1(l, t)``; threads beyond
``L``'s thread span do nothing; global stores outside their tensor are skipped and
global loads outside it read zero (tails, dynamic shapes). Fragment accesses are
still logical (``lower_fragments`` maps them to registers).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .. import errors
from ..ops.bounds import in_bounds
from ..ops.irb import seq
from .layout_inference import loop_key
from .stmt import StmtMutator, contains, substitute
from .thread_utils import for_, fragment_points, is_global

UNROLL_LIMIT = 64


def guard_globals(stmt, ctx, loop_ranges):
    """Skip out-of-range global stores and zero out-of-range global loads in ``stmt``."""
    from tvm_tirx import tirx as _tirx

    def load(x):
        if not is_global(x.source):
            return x
        pred = in_bounds(x.source, list(x.indices), ctx, loop_ranges)
        if pred is None:
            return x
        return _tirx.if_then_else(pred, x, ir.const(0, str(x.source.ty.dtype)))

    def store(x):
        if not is_global(x.dest):
            return x
        pred = in_bounds(x.dest, list(x.indices), ctx, loop_ranges)
        return x if pred is None else ir.If(pred, x, None)

    return tvm_ffi.structural_map(stmt, [(ir.TensorLoad, load), (ir.TensorStore, store)])


def _has_atomic(stmt) -> bool:
    """Whether ``stmt`` contains a ``T.atomic_*`` tile op."""
    from ..ops.registry import tile_op_of

    def is_atomic(x):
        if not isinstance(x, ir.Evaluate):
            return False
        found = tile_op_of(x)
        return found is not None and found[0].name == "atomic"

    return contains(stmt, is_atomic)


class LowerParallel(StmtMutator):
    def __init__(self, loops: dict, thread_var, threads: int):
        super().__init__("cuda")
        self.loops, self.thread_var, self.threads = loops, thread_var, threads
        self.count = 0

    def visit_For(self, stmt, ctx):
        if stmt.annotations is None or "tl.parallel" not in stmt.annotations:
            return super().visit_For(stmt, ctx)
        layout = self.loops.get(loop_key(stmt))
        if layout is None:
            raise errors.compile_error(
                f"internal: T.Parallel loop over {stmt.var.name} has no inferred layout "
                "(a pass rebuilt it with a new loop variable?)",
                stmt.loc,
            )
        vars_, s = [], stmt
        while (
            isinstance(s, ir.For) and s.annotations is not None and "tl.parallel" in s.annotations
        ):
            vars_.append(s.var)
            s = s.body
            while isinstance(s, ir.SeqStmt) and len(s.seq) == 1:
                s = s.seq[0]
        self.count += 1
        lvar = ir.Var(f"pl{self.count}", "int32")
        t = self.thread_var
        points = fragment_points(layout, lvar, t)
        inner = ctx.with_range(lvar, 0, layout.get_local_size())
        points = [inner.simplify(p) for p in points[: len(vars_)]]
        body = substitute(s, dict(zip(vars_, points)))
        body = self.body(body, inner)
        body = guard_globals(body, inner, {})
        if layout.get_replicate() > 1 and _has_atomic(s):
            # replicas run the same iteration: an atomic would be applied once per replica
            body = ir.If(inner.simplify(fragment_points(layout, lvar, t)[-1]) == 0, body, None)
        span = layout.get_thread_size()
        if span < self.threads:
            body = ir.If(t < span, body, None)
        n = layout.get_local_size()
        kind = ir.ForKind.UNROLLED if n <= UNROLL_LIMIT else ir.ForKind.DEFAULT
        return seq([for_(lvar, n, body, kind, loc=stmt.loc)])


def lower_parallel(body, loops, thread_var, threads, ctx):
    return LowerParallel(loops, thread_var, threads)(body, ctx)
