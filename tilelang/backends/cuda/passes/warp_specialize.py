"""Warp-specialized branches (``T.ws``) as one if/else chain.

``with T.ws(0): A`` followed by ``with T.ws(1): B`` records two ``if`` statements whose
conditions are disjoint ranges of the thread index. Software barriers must not separate
them: the producer and consumer warpgroups of a hand-written schedule synchronise with
mbarriers while both branches run, and a ``__syncthreads`` placed between them (by
``insert_sync``, which puts barriers before thread-dependent statements) would wait for
threads that are blocked in the other branch. This pass rewrites each run of consecutive
marked ``if`` statements (no ``else``) whose conditions are pairwise disjoint constant thread
ranges into ``if c0: A else: if c1: B ...``, which runs exactly the same statements per
thread and is one statement for the barrier analysis; it removes every marker. Unmarked
``if`` statements keep their barriers (their threads may hand shared data to each other).

Assumes: thread-level code; the thread variable is the block's flattened ``threadIdx.x``.
"""

from __future__ import annotations

from tvm_tirx import ir

from ....lowering.stmt import StmtMutator, first_stmt
from ....lowering.thread_utils import extern_name
from ....ops.hopper.cuda import WS_MARKER

_INF = 1 << 62


def thread_ranges(cond, tx):
    """The set of half-open ``[lo, hi)`` ranges of ``tx`` where ``cond`` holds (a list), or
    None when ``cond`` is not built from comparisons of ``tx`` with constants, ``&``, ``|``."""
    P = ir.prim
    if isinstance(cond, P.LT | P.GE | P.LE | P.GT):
        a, b = cond.a, cond.b
        if not (isinstance(a, ir.Var) and a.same_as(tx) and isinstance(b, ir.IntImm)):
            return None
        c = int(b.value)
        if isinstance(cond, P.LT):
            return [(-_INF, c)]
        if isinstance(cond, P.LE):
            return [(-_INF, c + 1)]
        if isinstance(cond, P.GE):
            return [(c, _INF)]
        return [(c + 1, _INF)]
    if isinstance(cond, P.And | P.BitwiseAnd | P.Or | P.BitwiseOr):
        left, right = thread_ranges(cond.a, tx), thread_ranges(cond.b, tx)
        if left is None or right is None:
            return None
        if isinstance(cond, P.And | P.BitwiseAnd):
            return [
                (max(a0, b0), min(a1, b1))
                for a0, a1 in left
                for b0, b1 in right
                if max(a0, b0) < min(a1, b1)
            ]
        return left + right
    return None


def _disjoint(r1, r2) -> bool:
    return all(a1 <= b0 or b1 <= a0 for a0, a1 in r1 for b0, b1 in r2)


class _Merge(StmtMutator):
    def __init__(self, tx):
        super().__init__("cuda")
        self.tx = tx
        self.marked = _Conds()

    def visit_Evaluate(self, stmt, ctx):
        return None if _is_marker(stmt) else stmt

    def visit_If(self, stmt, ctx):
        if _starts_with_marker(stmt.then_case):
            self.marked.add(stmt.condition)
        return super().visit_If(stmt, ctx)

    def visit_SeqStmt(self, stmt, ctx):
        out = super().visit_SeqStmt(stmt, ctx)
        if not isinstance(out, ir.SeqStmt):
            return out
        result, run, seen = [], [], []
        for s in list(out.seq) + [None]:
            ranges = None
            if isinstance(s, ir.If) and s.else_case is None and s.condition in self.marked:
                ranges = thread_ranges(s.condition, self.tx)
            if ranges is not None and run and all(_disjoint(ranges, r) for r in seen):
                run.append(s)
                seen.append(ranges)
                continue
            if run:
                result.append(_chain(run))
            run, seen = ([s], [ranges]) if ranges is not None else ([], [])
            if ranges is None and s is not None:
                result.append(s)
        return result[0] if len(result) == 1 else ir.SeqStmt(result)


class _Conds:
    """Conditions (by identity) of the ``if`` statements that were marked."""

    def __init__(self):
        self.items = []

    def add(self, cond):
        self.items.append(cond)

    def __contains__(self, cond):
        return any(c.same_as(cond) for c in self.items)


def _is_marker(stmt) -> bool:
    return extern_name(stmt) == WS_MARKER


def _starts_with_marker(stmt) -> bool:
    return _is_marker(first_stmt(stmt))


def _chain(ifs):
    tail = None
    for s in reversed(ifs):
        tail = ir.If(s.condition, s.then_case, tail, s.loc)
    return tail


def merge_ws_branches(body, thread_var):
    """``body`` with runs of disjoint thread-range ``if`` statements chained (module doc)."""
    if thread_var is None:
        return body
    return _Merge(thread_var)(body)


#: Tile ops a ``T.ws`` scope may hold: the explicit Hopper API (per-thread instructions).
_WS_ALLOWED_OPS = frozenset(
    {
        "ws",
        "mbarrier_arrive",
        "mbarrier_expect_tx",
        "mbarrier_arrive_expect_tx",
        "mbarrier_wait_parity",
        "fence_proxy_async",
        "set_max_nreg",
        "warpgroup_arrive",
        "warpgroup_commit_batch",
        "warpgroup_wait",
        "wait_wgmma",
        "named_barrier_arrive",
        "named_barrier_sync",
        "block_rank_in_cluster",
    }
)


def check_ws_scopes(body):
    """CompileError (at the op's line) for a ``T.Pipelined`` loop or a tile op other than the
    explicit Hopper API inside a ``T.ws`` scope, except those ``thread_guard.py`` re-plans over
    the scope's threads (``T.copy``/``T.fill``/``T.gemm``/``T.reduce_*``, ``T.Parallel``):
    the others are partitioned over all the block's threads, so inside a warpgroup scope
    part of their work would silently never run (and a block barrier there would hang)."""
    import tvm_ffi

    from .... import errors
    from ....ops import tile_op_of
    from .thread_guard import PLANNED_OPS

    problems = []

    def check_scope(stmt):
        def visit_eval(e):
            found = tile_op_of(e)
            if found is not None and found[0].name not in _WS_ALLOWED_OPS.union(PLANNED_OPS):
                problems.append(
                    (
                        f"T.{found[0].name} inside a T.ws scope is not supported yet (tile "
                        "ops are partitioned over the whole block; write per-thread code there)",
                        found[1].loc,
                    )
                )

        def visit_for(f):
            ann = f.annotations or {}
            if "num_stages" in ann:  # tile ops, T.Parallel: thread_guard.py re-plans them
                what = "T.Pipelined"
                problems.append(
                    (
                        f"{what} inside a T.ws scope is not supported yet (its iterations are "
                        "partitioned over the whole block; use T.serial with the thread index)",
                        _first_loc(f),
                    )
                )

        tvm_ffi.structural_walk(stmt, [(ir.Evaluate, visit_eval), (ir.For, visit_for)])

    def visit_if(s):
        if _starts_with_ws_op(s.then_case):
            check_scope(s.then_case)

    # exceptions raised inside the walk's callbacks would lose their type: collect, then raise
    tvm_ffi.structural_walk(body, [(ir.If, visit_if)])
    if problems:
        message, loc = problems[0]
        raise errors.compile_error(message, loc)


def _first_loc(stmt):
    """The location of ``stmt`` or, when it has none (loops), of the first statement inside
    that has one."""
    import tvm_ffi

    found = []

    def visit(x):
        if not found and errors_where(x.loc):
            found.append(x.loc)

    if errors_where(stmt.loc):
        return stmt.loc
    tvm_ffi.structural_walk(stmt, [(ir.Stmt, visit)])
    return found[0] if found else stmt.loc


def errors_where(loc) -> bool:
    from .... import errors

    return bool(errors.where(loc))


def _starts_with_ws_op(stmt) -> bool:
    from ....ops import tile_op_of

    while isinstance(stmt, ir.SeqStmt) and len(stmt.seq):
        stmt = stmt.seq[0]
    found = tile_op_of(stmt)
    return found is not None and found[0].name == "ws"
