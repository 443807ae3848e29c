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

from tvm_tirx import ir

from ....lowering.stmt import substitute
from ....lowering.thread_utils import tensor_handles


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


def _check_dependences(groups, rest, tiles) -> str:
    """ "" when every pair of statement instances the schedule reorders is independent
    (shares no tensor but the pipelined tiles), else the reason.

    Statement ``x`` of iteration ``i`` runs originally at ``(i, x)`` and now at
    ``(i + stage, order, x)``; with stages 0..1 only instances of neighbouring iterations
    can swap, so pairs ``(x, i)``, ``(y, i + d)`` for ``d`` in 0, 1 cover every swap."""
    skip = {t.__chandle__() for t in tiles}
    placed = [(p, g.stage, g.order) for g in groups for p in g.positions]
    uses = {p: tensor_handles(rest[p], skip) for p, _, _ in placed}
    for px, sx, ox in placed:
        for py, sy, oy in placed:
            for d in (0, 1):  # instance (x, i) vs (y, i + d)
                if not (d == 1 or px < py):
                    continue
                if (sx, ox, px) > (d + sy, oy, py) and uses[px] & uses[py]:
                    return (
                        f"statements {px} and {py} of the body after the copies swap places "
                        "but touch the same tensors"
                    )
    return ""


def plan_overlap(rest, accumulator_of, stages, tiles, several_scores=True):
    """(OrderPlan, "") for the automatic overlap schedule (pass config ``tl.wgmma_overlap``),
    else (None, reason).

    The body must hold top-level asynchronous gemms ``G`` and then ``P``
    (``accumulator_of(stmt)``: the accumulator Var of a wgmma gemm, else None), where ``G``
    may be several gemms into one accumulator (MLA's scores: the latent part, then the rope
    part into the same ``acc_s``) and ``P`` is one gemm into another. Statements up to ``G``
    run first (stage 0, order 0); those between ``G`` and ``P`` that touch ``P``'s
    accumulator (FlashAttention's rescale of ``acc_o``) one iteration late (order 1), then
    ``P`` and what follows it (order 2), then the other statements between (the softmax;
    stage 0, order 3): upstream's ``wgmma_pipelined`` schedule. Dependences are checked as
    for annotated loops. ``several_scores=False`` (the pass config unset): ``G`` must be one
    gemm."""
    if stages < 2:
        return None, "needs num_stages >= 2"
    gemms = [i for i, st in enumerate(rest) if accumulator_of(st) is not None]
    accs = [accumulator_of(rest[i]).__chandle__() for i in gemms]
    lead = 1  # the gemms into the first gemm's accumulator, one after another
    while lead < len(gemms) and accs[lead] == accs[0]:
        lead += 1
    if len(gemms) - lead != 1 or len(gemms) < 2:
        return None, (
            f"{len(gemms)} wgmma gemms at the top of the body (the schedule needs gemms into "
            "one accumulator, then one gemm into another)"
        )
    if lead > 1 and not several_scores:
        return None, f"{lead} gemms into the first accumulator (tl.wgmma_overlap=True takes them)"
    g, p = gemms[lead - 1], gemms[-1]
    acc_p = {accs[-1]}
    late, soft = [], []
    for i in range(g + 1, p):
        (late if tensor_handles(rest[i]) & acc_p else soft).append(i)
    if not soft:
        return None, "nothing between the two gemms to overlap"
    if any(isinstance(st, ir.Bind) for st in rest):
        return None, "the body binds names (bindings cannot move between iterations)"
    groups = [OrderGroup(list(range(g + 1)), 0, 0)]
    if late:
        groups.append(OrderGroup(late, 1, 1))
    groups += [OrderGroup(list(range(p, len(rest))), 1, 2), OrderGroup(soft, 0, 3)]
    reason = _check_dependences(groups, rest, tiles)
    if reason:
        return None, reason
    return OrderPlan(groups, 1), ""


def ordered_loop(plan, loop, rest, mapping, restage, stages, prove, rings):
    """The consumer statements of the module doc: prologue, steady-state loop, epilogue.

    ``rings = (wait_full, release, per_tile)`` from ``warp_specialize_auto.ws_loop``:
    ``wait_full(rel, tile)`` / ``release(rel, tile)`` wait for / hand back ``tile``'s stage
    of iteration ``begin + rel``. Tile ``t`` of iteration ``j`` is waited for before its
    first reader runs and handed back after its last reader's iteration (the wgmma waits
    sink no further than an mbarrier arrive, so the reads are complete). Without
    ``per_tile`` all tiles share one ring and count as one tile. ``prove(cond)``: whether
    ``cond`` holds."""
    from .pipeline_planning import _with_loop

    wait_full, release, per_tile = rings
    # a persistent kernel's rings run on across tiles (passes/persistent_tiles.py): stage
    # buffers are indexed by the ring iteration base + rel
    base = getattr(wait_full, "ring_base", None)
    k, begin, end = loop.var, loop.begin, loop.end
    rel = k - begin
    depth = plan.depth
    tiles = list(mapping)
    handles = {t.__chandle__(): t for t in tiles}

    def rep(t):  # the ring a tile belongs to
        return t if per_tile else tiles[0]

    readers = {}  # ring tile handle -> stages of the groups reading it
    group_tiles = []
    for g in plan.groups:
        used = tensor_handles(ir.SeqStmt([rest[p] for p in g.positions]))
        mine = []
        for t in tiles:
            if t.__chandle__() in used and rep(t).__chandle__() not in [
                x.__chandle__() for x in mine
            ]:
                mine.append(rep(t))
        group_tiles.append(mine)
        for t in mine:
            readers.setdefault(t.__chandle__(), []).append(g.stage)
    first = {h: min(v) for h, v in readers.items()}
    last = {h: max(v) for h, v in readers.items()}

    def inst(g, k_value, stage_index):
        body = [rest[p] for p in g.positions]
        body = ir.SeqStmt(body) if len(body) > 1 else body[0]
        if k_value is not k:
            body = substitute(body, {k: k_value})
        return restage(body, mapping, stage_index)

    def emit(groups_here, k_of, rel_of):
        """Groups with their waits: ``k_of(g)``/``rel_of(g)``: the iteration each runs."""
        out, waited = [], set()
        for g, used in groups_here:
            for t in used:
                h = t.__chandle__()
                if first[h] == g.stage and h not in waited:
                    waited.add(h)
                    out.append(wait_full(rel_of(g), t))
            ring = rel_of(g) if base is None else base + rel_of(g)
            out.append(inst(g, k_of(g), ring % stages))
        return out

    paired = list(zip(plan.groups, group_tiles))
    steady = emit(paired, lambda g: k if g.stage == 0 else k - g.stage, lambda g: rel - g.stage)
    steady += [release(rel - last[h], handles[h]) for h in readers]
    body = _with_loop(loop, steady)
    if depth == 0:
        return [body]
    new_loop = ir.For(
        k, begin + depth, end, body.step, body.kind, body.body, body.annotations, body.loc
    )

    def guarded(stmts):
        if not stmts:
            return []
        stmt = ir.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
        return [stmt if prove(begin < end) else ir.If(begin < end, stmt, None)]

    zero, end_rel = ir.const(0, "int32"), end - 1 - begin
    early = [(g, t) for g, t in paired if g.stage == 0]
    prologue = emit(early, lambda g: begin, lambda g: zero)
    prologue += [release(zero, handles[h]) for h in readers if last[h] == 0]
    late = [(g, t) for g, t in paired if g.stage == 1]
    epilogue = emit(late, lambda g: end - 1, lambda g: end_rel)
    if base is not None:  # the next tile reuses the stages: the last late-read ones back too
        epilogue += [release(end_rel, handles[h]) for h in readers if last[h] == 1]
    return [*guarded(prologue), new_loop, *guarded(epilogue)]


__all__ = ["OrderGroup", "OrderPlan", "ordered_loop", "plan_order", "plan_overlap"]
