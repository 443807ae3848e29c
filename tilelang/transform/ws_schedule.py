"""Read, check and consume a kernel's warp-specialization schedule (``T.annotate_ws_schedule``).

The IR form (``tilelang/ops/ws_schedule/op.py``): one ``tl.ws_schedule`` statement (JSON plus
the pipeline tiles), ``tl.ws_op_begin(id)`` ... ``tl.ws_op_end(id)`` around each id'd tile op
or ``T.ws_op`` body, and the ``tl.ws_op_id`` annotation on id'd loops.

:func:`read_schedule` collects the ids and the schedule; :func:`check_schedule` rejects a
schedule that does not describe the kernel (unknown/unplaced ids, a pipeline not between
exactly one producer and one consumer role, unpaired or mixed syncs, an op touching a pipeline
tile outside that pipeline's span, roles outside ``num_warps`` or overlapping) with a
CompileError at the ``T.annotate_ws_schedule`` line; :func:`strip_schedule` removes every
marker. The meaning of a valid schedule is the straight-line program's (the schedule only
says which warps run what, overlapped how), so a backend that does not materialize it runs
the stripped program: :func:`program_order` (the CPU pipeline's first stage; the CUDA stage
``materialize_ws_schedule`` materializes what it can, ``backends/cuda/passes/ws_schedule.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tvm_tirx import ir

from .. import errors
from ..lowering.stmt import StmtMutator, flatten_seq, uses_any
from ..ops import tile_op_of
from ..ops.ws_schedule.op import MARKERS, WS_SCHEDULE

#: The loop annotation carrying a loop's id (``T.WSID``).
WSID = "tl.ws_op_id"
ROOT = "tl.ws_scope_root"
PRODUCER_KINDS = ("PRODUCER_ACQUIRE", "PRODUCER_COMMIT")
CONSUMER_KINDS = ("CONSUMER_WAIT", "CONSUMER_RELEASE")


@dataclass
class WsOp:
    """One schedulable statement group: ``kind`` is ``op`` (opaque), ``loop`` (a serial or
    pipelined loop: a scope) or ``while`` (a ``T.ws_op``-wrapped while loop: a scope)."""

    id: str
    kind: str
    stmts: list
    loc: object
    scope: str  # the id of the enclosing scope, or ROOT
    node: object = None  # the For / While of a scope
    order: int = 0  # position in program order


@dataclass
class Role:
    name: str
    lo: int
    hi: int
    max_nreg: int


@dataclass
class Pipeline:
    name: str
    buffers: list
    depth: int


@dataclass
class Schedule:
    """The decoded ``tl.ws_schedule``: scopes map scope id -> role -> instructions, each
    ``("op", id)`` or ``("sync", kind, pipeline, stage)``."""

    num_warps: int
    roles: list
    pipelines: list
    scopes: dict
    loc: object

    def role(self, name):
        return next((r for r in self.roles if r.name == name), None)

    def pipeline(self, name):
        return next((p for p in self.pipelines if p.name == name), None)


@dataclass
class ReadResult:
    schedule: Schedule | None = None
    ops: dict = field(default_factory=dict)  # id -> WsOp
    unplaced: list = field(default_factory=list)  # (loc, scope) of statements without an id
    depth_hints: list = field(default_factory=list)  # (call, enclosing pipelined For or None)


def _marker(stmt):
    found = tile_op_of(stmt)
    if found is not None and found[0].name in MARKERS:
        return found
    return None


def _loop_id(loop):
    ann = loop.annotations or {}
    if WSID not in ann:
        return None
    value = ann[WSID]
    return str(value.value if hasattr(value, "value") else value)


def _is_scope_loop(loop) -> bool:
    ann = loop.annotations or {}
    return "tl.parallel" not in ann and loop.kind == ir.ForKind.DEFAULT


def _decode(call, loc) -> Schedule:
    spec = json.loads(str(call.attrs["spec"]))
    buffers = list(call.attrs["buffers"])
    roles = [Role(n, lo, hi, nreg) for n, lo, hi, nreg in spec["roles"]]
    pipes = [Pipeline(n, [buffers[i] for i in idx], d) for n, idx, d in spec["pipelines"]]
    scopes = {}
    for sid, bodies in spec["scopes"]:
        if sid in scopes:
            raise errors.compile_error(f"WSSchedule: scope {sid!r} is listed twice", loc)
        scopes[sid] = {role: [tuple(x) for x in instrs] for role, instrs in bodies.items()}
    return Schedule(spec["num_warps"], roles, pipes, scopes, loc)


class _Reader:
    def __init__(self):
        self.out = ReadResult()
        self.pipelined = []  # enclosing pipelined loops

    def add(self, op: WsOp):
        if op.id in self.out.ops:
            raise errors.compile_error(f"T.WSID {op.id!r} names two statements", op.loc)
        op.order = len(self.out.ops)
        self.out.ops[op.id] = op

    def seq(self, stmt, scope):
        stmts = flatten_seq(stmt)
        # statements before T.annotate_ws_schedule (allocations and their initial values,
        # upstream's block allocations) are the prologue every role runs
        at = [k for k, x in enumerate(stmts) if (_marker(x) or [None])[0] is WS_SCHEDULE]
        prologue = at[0] if at else 0
        i = 0
        while i < len(stmts):
            s = stmts[i]
            found = _marker(s)
            if found is None:
                if i < prologue and not isinstance(s, ir.For | ir.While | ir.If):
                    i += 1
                    continue
                self.stmt(s, scope)
                i += 1
                continue
            op, call = found
            if op.name == "ws_schedule":
                if self.out.schedule is not None:
                    raise errors.compile_error(
                        "a kernel takes one T.annotate_ws_schedule", call.loc
                    )
                self.out.schedule = _decode(call, call.loc)
                i += 1
            elif op.name == "ws_pipeline_depth":
                self.out.depth_hints.append((call, self.pipelined[-1] if self.pipelined else None))
                i += 1
            elif op.name == "ws_op_end":
                raise errors.compile_error("T.ws_op: unbalanced end marker", call.loc)
            else:  # ws_op_begin: the group up to the matching end
                op_id, depth, j = str(call.attrs["id"]), 1, i + 1
                while j < len(stmts) and depth:
                    m = _marker(stmts[j])
                    if m is not None and m[0].name == "ws_op_begin":
                        depth += 1
                    elif m is not None and m[0].name == "ws_op_end":
                        depth -= 1
                    j += 1
                group = [x for x in stmts[i + 1 : j - 1]]
                self.group(op_id, group, call.loc, scope)
                i = j

    def group(self, op_id, group, loc, scope):
        body = [x for x in group if not isinstance(x, ir.Bind) or _marker(x) is None]
        loops = [x for x in body if not isinstance(x, ir.Bind)]
        if len(loops) == 1 and isinstance(loops[0], ir.While):
            self.add(WsOp(op_id, "while", group, loc, scope, loops[0]))
            self.seq(loops[0].body, op_id)
            return
        self.add(WsOp(op_id, "op", group, loc, scope))
        for x in group:  # ids inside an opaque op are an error; markers go
            inner = []
            _walk_ids(x, inner)
            if inner:
                raise errors.compile_error(
                    f"T.WSID {inner[0]!r} is inside the op {op_id!r} (only scope loops may "
                    "hold other ids)",
                    loc,
                )

    def stmt(self, s, scope):
        if isinstance(s, ir.RegionStmt):
            self.seq(s.body, scope)
        elif isinstance(s, ir.For):
            op_id = _loop_id(s)
            pipelined = "num_stages" in (s.annotations or {})
            if pipelined:
                self.pipelined.append(s)
            if op_id is None:
                if not _only_binds(s.body):
                    self.out.unplaced.append((_loc_of(s), scope))
                self.seq(s.body, scope)
            elif _is_scope_loop(s):
                self.add(WsOp(op_id, "loop", [s], _loc_of(s), scope, s))
                self.seq(s.body, op_id)
            else:
                self.add(WsOp(op_id, "op", [s], _loc_of(s), scope))
            if pipelined:
                self.pipelined.pop()
        elif isinstance(s, ir.If):  # a guard around id'd statements: per-op guards
            self.seq(s.then_case, scope)
            if s.else_case is not None:
                self.seq(s.else_case, scope)
        elif isinstance(s, ir.While):
            self.out.unplaced.append((s.loc, scope))
            self.seq(s.body, scope)
        elif not isinstance(s, ir.Bind):
            self.out.unplaced.append((_loc_of(s), scope))


def _only_binds(stmt) -> bool:
    return all(isinstance(x, ir.Bind) for x in flatten_seq(stmt))


def _walk_ids(stmt, out):
    import tvm_ffi

    def visit_eval(e):
        m = _marker(e)
        if m is not None and m[0].name == "ws_op_begin":
            out.append(str(m[1].attrs["id"]))

    def visit_for(f):
        if _loop_id(f) is not None:
            out.append(_loop_id(f))

    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, visit_eval), (ir.For, visit_for)])


def _loc_of(stmt):
    if errors.where(stmt.loc):
        return stmt.loc
    for x in flatten_seq(getattr(stmt, "body", stmt)):
        if errors.where(x.loc):
            return x.loc
        if hasattr(x, "body"):
            inner = _loc_of(x)
            if errors.where(inner):
                return inner
    return stmt.loc


def read_schedule(body) -> ReadResult:
    """The schedule, ids and depth hints of a traced kernel body."""
    reader = _Reader()
    reader.seq(body, ROOT)
    return reader.out


def check_schedule(res: ReadResult) -> None:
    """CompileError (at the ``T.annotate_ws_schedule`` line) for a schedule that does not
    describe the kernel (module doc); nothing to check without a schedule."""
    sch = res.schedule
    if sch is None:
        return

    def fail(msg):
        raise errors.compile_error(f"T.annotate_ws_schedule: {msg}", sch.loc)

    # roles: names, warp ranges
    names = [r.name for r in sch.roles]
    if not sch.roles:
        fail("the schedule has no roles")
    if len(set(names)) != len(names):
        fail(f"role names must be distinct, got {names}")
    for r in sch.roles:
        if r.hi > sch.num_warps:
            fail(
                f"role {r.name!r} covers warps {r.lo}..{r.hi - 1}, out of range for "
                f"num_warps={sch.num_warps}"
            )
    for a in sch.roles:
        for b in sch.roles:
            if (
                a is not b
                and a.lo < b.hi
                and b.lo < a.hi
                and names.index(a.name) < names.index(b.name)
            ):
                fail(
                    f"roles {a.name!r} (warps {a.lo}..{a.hi - 1}) and {b.name!r} "
                    f"(warps {b.lo}..{b.hi - 1}) overlap"
                )
    pnames = [p.name for p in sch.pipelines]
    if len(set(pnames)) != len(pnames):
        fail(f"pipeline names must be distinct, got {pnames}")
    # scopes: known scope ids, known roles
    if ROOT not in sch.scopes:
        fail("the schedule has no root scope (T.WSScope(T.WSScope.ROOT, {...}))")
    for sid, bodies in sch.scopes.items():
        if sid != ROOT:
            op = res.ops.get(sid)
            if op is None:
                fail(f"scope {sid!r} names no loop of the kernel (unknown op id)")
            if op.kind == "op":
                fail(f"scope {sid!r} is not a serial loop or a T.ws_op-wrapped while loop")
        for role in bodies:
            if sch.role(role) is None:
                fail(f"scope {sid!r} has a body for unknown role {role!r} (roles: {names})")
    # every id placed in its own scope; unknown ids
    placed = {}  # id -> roles
    for sid, bodies in sch.scopes.items():
        for role, instrs in bodies.items():
            for ins in instrs:
                if ins[0] != "op":
                    continue
                op = res.ops.get(ins[1])
                if op is None:
                    fail(f"scope {sid!r}, role {role!r}: unknown op id {ins[1]!r}")
                if op.scope != sid:
                    fail(
                        f"op {ins[1]!r} belongs to scope {op.scope!r}, but scope {sid!r} "
                        f"places it (role {role!r})"
                    )
                placed.setdefault(ins[1], set()).add(role)
    scoped = set(sch.scopes)
    for op in res.ops.values():
        if op.scope in scoped and op.id not in placed:
            fail(f"op {op.id!r} (at {errors.where(op.loc)}) is not placed by any role")
    for loc, scope in res.unplaced:
        if scope in scoped:
            fail(
                f"the statement at {errors.where(loc) or 'an unknown line'} has no T.WSID, so "
                "the schedule cannot place it (annotations={T.WSID: ...} or T.ws_op)"
            )
    _check_pipelines(sch, res, placed, fail)
    # program order is the meaning: a role's ops of one iteration (one stage offset) keep it
    for sid, bodies in sch.scopes.items():
        for role, instrs in bodies.items():
            deltas = op_deltas(sch, res, instrs, fail)
            for d in set(deltas.values()):
                ids = [ins[1] for ins in instrs if ins[0] == "op" and deltas[ins[1]] == d]
                for a, b in zip(ids, ids[1:]):
                    if res.ops[a].order >= res.ops[b].order:
                        fail(
                            f"scope {sid!r}, role {role!r} runs op {b!r} after {a!r} in the "
                            "same iteration, against the program's order"
                        )


def op_deltas(sch, res, instrs, fail=None) -> dict:
    """op id -> its stage offset in one role's body (upstream's rule): the stage of the open
    spans of the pipelines it touches (they must agree), else the body's smallest sync
    stage; offsets count from that smallest stage."""
    stages = [ins[3] for ins in instrs if ins[0] == "sync"]
    s_min = min(stages) if stages else 0
    open_, out = {}, {}
    for ins in instrs:
        if ins[0] == "sync":
            _, kind, pname, stage = ins
            if kind in ("PRODUCER_ACQUIRE", "CONSUMER_WAIT"):
                open_[pname] = stage
            else:
                open_.pop(pname, None)
            continue
        op = res.ops[ins[1]]
        seen = set()
        for p in sch.pipelines:
            if p.name in open_ and op.stmts and uses_any(ir.SeqStmt(list(op.stmts)), p.buffers):
                seen.add(open_[p.name])
        if len(seen) > 1 and fail is not None:
            fail(
                f"op {op.id!r} touches pipelines whose open spans sit at different stages "
                f"{sorted(seen)}; split the op or align the stages"
            )
        out[op.id] = (seen.pop() if seen else s_min) - s_min
    return out


def _check_pipelines(sch, res, placed, fail):
    users = {p.name: {} for p in sch.pipelines}  # pipeline -> role -> kinds
    where = {p.name: set() for p in sch.pipelines}
    inherited = {}  # (scope, role) -> pipelines open where the role enters the scope

    def depth(sid):
        d = 0
        while sid != ROOT and sid in res.ops:
            sid, d = res.ops[sid].scope, d + 1
        return d

    for sid in sorted(sch.scopes, key=depth):  # parents first
        bodies = sch.scopes[sid]
        for role, instrs in bodies.items():
            open_ = {}  # pipeline -> stage of its open span
            outer = inherited.get((sid, role), frozenset())
            for ins in instrs:
                if ins[0] == "sync":
                    _, kind, pname, stage = ins
                    if pname not in users:
                        fail(f"scope {sid!r}, role {role!r}: unknown pipeline {pname!r}")
                    users[pname].setdefault(role, set()).add(kind)
                    where[pname].add(sid)
                    opening = kind in ("PRODUCER_ACQUIRE", "CONSUMER_WAIT")
                    if opening and pname in open_:
                        fail(
                            f"scope {sid!r}, role {role!r}: {kind} of {pname!r} while its span is open"
                        )
                    if not opening:
                        if pname not in open_:
                            fail(
                                f"scope {sid!r}, role {role!r}: unpaired {kind} of {pname!r} "
                                "(no acquire/wait before it)"
                            )
                        if open_[pname] != stage:
                            fail(
                                f"scope {sid!r}, role {role!r}: {kind} of {pname!r} at stage "
                                f"{stage} pairs with stage {open_[pname]}"
                            )
                        del open_[pname]
                    else:
                        open_[pname] = stage
                    continue
                op = res.ops[ins[1]]
                if op.kind != "op":
                    inherited[(op.id, role)] = outer | set(open_)
                for p in sch.pipelines:
                    if (
                        op.kind == "op"
                        and op.stmts
                        and uses_any(ir.SeqStmt(list(op.stmts)), p.buffers)
                    ):
                        if len(placed[op.id]) > 1:
                            fail(
                                f"op {op.id!r} touches pipeline {p.name!r}'s buffers and is "
                                f"placed by several roles ({sorted(placed[op.id])})"
                            )
                        if p.name not in open_ and p.name not in outer:
                            fail(
                                f"scope {sid!r}, role {role!r}: op {op.id!r} touches pipeline "
                                f"{p.name!r}'s buffers outside its acquire/commit (wait/release) span"
                            )
            if open_:
                pname = next(iter(open_))
                fail(
                    f"scope {sid!r}, role {role!r}: unpaired sync of {pname!r} (span never closed)"
                )
    for p in sch.pipelines:
        roles = users[p.name]
        if len(roles) != 2:
            fail(
                f"pipeline {p.name!r} must be used by exactly 2 roles (a producer and a "
                f"consumer), got {len(roles)}: {sorted(roles)}"
            )
        kinds = sorted(
            "producer"
            if ks <= set(PRODUCER_KINDS)
            else "consumer"
            if ks <= set(CONSUMER_KINDS)
            else "mixed"
            for ks in roles.values()
        )
        if kinds != ["consumer", "producer"]:
            fail(
                f"pipeline {p.name!r}: one role must only acquire/commit and the other only "
                f"wait/release, got {dict((r, sorted(k)) for r, k in roles.items())}"
            )
        if len(where[p.name]) != 1:
            fail(f"pipeline {p.name!r} synchronizes more than one scope: {sorted(where[p.name])}")


class _Strip(StmtMutator):
    def __init__(self, stages, annotations):
        super().__init__()
        self.stages = stages  # For handle -> num_stages
        self.annotations = annotations  # For handle -> annotations to set

    def visit_Evaluate(self, stmt, ctx):
        return None if _marker(stmt) is not None else stmt

    def visit_For(self, stmt, ctx):
        body = self.body(stmt.body, ctx)
        ann = dict(stmt.annotations or {})
        ann.pop(WSID, None)
        stages = self.stages.get(stmt.__chandle__())
        if stages is not None:
            ann["num_stages"] = int(stages)
        ann.update(self.annotations.get(stmt.__chandle__(), {}))
        return ir.For(
            stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body, ann or None, stmt.loc
        )


def depth_stages(res: ReadResult) -> dict:
    """``T.annotate_ws_pipeline_depth``: enclosing pipelined loop (handle) -> its new
    ``num_stages``; a hint outside a pipelined loop, or two depths for one loop, is an error."""
    out = {}
    for call, loop in res.depth_hints:
        depths = {int(d) for d in call.attrs["depths"]}
        if loop is None:
            raise errors.compile_error(
                "T.annotate_ws_pipeline_depth must be inside a T.Pipelined loop", call.loc
            )
        key = loop.__chandle__()
        depths |= {out[key]} if key in out else set()
        if len(depths) != 1:
            raise errors.compile_error(
                f"T.annotate_ws_pipeline_depth: one depth per loop, got {sorted(depths)}", call.loc
            )
        out[key] = depths.pop()
    return out


def strip_schedule(body, stages=None, annotations=None):
    """``body`` without schedule markers and ``tl.ws_op_id`` annotations; ``stages`` maps a
    loop (handle) to its new ``num_stages``, ``annotations`` to annotations it gets."""
    out = _Strip(stages or {}, annotations or {})(body)
    return ir.Evaluate(ir.const(0, "int32")) if out is None else out


def program_order(body):
    """``body`` checked (:func:`check_schedule`) and stripped: the straight-line program,
    the meaning of any valid schedule."""
    res = read_schedule(body)
    check_schedule(res)
    if res.schedule is None and not res.ops and not res.depth_hints:
        return body
    return strip_schedule(body, depth_stages(res))


__all__ = [
    "ROOT",
    "WSID",
    "ReadResult",
    "Schedule",
    "WsOp",
    "check_schedule",
    "op_deltas",
    "depth_stages",
    "program_order",
    "read_schedule",
    "strip_schedule",
]
