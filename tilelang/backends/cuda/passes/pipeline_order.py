"""``T.Pipelined(order=, stage=, group=)`` in warp-specialized loops (CUDA sm_90a).

Upstream TileLang's annotations split the loop body's top-level statements into groups
(``group[g]``: statement indices), each run ``stage[g]`` iterations late and at position
``order[g]`` of the steady-state body; ``-1`` marks the copies that the producer warpgroup
issues (TMA). Upstream's ``example_mha_fwd_bshd_wgmma_pipelined.py``::

    group = [[0], [1, 2], [3..10], [11], [12], [13]]   K copy, Q @ K^T, softmax, rescale,
    stage = [-1, 0, 0, 1, -1, 1]                        V copy, P @ V
    order = [-1, 0, 3, 1, -1, 2]

gives the consumer (``rel = k - begin``, ``D`` = the largest stage, 0 or 1)::

    [if begin < end: wait full[0]; stage-0 groups of iteration begin]      (D = 1)
    for k in begin + D .. end:
        wait full[rel % S]
        groups in ``order``, each for iteration k - stage (its loads in stage (k - stage - begin) % S)
        arrive empty[(rel - D) % S]             (iteration k - D read its stage for the last time)
    [if begin < end: stage-1 groups of iteration end - 1]                  (D = 1)

so Q @ K^T of iteration k is issued before the rescale and P @ V of k - 1 and the softmax
of k; ``passes/wgmma_wait_sinking.py`` then lets each gemm run until its result is read
(``wgmma.wait_group 1`` before the softmax: P @ V stays in flight). A stage is released
only after the last group reading it ran, so the ``S``-stage ring needs ``S >= D + 1``.

The schedule is applied only when it is legal, else the loop keeps its order and the
reason is recorded in ``tl.tma``: the groups partition the body's statements, the
``-1`` groups are exactly its pipelined copies, the other groups have distinct orders
``>= 0`` and stages 0..1, the body has no bindings, and every two statement instances whose
order the schedule swaps touch no common tensor other than the pipelined tiles (each
iteration has its own stage of those). Pass config ``tl.pipeline_order = False`` ignores
the annotations.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.tirx.tensor import TensorType

from ....lowering.stmt import substitute


@dataclass
class OrderGroup:
    """One group of non-copy statements: positions in the body after the copies, its
    stage (iterations late) and its place in the steady-state body."""

    positions: list
    stage: int
    order: int


@dataclass
class OrderPlan:
    """The groups in steady-state order and the largest stage."""

    groups: list
    depth: int


def _ints(value):
    return None if value is None else [int(x) for x in value]


def plan_order(loop, rest_index, copy_index, stages, rest, tiles):
    """(OrderPlan, "") when ``loop``'s ``order``/``stage``/``group`` annotations give a legal
    schedule (module doc), else (None, reason); (None, "") without annotations.

    ``rest_index``: the original body index of each statement of ``rest`` (the body without
    its pipelined copies, in order); ``copy_index``: the original indices of those copies;
    ``tiles``: the pipelined tile Vars.
    """
    ann = loop.annotations or {}
    order = _ints(ann.get("tl_pipeline_order"))
    stage = _ints(ann.get("tl_pipeline_stage"))
    group = ann.get("tl_pipeline_group")
    if order is None and stage is None:
        return None, ""
    n = len(rest_index) + len(copy_index)
    if order is None or stage is None or len(order) != len(stage):
        return None, "order and stage must both be given, of the same length"
    groups = [[int(i)] for i in range(n)] if group is None else [_ints(g) for g in group]
    if len(groups) != len(order):
        return None, f"{len(groups)} groups for {len(order)} order/stage entries"
    flat = sorted(i for g in groups for i in g)
    if flat != list(range(n)):
        return None, f"the groups do not partition the body's {n} statements"
    where = {orig: pos for pos, orig in enumerate(rest_index)}
    out = []
    for g, o, s in zip(groups, order, stage):
        if s < 0 or o < 0:
            if not (s < 0 and o < 0) or not all(i in copy_index for i in g):
                return None, f"group {g}: stage/order -1 is only for the pipelined copies"
            continue
        if any(i in copy_index for i in g):
            return None, f"group {g}: a pipelined copy needs stage and order -1"
        if s > 1:
            return None, f"group {g}: stage {s} (only stages 0 and 1 are supported)"
        out.append(OrderGroup([where[i] for i in sorted(g)], s, o))
    orders = [g.order for g in out]
    if len(set(orders)) != len(orders):
        return None, "two groups have the same order"
    depth = max((g.stage for g in out), default=0)
    if depth + 1 > stages:
        return None, f"stage {depth} needs num_stages >= {depth + 1}"
    if any(isinstance(s, ir.Bind) for s in rest):
        return None, "the body binds names (bindings cannot move between iterations)"
    reason = _check_dependences(out, rest, tiles)
    if reason:
        return None, reason
    return OrderPlan(sorted(out, key=lambda g: g.order), depth), ""


def _tensors(node, skip) -> set:
    found = set()

    def visit(v):
        if isinstance(v.ty, TensorType) and v.__chandle__() not in skip:
            found.add(v.__chandle__())

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return found


def _check_dependences(groups, rest, tiles) -> str:
    """ "" when every pair of statement instances the schedule reorders is independent
    (shares no tensor but the pipelined tiles), else the reason."""
    skip = {t.__chandle__() for t in tiles}
    uses = [_tensors(ir.SeqStmt([rest[p] for p in g.positions]), skip) for g in groups]
    first = [min(g.positions) for g in groups]
    for a, ga in enumerate(groups):
        for b, gb in enumerate(groups):
            for d in (0, 1):  # instance (a, i) vs (b, i + d)
                before = d == 1 or (d == 0 and first[a] < first[b])
                if not before:
                    continue
                new_a, new_b = (ga.stage, ga.order), (d + gb.stage, gb.order)
                if new_a > new_b and uses[a] & uses[b]:
                    return (
                        f"groups {sorted(ga.positions)} and {sorted(gb.positions)} (body after the "
                        "copies) swap places but touch the same tensors"
                    )
    return ""


def ordered_loop(plan, loop, rest, mapping, restage, stages, wait_full, release, prove):
    """The consumer statements of the module doc: prologue, steady-state loop, epilogue.

    ``wait_full(rel)``/``release(rel)``: the statement waiting for / handing back the stage
    of iteration ``begin + rel``; ``prove(cond)``: whether ``cond`` holds.
    """
    from .pipeline_planning import _with_loop

    k, begin, end = loop.var, loop.begin, loop.end

    def inst(g, k_value, stage_index):
        body = [rest[p] for p in g.positions]
        body = ir.SeqStmt(body) if len(body) > 1 else body[0]
        if k_value is not k:
            body = substitute(body, {k: k_value})
        return restage(body, mapping, stage_index)

    rel = k - begin
    depth = plan.depth
    steady = [wait_full(rel)]
    for g in plan.groups:
        late = g.stage
        k_g = k if late == 0 else k - late
        steady.append(inst(g, k_g, (rel - late) % stages))
    steady.append(release(rel - depth))
    body = _with_loop(loop, steady)
    if depth == 0:
        return [body]
    new_loop = ir.For(
        k, begin + depth, end, body.step, body.kind, body.body, body.annotations, body.loc
    )

    def guarded(stmts):
        stmt = ir.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
        return stmt if prove(begin < end) else ir.If(begin < end, stmt, None)

    zero = ir.const(0, "int32")
    prologue = [wait_full(zero)]
    prologue += [inst(g, begin, zero) for g in plan.groups if g.stage == 0]
    last = end - 1
    epilogue = [inst(g, last, (last - begin) % stages) for g in plan.groups if g.stage == 1]
    return [guarded(prologue), new_loop, guarded(epilogue)]


__all__ = ["OrderGroup", "OrderPlan", "ordered_loop", "plan_order"]
