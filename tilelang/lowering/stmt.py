"""Statement traversal helpers shared by the passes: a rebuilding mutator and small queries."""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .context import LowerContext

LAUNCH_OP = "tirx.launch_thread"
ALLOC_OP = "tirx.alloc_tensor"


def launch_of(stmt):
    """(tag, extent, var) when ``stmt`` is a thread launch region, else None."""
    if isinstance(stmt, ir.RegionStmt) and getattr(stmt.op, "name", "") == LAUNCH_OP:
        return (
            str(stmt.args[0].value if hasattr(stmt.args[0], "value") else stmt.args[0]),
            stmt.args[1],
            stmt.body_params[0],
        )
    return None


def alloc_of(stmt):
    """The allocated tensor Var when ``stmt`` is ``v = alloc_tensor(...)``, else None."""
    if isinstance(stmt, ir.Bind) and isinstance(stmt.value, ir.Call):
        if getattr(stmt.value.op, "name", "") == ALLOC_OP:
            return stmt.var
    return None


def make_alloc(var) -> ir.Bind:
    """``var = alloc_tensor()`` for a tensor Var of the desired type."""
    return ir.Bind(var, ir.Call(ALLOC_OP, [], ty_args=[var.ty], ty=var.ty))


def uses_any(node, vars_) -> bool:
    """Whether ``node`` mentions any of ``vars_``."""
    if not vars_:
        return False
    handles = {v.__chandle__() for v in vars_}
    hit = []

    def visit(v):
        if v.__chandle__() in handles:
            hit.append(v)

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return bool(hit)


def flatten_seq(stmt) -> list:
    """The statements of ``stmt`` with nested ``SeqStmt``s spliced in (``[stmt]`` otherwise)."""
    if isinstance(stmt, ir.SeqStmt):
        return [x for s in stmt.seq for x in flatten_seq(s)]
    return [stmt]


def bound_vars(node) -> list:
    """The Vars that binds and loops inside ``node`` bind, in walk order."""
    out = []
    tvm_ffi.structural_walk(
        node, [(ir.Bind, lambda x: out.append(x.var)), (ir.For, lambda x: out.append(x.var))]
    )
    return out


def first_stmt(stmt):
    """The first statement of ``stmt`` with nested ``SeqStmt``s opened (``stmt`` otherwise)."""
    while isinstance(stmt, ir.SeqStmt) and len(stmt.seq):
        stmt = stmt.seq[0]
    return stmt


def substitute(node, mapping: dict):
    """Replace Vars by ``mapping`` (keyed by Var) everywhere in ``node``."""
    if not mapping:
        return node
    by_handle = {k.__chandle__(): v for k, v in mapping.items()}

    def repl(v):
        return by_handle.get(v.__chandle__(), v)

    return tvm_ffi.structural_map(node, [(ir.Var, repl)])


def contains(node, predicate) -> bool:
    """Whether any sub-node satisfies ``predicate``."""
    hit = []

    def visit(x):
        if predicate(x):
            hit.append(x)

    tvm_ffi.structural_walk(node, visit)
    return bool(hit)


class StmtMutator:
    """Rebuild a statement tree bottom-up; subclasses override ``visit_<Type>``.

    Each method receives the node and a :class:`LowerContext` carrying the ranges
    of enclosing loops and thread launches. Returning None deletes a statement.
    """

    def __init__(self, backend: str = "generic"):
        self.backend = backend

    def __call__(self, stmt, ctx=None):
        return self.visit(stmt, ctx or LowerContext(self.backend))

    def visit(self, stmt, ctx):
        method = getattr(self, "visit_" + type(stmt).__name__, None)
        return stmt if method is None else method(stmt, ctx)

    def body(self, stmt, ctx):
        out = self.visit(stmt, ctx)
        return ir.Evaluate(ir.const(0, "int32")) if out is None else out

    def visit_flat(self, stmt, ctx) -> list:
        """The visited statements of ``stmt`` (a sequence), nested sequences spliced in and
        deleted ones dropped: for ``visit_SeqStmt`` overrides that rewrite the list."""
        flat = []
        for s in flatten_seq(stmt):
            r = self.visit(s, ctx)
            if r is not None:
                flat += flatten_seq(r)
        return flat

    def visit_SeqStmt(self, stmt, ctx):
        out = []
        for s in stmt.seq:
            r = self.visit(s, ctx)
            if r is None:
                continue
            if isinstance(r, ir.SeqStmt):
                out.extend(r.seq)
            else:
                out.append(r)
        if not out:
            return None
        return out[0] if len(out) == 1 else ir.SeqStmt(out)

    def visit_For(self, stmt, ctx):
        inner = ctx.with_range(stmt.var, stmt.begin, stmt.end - stmt.begin)
        body = self.body(stmt.body, inner)
        if body.same_as(stmt.body):
            return stmt
        return ir.For(
            stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body, stmt.annotations, stmt.loc
        )

    def visit_If(self, stmt, ctx):
        then = self.body(stmt.then_case, ctx)
        other = None if stmt.else_case is None else self.visit(stmt.else_case, ctx)
        return ir.If(stmt.condition, then, other, stmt.loc)

    def visit_While(self, stmt, ctx):
        return ir.While(stmt.condition, self.body(stmt.body, ctx), stmt.loc)

    def visit_RegionStmt(self, stmt, ctx):
        inner = ctx
        launch = launch_of(stmt)
        if launch is not None:
            _, extent, var = launch
            inner = ctx.with_range(var, 0, extent)
        body = self.body(stmt.body, inner)
        return ir.RegionStmt(
            stmt.op, stmt.args, stmt.body_params, stmt.attrs, body, stmt.result_vars, stmt.loc
        )


def launch_chain(body, prefix: str = ""):
    """(regions, launches, inner): the launch regions nested at the top of ``body`` whose tag
    starts with ``prefix`` (single-statement SeqStmts passed through), their
    ``(tag, extent, var)``, and the statement inside the last one (``body`` when none)."""
    regions, launches = [], []
    while True:
        while isinstance(body, ir.SeqStmt) and len(body.seq) == 1:
            body = body.seq[0]
        launch = launch_of(body)
        if launch is None or not launch[0].startswith(prefix):
            return regions, launches, body
        regions.append(body)
        launches.append(launch)
        body = body.body


def launches_of(body):
    """(list of (tag, extent, var) of the nested thread launches at the top of ``body``,
    the innermost launch's body)."""
    _, launches, inner = launch_chain(body)
    return launches, inner


def with_launch_body(body, new_inner, thread_extent=None):
    """``body`` with the innermost launch's body (what :func:`launches_of` returns second)
    replaced by ``new_inner``; ``thread_extent`` (an int) also resizes the ``threadIdx.x``
    launch. A body without launches is replaced as a whole."""
    while isinstance(body, ir.SeqStmt) and len(body.seq) == 1:
        body = body.seq[0]
    launch = launch_of(body)
    if launch is None:
        return new_inner
    args = list(body.args)
    if launch[0] == "threadIdx.x" and thread_extent is not None:
        args[1] = ir.const(int(thread_extent), str(args[1].ty))
    inner = with_launch_body(body.body, new_inner, thread_extent)
    return ir.RegionStmt(
        body.op, args, body.body_params, body.attrs, inner, body.result_vars, body.loc
    )


def _is_schedule_hint(key: str) -> bool:
    return key.startswith("tl") or key in ("num_stages", "coalesced_width")


class StripScheduleHints(StmtMutator):
    """Drop the loop annotations that only the tile-level passes read (``tl.parallel``,
    ``num_stages``, pipeline order/stage, ``coalesced_width``) before TIRx's own passes."""

    def visit_For(self, stmt, ctx):
        body = self.body(stmt.body, ctx)
        ann = {k: v for k, v in (stmt.annotations or {}).items() if not _is_schedule_hint(k)}
        return ir.For(
            stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body, ann or None, stmt.loc
        )
