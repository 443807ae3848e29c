"""Materialize ``T.annotate_ws_schedule`` on CUDA (stages ``materialize_ws_schedule`` and
``place_ws_roles``).

The schedule is checked first (``tilelang/transform/ws_schedule.py``: unknown or unplaced
ids, pipelines not between one producer and one consumer role, unpaired syncs, spans,
warp ranges). On sm_90/sm_90a with TMA a schedule of the producer/consumer form is then
realized by the automatic warp specialization (``warp_specialize_auto.py``), driven by the
schedule instead of its heuristics::

    roles      Producer: warps inside one warpgroup, its body in scope S is
                 [acquire(P, s), copy ids (global -> P's tiles) ..., commit(P, s)]
               Consumer: whole warpgroups, every other op of S between wait(P, s')
                 and release(P, s'), plus the root scope's ops
               (other roles: empty bodies, idle warps)
    pipelines  P (several of one depth act as one: one ring, the consumer waiting for all
               of a step's tiles), protecting exactly the producer's destination tiles,
               synchronizing the serial / pipelined loop S at the kernel's top level;
               num_warps = consumer warps + 4 (the producer's warpgroup)

``materialize_ws_schedule`` (before layout inference) sets S's ``num_stages`` to P's depth
(the tiles get ``depth`` versions, full/empty mbarrier rings of that depth) and the block to
the consumer's threads, so ``pipeline_planning`` warp-specializes S: the producer warpgroup
issues P's copies as TMA loads completing on ``full[rel % depth]`` after waiting on
``empty``, the consumers wait on ``full`` and release ``empty`` after their reads. The
producer's syncs sit at one stage; the consumer's ops run at stage offsets (upstream's rule,
``transform/ws_schedule.op_deltas``): all 0 give one steady-state loop, offsets 0 and 1 become
the loop's ``T.Pipelined(order=, stage=, group=)`` (the consumer's list order; one mbarrier
ring per copy: ``pipeline_order.py``, which keeps program order, noting why in ``tl.tma``,
when that would be illegal).
``place_ws_roles`` (after shared-memory planning) then puts the roles on the schedule's
warps: the consumer branch runs on warps ``lo_c .. hi_c - 1`` (its thread index shifted),
the producer branch on the producer's warpgroup with the issuing thread in the producer's
first warp, and each branch starts with ``setmaxnreg`` of its role's ``max_nreg`` (none for
0, and none below sm_90a).

Other schedules (pipelines in several scopes or of several depths, more than two busy
roles, producer stage offsets, consumer offsets above 1, binds or guards in an offset loop,
while scopes, ...), and every schedule below sm_90 or without TMA/warp specialization, run in
program order, the schedule's meaning: the ids and markers are stripped, the pipeline's
depth still sets S's ``num_stages``, and the reason is recorded as the function attribute
``tl.ws_schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....lowering.stmt import flatten_seq, launches_of, substitute, with_launch_body
from ....lowering.thread_utils import extern_name
from ....lowering.thread_utils import extern_stmt as _call
from ....ops import tile_op_of
from ....transform.ws_schedule import (
    ROOT,
    Pipeline,
    check_schedule,
    depth_stages,
    op_deltas,
    read_schedule,
    strip_schedule,
)
from .tma_lowering import tma_supported

ATTR = "tl.ws_schedule"


@dataclass
class WsPlan:
    """A schedule the automatic warp specialization realizes (module doc)."""

    loop: str  # the scope loop's id
    depth: int
    consumer: tuple  # (warps_lo, warps_hi, max_nreg)
    producer: tuple
    num_warps: int
    annotations: dict = None  # the loop's T.Pipelined(order=, stage=, group=), or None

    @property
    def consumer_threads(self) -> int:
        return 32 * (self.consumer[1] - self.consumer[0])

    def describe(self) -> str:
        c, p = self.consumer, self.producer
        return (
            f"materialized: loop {self.loop} warp-specialized, producer warps {p[0]}..{p[1] - 1}"
            f" (max_nreg {p[2]}), consumer warps {c[0]}..{c[1] - 1} (max_nreg {c[2]}), "
            f"{self.depth}-deep full/empty mbarrier rings, {self.num_warps} warps"
            + (
                f"; consumer stage offsets as T.Pipelined{self.annotations}"
                if self.annotations
                else ""
            )
        )


def _plan(res, body, arch, options):
    """(WsPlan, None) when the schedule has the producer/consumer form, else (None, why)."""
    sch = res.schedule
    if not tma_supported(arch, options):
        return None, f"needs CUDA sm_90 or later with TMA (target {arch})"
    if not options.get("warp_specialize", True):
        return None, "warp specialization is disabled (tl.disable_warp_specialized)"
    busy = [r for r in sch.roles if any(bodies.get(r.name) for bodies in sch.scopes.values())]
    if not sch.pipelines:
        return None, "the schedule has no pipeline"
    where = {sid for p in sch.pipelines for sid in _sync_scopes(sch, p.name)}
    if len(where) != 1 or len({p.depth for p in sch.pipelines}) != 1:
        return None, "the pipelines synchronize different scopes or have different depths"
    # pipelines between the same two roles in one loop at one depth share one ring (the
    # consumer waits for all of a step's tiles: the same order, synchronized more coarsely)
    pipe = Pipeline(
        "+".join(p.name for p in sch.pipelines),
        [b for p in sch.pipelines for b in p.buffers],
        sch.pipelines[0].depth,
    )
    scope = where.pop()
    op = res.ops.get(scope)
    if scope == ROOT or op is None or op.kind != "loop":
        return None, f"pipeline {pipe.name!r} synchronizes {scope!r}, not a serial loop"
    if op.scope != ROOT or not _top_level(body, op.node):
        return None, f"scope loop {scope!r} is not a top-level statement of the kernel"
    if _other_pipelined_loops(body, op.node):
        return None, "the kernel has another T.Pipelined loop"
    bodies = sch.scopes[scope]
    prod = next((r for r in busy if _kinds(bodies.get(r.name, [])) == {"PRODUCER"}), None)
    cons = next((r for r in busy if _kinds(bodies.get(r.name, [])) == {"CONSUMER"}), None)
    if len(busy) != 2 or prod is None or cons is None:
        return None, "materialized schedules have one producer and one consumer role"
    stages = {ins[3] for ins in bodies[prod.name] if ins[0] == "sync"}
    if len(stages) != 1:
        return None, f"role {prod.name!r} syncs at several stages {sorted(stages)}"
    ordered, why = _stage_offsets(res, sch, prod, cons, op)
    if why:
        return None, why
    why = _producer_ops(res, sch, prod, cons, scope, pipe)
    if why:
        return None, why
    if cons.lo % 4 or (cons.hi - cons.lo) % 4:
        return None, f"consumer role {cons.name!r} does not cover whole warpgroups"
    group = prod.lo // 4
    if (prod.hi - 1) // 4 != group or cons.lo // 4 <= group < cons.hi // 4:
        return None, f"producer role {prod.name!r} is not inside one warpgroup of its own"
    if sch.num_warps != cons.hi - cons.lo + 4:
        return None, (
            f"num_warps={sch.num_warps} is not the consumer's {cons.hi - cons.lo} warps plus "
            "the producer's warpgroup"
        )
    return (
        WsPlan(
            scope,
            pipe.depth,
            (cons.lo, cons.hi, cons.max_nreg),
            (prod.lo, prod.hi, prod.max_nreg),
            sch.num_warps,
            ordered,
        ),
        None,
    )


def _stage_offsets(res, sch, prod, cons, loop_op):
    """(annotations, None): the consumer's stage offsets as ``T.Pipelined(order=, stage=,
    group=)`` of the loop (``pipeline_order.py``; None when every offset is 0), or
    (None, why) when they cannot be expressed that way."""
    bodies = sch.scopes[loop_op.id]
    deltas = op_deltas(sch, res, bodies[cons.name])
    if not deltas or max(deltas.values()) == 0:
        return None, None
    if max(deltas.values()) > 1:
        return None, f"role {cons.name!r}: stage offsets above 1 (only 0 and 1 are materialized)"
    slots = _body_slots(loop_op.node.body)
    if slots is None:
        return None, f"loop {loop_op.id!r}: binds or guarded ops in its body"
    mine = [ins[1] for ins in bodies[cons.name] if ins[0] == "op"]
    theirs = {ins[1] for ins in bodies[prod.name] if ins[0] == "op"}
    groups, stage, order = [], [], []
    for op_id in sorted({x for x in slots if x}, key=lambda i: res.ops[i].order):
        groups.append([k for k, x in enumerate(slots) if x == op_id])
        if op_id in theirs and op_id not in mine:
            stage.append(-1)
            order.append(-1)
        else:
            stage.append(deltas[op_id])
            order.append(mine.index(op_id))
    return {
        "tl_pipeline_group": groups,
        "tl_pipeline_stage": stage,
        "tl_pipeline_order": order,
    }, None


def _body_slots(body):
    """The op id of each statement of a loop body with the markers removed, or None when a
    statement has no id of its own (a bind, an ``if`` guard)."""
    slots, current = [], []
    for s in flatten_seq(body):
        found = tile_op_of(s)
        if found is not None and found[0].name == "ws_op_begin":
            current.append(str(found[1].attrs["id"]))
            continue
        if found is not None and found[0].name == "ws_op_end":
            current.pop()
            continue
        op_id = current[0] if current else _loop_id(s)
        if op_id is None:
            return None
        slots.append(op_id)
    return slots


def _loop_id(stmt):
    if not isinstance(stmt, ir.For):
        return None
    value = (stmt.annotations or {}).get("tl.ws_op_id")
    return None if value is None else str(getattr(value, "value", value))


def _sync_scopes(sch, name):
    return {
        sid
        for sid, bodies in sch.scopes.items()
        for instrs in bodies.values()
        for ins in instrs
        if ins[0] == "sync" and ins[2] == name
    }


def _kinds(instrs) -> set:
    return {ins[1].split("_")[0] for ins in instrs if ins[0] == "sync"}


def _producer_ops(res, sch, prod, cons, scope, pipe):
    """Why the producer's work is not 'copies into the pipeline's tiles', or None."""
    written = []
    for sid, bodies in sch.scopes.items():
        mine = [ins[1] for ins in bodies.get(prod.name, []) if ins[0] == "op"]
        theirs = {ins[1] for ins in bodies.get(cons.name, []) if ins[0] == "op"}
        for op_id in mine:
            if sid != scope:
                if op_id != scope and op_id not in theirs:
                    return f"producer op {op_id!r} outside loop {scope!r} is not shared"
                continue
            op = res.ops[op_id]
            found = tile_op_of(op.stmts[0]) if len(op.stmts) == 1 else None
            if found is None or found[0].name != "copy":
                return f"producer op {op_id!r} is not a T.copy"
            src, dst = found[1].args[0].source, found[1].args[1].source
            if not any(dst.same_as(b) for b in pipe.buffers) or str(src.ty.scope) not in (
                "",
                "global",
            ):
                return f"producer op {op_id!r} is not a global -> {pipe.name!r} tile copy"
            written.append(dst)
    for b in pipe.buffers:
        if not any(b.same_as(w) for w in written):
            return f"pipeline {pipe.name!r} tile {b.name} is not written by the producer"
    return None


def _top_level(body, loop) -> bool:
    _, inner = launches_of(body)
    return any(s.same_as(loop) for s in flatten_seq(inner))


def _other_pipelined_loops(body, loop) -> bool:
    found = []

    def visit(f):
        if "num_stages" in (f.annotations or {}) and not f.same_as(loop):
            found.append(f)

    tvm_ffi.structural_walk(body, [(ir.For, visit)])
    return bool(found)


def materialize_ws_schedule(func, state):
    """Stage ``materialize_ws_schedule`` (module doc). Assumes a traced kernel; guarantees
    no schedule marker or ``tl.ws_op_id`` remains, ``state.ws_schedule`` is the WsPlan or
    None, and the function records ``tl.ws_schedule`` when it had a schedule."""
    res = read_schedule(func.body)
    check_schedule(res)
    if res.schedule is None and not res.ops and not res.depth_hints:
        return func
    stages = depth_stages(res)
    plan, why = None, None
    if res.schedule is not None:
        plan, why = _plan(res, func.body, state.arch, state.options)
        # each pipeline's depth sets its loop's stage count either way (the deepest one)
        for pipe in res.schedule.pipelines:
            loop = _pipe_loop(res, pipe)
            if loop is not None:
                key = loop.__chandle__()
                stages[key] = max(pipe.depth, stages.get(key, 0))
    ann = {}
    if plan is not None and plan.annotations:
        ann[res.ops[plan.loop].node.__chandle__()] = plan.annotations
    body = strip_schedule(func.body, stages, ann)
    state.ws_schedule = plan
    if plan is not None and state.arch == "sm_90a":
        _check_registers(plan, res.schedule.loc)
    if plan is not None:
        _, inner = launches_of(body)
        body = with_launch_body(body, inner, plan.consumer_threads)
        # (a scheduled loop is specialized without a gemm: ws_stage_reads.stage_release)
        state.options = {**state.options, "ws_schedule_loop": True}
        func = func.with_attr(ATTR, plan.describe())
    elif res.schedule is not None:
        func = func.with_attr(ATTR, f"program order: {why}")
    return func.with_body(body)


def _check_registers(plan, loc):
    """CompileError when the roles' ``setmaxnreg`` budgets exceed the register file (the
    ``setmaxnreg.inc`` would wait forever): a role with ``max_nreg`` 0 keeps the launch's
    per-thread share."""
    c, p = plan.consumer, plan.producer
    if not (c[2] or p[2]):
        return
    share = min(256, 65536 // (32 * plan.num_warps)) // 8 * 8
    groups = [(c[2] or share, (c[1] - c[0]) // 4), (p[2] or share, 1)]
    total = sum(nreg * 128 * n for nreg, n in groups)
    if total > 65536:
        raise errors.compile_error(
            f"T.annotate_ws_schedule: the roles' registers ({c[2] or share} x "
            f"{32 * (c[1] - c[0])} consumer threads + {p[2] or share} x 128 producer "
            f"warpgroup threads = {total}) exceed the 65536 of an SM (setmaxnreg would wait "
            "forever); lower max_nreg",
            loc,
        )


def _pipe_loop(res, pipe):
    if pipe is None:
        return None
    for sid, bodies in res.schedule.scopes.items():
        for instrs in bodies.values():
            if any(ins[0] == "sync" and ins[2] == pipe.name for ins in instrs):
                op = res.ops.get(sid)
                return op.node if op is not None and op.kind == "loop" else None
    return None


def _split_of(inner, thread_var, threads):
    """(index, If) of the producer/consumer split ``if tx < threads: ... else: ...``."""
    stmts = flatten_seq(inner)
    for i, s in enumerate(stmts):
        if not (isinstance(s, ir.If) and s.else_case is not None):
            continue
        c = s.condition
        if (
            isinstance(c, ir.prim.LT)
            and isinstance(c.a, ir.Var)
            and c.a.same_as(thread_var)
            and isinstance(c.b, ir.IntImm)
            and int(c.b.value) == threads
        ):
            return i, s
    return None, None


def _drop_nreg(stmt):
    seq = [
        x for x in flatten_seq(stmt) if not (extern_name(x) or "").startswith("tl::set_max_nreg")
    ]
    return seq[0] if len(seq) == 1 else ir.SeqStmt(seq)


def _nreg(count, arch, inc):
    if not count or arch != "sm_90a":
        return []
    return [_call(f"tl::set_max_nreg<{int(count)}, {1 if inc else 0}>")]


def place_ws_roles(func, state):
    """Stage ``place_ws_roles`` (module doc): the split put on the schedule's warps, with
    the roles' ``setmaxnreg``. Assumes ``pipeline_planning`` split the kernel (else the
    schedule ran in program order: recorded); guarantees the block has ``num_warps`` warps."""
    plan = getattr(state, "ws_schedule", None)
    if plan is None:
        return func
    tx = state.thread_var
    launches, inner = launches_of(func.body)
    at, split = _split_of(inner, tx, plan.consumer_threads)
    if split is None:
        notes = "; ".join(state.ctx.tma_notes) if state.ctx is not None else ""
        why = notes or "pipeline planning made no TMA decision for it, e.g. a guarded copy"
        return func.with_attr(
            ATTR, f"program order: loop {plan.loop} was not warp-specialized ({why})"
        )
    stmts = flatten_seq(inner)
    outside = [s for i, s in enumerate(stmts) if i != at]
    if any(_uses_var(s, tx) and not _init_guard(s, tx) for s in outside):
        raise errors.compile_error(
            "T.annotate_ws_schedule: statements outside the roles read the thread index"
        )
    T = plan.consumer_threads
    c_lo, c_hi, c_nreg = plan.consumer
    p_lo, _, p_nreg = plan.producer
    P = ir.prim
    consumer = substitute(_drop_nreg(split.then_case), {tx: tx - 32 * c_lo})
    shifted = P.FloorMod(tx - 32 * p_lo + 128, ir.const(128, "int32")) + T
    producer = substitute(_drop_nreg(split.else_case), {tx: shifted})
    consumer = ir.SeqStmt([*_nreg(c_nreg, state.arch, True), consumer])
    producer = ir.SeqStmt([*_nreg(p_nreg, state.arch, False), producer])
    in_consumer = P.And(tx >= 32 * c_lo, tx < 32 * c_hi) if c_lo else tx < 32 * c_hi
    stmts[at] = ir.If(in_consumer, consumer, producer, split.loc)
    body = with_launch_body(func.body, ir.SeqStmt(stmts), 32 * plan.num_warps)
    func = func.with_body(body)
    notes = list(state.ctx.tma_notes) if state.ctx is not None else []
    if plan.annotations and not any("consumer software-pipelined" in n for n in notes):
        why = [n for n in notes if "order" in n or "stage" in n] or ["see tl.tma"]
        func = func.with_attr(
            ATTR, plan.describe() + f"; the stage offsets were not applied ({why[0]})"
        )
    return func


def _uses_var(node, var) -> bool:
    from ....lowering.stmt import uses_any

    return uses_any(node, [var])


def _init_guard(stmt, tx) -> bool:
    """``if tx == 0: <mbarrier init>`` (one thread of the block; any one will do)."""
    c = getattr(stmt, "condition", None)
    return (
        isinstance(stmt, ir.If)
        and isinstance(c, ir.prim.EQ)
        and isinstance(c.a, ir.Var)
        and c.a.same_as(tx)
        and not _uses_var(stmt.then_case, tx)
    )


__all__ = ["ATTR", "WsPlan", "materialize_ws_schedule", "place_ws_roles"]
