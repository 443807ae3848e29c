"""LowerParallel (CUDA): partition each ``T.Parallel`` nest over the threads by its layout.

Assumes: ``layout_inference`` gave the nest (keyed by its outermost For) a Fragment ``L``
over the iteration space; the thread variable and thread count of the block.

Guarantees: the nest is replaced by ``for l in range(L.local_size)`` (unrolled when
small) in which thread ``t`` runs iteration ``L^-1(l, t)``; threads beyond
``L``'s thread span do nothing; global stores outside their tensor are skipped and
global loads outside it read zero (tails, dynamic shapes). Fragment accesses are
still logical (``lower_fragments`` maps them to registers).

Vectors: when ``l = lo * vec + v`` gives a thread ``vec`` consecutive elements of the
innermost axis (``vec`` elements of the widest global/shared element type making 16
bytes, or fewer), the nest also gets a vector form ``for lo: <vector site>`` built by
``transform/vectorize.py`` (16-byte global/shared loads and stores, scalar code at
tails), chosen at run time when the global tensors' base pointers are aligned.

Replicas: when ``L`` replicates iterations over threads (``replicate > 1``, e.g. a
row-vector loop of 64 iterations over 128 threads), every replica computes the
iteration but only replica 0 stores to global/shared memory or runs side effects
(atomics, prints, extern calls), so memory is written once.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....layout import expr as E
from ....lowering.bounds import in_bounds
from ....lowering.fragments import within_owners
from ....lowering.irb import seq
from ....lowering.stmt import StmtMutator, substitute, uses_any
from ....lowering.thread_range_marks import work_marker
from ....lowering.thread_utils import (
    UNROLL_LIMIT,
    alloc,
    for_,
    fragment_points,
    is_global,
    is_shared,
)
from ....lowering.vectorize import (
    lanes_for,
    only_replica0,
    split_lanes,
    vectorize_lanes,
    with_fallback,
)
from .layout_inference import loop_key
from .loop_fragment_access import first_loc
from .lower_fragments import alias_fragment_views
from .strided_parallel import is_strided_nest, lower_strided_nest

# Loops over a thread's fragment slots unroll up to this many slots: a register array
# indexed at run time lives in local memory (the HOPPER.md habit), and 256 registers is
# the most a thread has anyway.


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


class LowerParallel(StmtMutator):
    def __init__(self, loops: dict, thread_var, threads: int):
        super().__init__("cuda")
        self.loops, self.thread_var, self.threads = loops, thread_var, threads
        self.count = 0
        self.guarded = 0  # depth of enclosing `if`s on the thread index

    def visit_For(self, stmt, ctx):
        if stmt.annotations is None or "tl.parallel" not in stmt.annotations:
            return super().visit_For(stmt, ctx)
        layout = self.loops.get(loop_key(stmt))
        if layout is None and is_strided_nest(stmt):  # a run-time extent
            self.count += 1
            lower = lambda body, inner: guard_globals(self.body(body, inner), inner, {})  # noqa: E731
            loop = lower_strided_nest(
                stmt, ctx, self.thread_var, self.threads, lower, f"pl{self.count}"
            )
            return seq([loop])
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
        n = layout.get_local_size()
        try:
            raw = fragment_points(layout, lvar, t)
        except errors.CompileError as err:
            if not getattr(err, "needs_loc", False):
                raise
            raise errors.compile_error(
                f"a T.Parallel loop: {err}", first_loc(s) or stmt.loc
            ) from None
        inner = ctx.with_range(lvar, 0, n)
        points = [inner.simplify(p) for p in raw]
        replicated = layout.get_replicate() > 1
        if replicated:
            _refuse_replicated_prev(s, stmt.loc)
        body = self.body(substitute(s, dict(zip(vars_, points[: len(vars_)]))), inner)
        body = guard_globals(body, inner, {})
        if replicated:
            body = only_replica0(body, points[-1] == 0)
        kind = ir.ForKind.UNROLLED if n <= UNROLL_LIMIT else ir.ForKind.DEFAULT
        out = for_(lvar, n, body, kind, loc=stmt.loc)
        vector = self._vectorized(s, vars_, raw, lvar, n, ctx, replicated, stmt.loc)
        if vector is not None:
            site, loop = vector
            out = with_fallback(site, loop, out)
        out = within_owners(out, layout, ctx, "T.Parallel loop", stmt.loc)
        if self.guarded:  # re-planned over an `if`'s threads: insert_sync's partial barriers
            return seq([work_marker(first_loc(s) or stmt.loc), out])
        return seq([out])

    def visit_If(self, stmt, ctx):
        t = self.thread_var
        guarded = uses_any(stmt.condition, [t])
        if guarded and ctx.with_range(t, 0, self.threads).prove(stmt.condition):
            guarded = False  # every thread of the user's block (a warp-specialized consumer)
        self.guarded += guarded
        try:
            return super().visit_If(stmt, ctx)
        finally:
            self.guarded -= guarded

    def _vectorized(self, s, vars_, raw, lvar, n, ctx, replicated, loc):
        """(VectorSite, loop) running the nest in vectors of consecutive elements, or None."""
        tensors = [
            x.source if isinstance(x, ir.TensorLoad) else x.dest
            for kind in (ir.TensorLoad, ir.TensorStore)
            for x in E.collect(s, kind)
        ]
        max_vec = lanes_for([x for x in tensors if is_global(x) or is_shared(x)])
        split = split_lanes(raw, lvar, n, ctx, max_vec) if max_vec > 1 else None
        if split is None:
            return None
        vec, lo, v, points, inner = split
        lane = self.body(substitute(s, dict(zip(vars_, points[: len(vars_)]))), inner)
        site = vectorize_lanes(lane, v, vec, inner)
        if site is None:
            return None
        for var in site.allocs:
            self.allocs.append(alloc(var))

        body = site.stmt(v, vec, guard=lambda x: guard_globals(x, inner, {}), loc=loc)
        if replicated:
            body = only_replica0(body, points[-1] == 0)
        m = n // vec
        kind = ir.ForKind.UNROLLED if n <= UNROLL_LIMIT else ir.ForKind.DEFAULT
        return site, for_(lo, m, body, kind, loc=loc)


def _refuse_replicated_prev(body, loc) -> None:
    """A CompileError for ``return_prev`` atomics in a replicated nest: replica 0 alone
    applies the atomic (once per iteration), so the other replicas would have no old value."""
    from ....ops import tile_op_of

    for x in E.collect(body, ir.Evaluate):
        found = tile_op_of(x)
        if found is not None and found[0].name == "atomic_prev":
            raise errors.compile_error(
                f"T.atomic_{found[0].view(found[1]).kind}(return_prev=True) in a T.Parallel "
                "loop whose iterations run on several threads (its layout is replicated, "
                "as a replicated fragment it writes): only one of them applies the atomic, "
                "so the others would not get the old value; write the result to a "
                "non-replicated fragment or to shared/global memory",
                found[1].loc or loc,
            )


def lower_parallel(body, loops, thread_var, threads, ctx):
    """Lower every ``T.Parallel`` nest of ``body`` (see the module docstring).

    Local arrays the vector forms need are appended to ``ctx.extra_allocs``.
    """
    if hasattr(ctx, "local_arrays"):
        alias_fragment_views(body, ctx)  # T.reshape of a fragment: the base's registers
    mutator = LowerParallel(loops, thread_var, threads)
    mutator.allocs = ctx.extra_allocs if hasattr(ctx, "extra_allocs") else []
    return mutator(body, ctx)
