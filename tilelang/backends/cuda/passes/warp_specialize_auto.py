"""Automatic warp specialization (CUDA sm_90a): a TMA-pipelined loop split into a producer
warpgroup and the block's own threads as consumers.

Called by :mod:`.pipeline_planning` (through ``tma_lowering.tma_loop``) for the kernel's one
``T.Pipelined`` loop when every copy of it uses TMA, and applied to the whole kernel by
:func:`split_kernel`. With ``T`` the block's threads (``threads=`` of ``T.Kernel``), ``S``
stages, ``rel = k - begin`` and two mbarrier rings, ``full[S]`` (arrival count 1: the
producer's ``arrive.expect_tx``, completed by the TMA bytes) and ``empty[S]`` (arrival count
``T``: every consumer thread hands the stage back)::

    launch T + 128 threads
    [binds before the loop]                        (every thread: block indices, allocations)
    __syncthreads(); if tx == 0: init full[s] (1), empty[s] (T); fence; __syncthreads()
    if tx < T:                                     consumers: the user's program
        setmaxnreg.inc R_c                         (T + 128 >= 384 only)
        [statements before the loop]
        [fence.proxy.async]                        (with wgmma: operands written before)
        for k: wait(full[rel % S], (rel / S) & 1)
               body (reads stage rel % S)
               [fence.proxy.async]                             (generic-proxy reads)
               arrive(empty[rel % S])                          (body's reads are done)
           or, with one wgmma group kept in flight (pipeline_planning):
               body (wgmma ...; wgmma.wait_group 1)
               if rel > 0: arrive(empty[(rel - 1) % S])        (iteration k-1's wgmma done)
        [wgmma.wait_group 0]; [statements after the loop]
    else:                                          the producer warpgroup
        setmaxnreg.dec R_p
        if tx == T: for k: wait(empty[rel % S], ((rel / S) & 1) ^ 1)
                           arrive.expect_tx(full[rel % S], bytes); TMA boxes -> stage rel % S

Stage ``s`` serves iterations ``s, s + S, ...``: the n-th completion of ``full[s]`` is the
load of iteration ``s + n S`` (the producer issues it only after ``empty[s]`` completed its
(n-1)-th phase, i.e. after every consumer released iteration ``s + (n-1) S``), hence the
parities; a fresh mbarrier reports the phase before its first as complete, so the
producer's first ``S`` waits return at once. Barriers among the consumers are named
barriers over ``T`` threads (:func:`consumer_barriers`): ``__syncthreads`` would wait for
the producer, which never reaches it.

Conditions (else the loop keeps the non-specialized TMA schedule, or cp.async when TMA was
not asked for explicitly): it is the kernel's only pipelined loop and a top-level statement
of the kernel body; the body has a wgmma or mma.sync gemm and no explicit Hopper ops;
``T`` is a multiple of 128;
the producer's copies depend only on block indices, parameters and binds before the loop
that read no tensor. The pass config ``tl.disable_warp_specialized`` turns it off.

The release (``ws_stage_reads.stage_release``): stages read only by wgmma gemms (or by
element loads whose values feed one) are handed back after the wgmma's wait. Stages read
through the generic proxy (ldmatrix for an mma.sync gemm or a fragment, element loads, a
``T.copy``) get ``fence.proxy.async.shared::cta`` before each arrive: without it ptxas
issued the arrive right after the ldmatrix calls, before the mmas that consumed them, and
the producer's next TMA load overwrote the rows the last ldmatrix calls were still reading
(H200, session 5).

With ``tl.persistent_tiles`` (:mod:`.persistent_tiles`) ``rel`` is ``base + k - begin``,
``base`` counting the iterations of the block's earlier tiles, and the consumers also hand
back the tile's last stage after the drain: the rings run on from tile to tile.

With ``tl.cluster_multicast`` the producer multicasts the tiles the blocks of a cluster
share, ``empty[s]`` counts the consumer warps of every block of the cluster (remote
arrivals), and cluster barriers follow the initialisation and end the kernel
(:mod:`.cluster_multicast`).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir, tirx

from ....lowering.stmt import (
    alloc_of,
    bound_vars,
    first_stmt,
    flatten_seq,
    launches_of,
    substitute,
    with_launch_body,
)
from ....lowering.thread_utils import extern_name, i32, is_shared, is_sync, new_tensor
from ....lowering.thread_utils import extern_stmt as _call
from .pipeline_copies import read_only

#: Marker call opening the consumer branch (found by :func:`consumer_barriers`).
CONSUMER_MARKER = "tl::ws_auto_consumer"
#: Named barrier id the consumers synchronise on (0 is ``__syncthreads``).
CONSUMER_BARRIER_ID = 1
PRODUCER_THREADS = 128


@dataclass
class WsParts:
    """What the planner hands :func:`split_kernel` for the specialized loop."""

    init: list  # mbarrier initialisation (run by thread 0 of the whole block)
    producer: ir.Stmt
    consumer: ir.Stmt  # replaces the loop in the kernel body
    threads: int
    cluster: int = 1  # blocks per cluster sharing TMA loads (cluster_multicast.py)
    cluster_sync: str = "cta"  # tl.cluster_multicast_sync (cluster_multicast.py)


def consumer_barrier(threads):
    """``bar.sync 1, threads``: the consumer threads' barrier (``__syncthreads`` would wait
    for the producer warpgroup, which never reaches it)."""
    return _call("tl::named_barrier_sync", _u32(CONSUMER_BARRIER_ID), _u32(int(threads)))


def _u32(x):
    return ir.const(int(x), "uint32")


def candidate_loop(body):
    """The loop Var of the kernel's only ``T.Pipelined`` loop when it is a top-level statement
    of the innermost launch body, else None."""
    _, inner = launches_of(body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    pipelined = []

    def visit(f):
        if "num_stages" in (f.annotations or {}):
            pipelined.append(f)

    tvm_ffi.structural_walk(body, [(ir.For, visit)])
    if len(pipelined) != 1:
        return None
    loop = pipelined[0]
    if not any(isinstance(s, ir.For) and s.same_as(loop) for s in stmts):
        return None
    return loop.var


def ws_loop(
    planner,
    loop,
    stages,
    tma,
    mapping,
    total,
    body_rest,
    in_flight,
    fence,
    issue_copy,
    ordered=None,
    fenced_release=False,
):
    """The :class:`WsParts` of ``loop`` (module doc), or None when the producer would need a
    value only the consumers compute. ``ordered(wait_full, release, per_tile)``: the
    consumer's loop statements for ``T.Pipelined(order=, stage=)``
    (``passes/pipeline_order.py``); ``wait_full(rel, tile)`` / ``release(rel, tile)`` wait
    for / hand back the stage of ``tile`` for iteration ``begin + rel`` (one ring per tile
    when ``per_tile``, else one ring for all). ``fenced_release``: the body reads the stages
    through the generic proxy (``ws_stage_reads.stage_release``): each consumer thread runs
    ``fence.proxy.async.shared::cta`` before every release."""
    pctx = planner.pctx
    threads = int(planner.threads)
    tx = planner.tx
    k, begin, end = loop.var, loop.begin, loop.end
    from .persistent_tiles import ring_base

    # a persistent kernel's rings run on across tiles: iteration k of the tile is ring
    # iteration base + k - begin (passes/persistent_tiles.py)
    base = ring_base(planner, loop, ordered)
    rel_tile = k - begin
    rel = rel_tile if base is None else base + rel_tile
    name = loop.var.name
    from . import cluster_multicast as cm
    from .pipeline_planning import _with_loop, make_alloc

    def ptr(bar, stage):
        return tirx.address_of(ir.TensorLoad(bar, [i32(stage)]))

    maps_before, cluster_before = list(pctx.tma_maps), cm.cluster_shape(pctx)
    notes_before = len(pctx.tma_notes)
    mc = cm.plan_multicast(planner, loop, tma)  # TMA multicast in a cluster, or None
    rank, rank_bind = cm.rank_bind() if mc is not None else (None, None)
    # consumer releases of a stage: every thread (one per warp with
    # tl.ws_release_per_warp), or with multicast one per warp of every block of the cluster
    # (the peers' TMA writes into this block's stage too)
    per_warp = mc is None and pctx.options.get("ws_release_per_warp", False)
    releases = threads if mc is None and not per_warp else threads // 32 * (mc.size if mc else 1)

    def release_stage(bar_ptr):
        if per_warp:  # (a __syncwarp orders every lane's fence before the warp's arrival)
            arrive = _call("tl::mbarrier_arrive_warp", bar_ptr)
        elif mc is None:
            arrive = _call("tl::mbarrier_arrive", bar_ptr)
        else:  # (a __syncwarp orders every lane's fence before the warp's arrivals)
            arrive = _call(cm.release_call(mc), bar_ptr)
        if not fenced_release:
            return arrive
        return ir.SeqStmt([_call("tl::fence_proxy_async_shared"), arrive])

    # one full/empty ring for all copies; with an ordered consumer one ring per copy, so
    # each tile is handed back as soon as its last reader is done (``pipeline_order.py``)
    per_copy = ordered is not None and len(tma) > 1
    ring_copies = [[t] for t in tma] if per_copy else [list(tma)]
    rings = []
    for r, copies in enumerate(ring_copies):
        suffix = f"_{r}" if per_copy else ""
        full_r = new_tensor(f"tma_full_{name}{suffix}", [stages], "uint64", "shared.dyn")
        empty_r = new_tensor(f"tma_empty_{name}{suffix}", [stages], "uint64", "shared.dyn")
        rings.append((full_r, empty_r, copies, copies[0].bytes if per_copy else total))
    full, empty = rings[0][0], rings[0][1]

    init = []
    for s in range(stages):
        for full_r, empty_r, _, _ in rings:
            init.append(_call("tl::mbarrier_init", ptr(full_r, s), _u32(1)))
            init.append(_call("tl::mbarrier_init", ptr(empty_r, s), _u32(releases)))
    init.append(_call("tl::mbarrier_init_fence"))

    stage = rel % stages
    phase = ir.prim.floordiv(rel, stages) % 2
    wait_empty = "tl::mbarrier_wait" if mc is None else cm.empty_wait_call(mc)
    load = []
    for full_r, empty_r, copies, nbytes in rings:
        parity = ir.prim.BitwiseXor(phase, ir.const(1, "int32"))
        load.append(_call(wait_empty, ptr(empty_r, stage), parity))
        load.append(_call("tl::mbarrier_arrive_expect_tx", ptr(full_r, stage), _u32(nbytes)))
        for t in copies:
            if mc is not None and id(t) in mc.shared:
                load += cm.issue_multicast(
                    mc, t, mapping[t.dst.tensor], stage, k, k, ptr(full_r, stage), rank
                )
            else:
                load += issue_copy(t, mapping[t.dst.tensor], stage, k, k, ptr(full_r, stage))
    # the producer's own loop variable (a Var is bound by one loop only)
    kp = ir.Var(f"{name}_load", k.ty)
    load = [substitute(x, {k: kp}) for x in load]
    producer_loop = _with_loop(loop, load)
    producer_loop = ir.For(
        kp,
        begin,
        end,
        loop.step,
        producer_loop.kind,
        producer_loop.body,
        producer_loop.annotations,
        loop.loc,
    )
    if not _only_free(producer_loop, planner.ws_forbidden):
        pctx.tma_maps[:], pctx.cluster_dims = maps_before, cluster_before
        del pctx.tma_notes[notes_before:]
        return None
    # TMA writes and wgmma reads are both async-proxy accesses: the fence (each thread's
    # generic writes of shared operands, e.g. a Q tile copied before the loop, ordered
    # before the wgmmas) is needed once, before the loop, not in every iteration
    turns_before, turns_after = [], []
    if ordered is None:
        body_rest, turns_before, turns_after = _pingpong(planner, body_rest, threads)
    consumer = [_call("tl::mbarrier_wait", ptr(full, stage), phase), body_rest]
    after = []
    if ordered is not None:
        ring_of = {t.dst.tensor.__chandle__(): ring for ring in rings for t in ring[2]}

        def shift(r):  # the ring iteration of the tile's iteration begin + r
            return r if base is None else base + r

        def wait_full(r, tile):
            bar, r = ring_of[tile.__chandle__()][0], shift(r)
            return _call("tl::mbarrier_wait", ptr(bar, r % stages), ir.prim.floordiv(r, stages) % 2)

        def release(r, tile):
            return release_stage(ptr(ring_of[tile.__chandle__()][1], shift(r) % stages))

        # (persistent: ordered_loop offsets its stage indices too, and hands the last
        # iteration's late-read stages back)
        wait_full.ring_base = base
        loop_stmts = ordered(wait_full, release, per_copy)
        loop_stmts, turns_before, turns_after = _ordered_turns(planner, loop_stmts, threads)
    elif in_flight is not None:
        rule, reader = in_flight
        prev = ptr(empty, (rel + stages - 1) % stages)
        consumer.append(ir.If(rel_tile > 0, release_stage(prev), None))
        after = rule.drain(pctx, reader)
        if base is not None:  # the tile's last stage, handed back once its wgmma is done
            last = ptr(empty, (base + (end - begin) + stages - 1) % stages)
            static = isinstance(end, ir.IntImm) and isinstance(begin, ir.IntImm)
            if static and int(end) > int(begin):
                after = [*after, release_stage(last)]
            elif not static:
                after = [*after, ir.If(end > begin, release_stage(last), None)]
    else:
        consumer.append(release_stage(ptr(empty, stage)))
    if ordered is None:
        loop_stmts = [_with_loop(loop, consumer)]
    pctx.extra_allocs += [make_alloc(bar) for ring in rings for bar in ring[:2]]
    if rank_bind is not None:
        producer_loop = ir.SeqStmt([rank_bind, producer_loop])
    producer = ir.If(tx == threads, producer_loop, None)
    consumer_stmt = ir.SeqStmt([*fence, *turns_before, *loop_stmts, *after, *turns_after])
    if mc is not None and mc.early_exit_arrive:
        # each thread arrives on the closing cluster barrier once its loop is done: the
        # consumers' last remote arrival precedes it, the epilogue overlaps the peers
        producer = ir.SeqStmt([producer, _call("tl::cluster_arrive")])
        consumer_stmt = ir.SeqStmt([consumer_stmt, _call("tl::cluster_arrive")])
    pctx.tma_notes.append(
        f"loop {name}: warp-specialized (producer warpgroup: threads {threads}.."
        f"{threads + PRODUCER_THREADS - 1}, {stages}-stage full/empty mbarrier rings"
        + ("; one release per consumer warp" if per_warp else "")
        + (
            "; generic-proxy stage reads: fence.proxy.async before each release)"
            if fenced_release
            else ")"
        )
    )
    return WsParts(
        init,
        producer,
        consumer_stmt,
        threads,
        1 if mc is None else mc.size,
        "cta" if mc is None else mc.sync,
    )


#: Named barrier of the first ping-pong turn: warpgroup ``w`` waits on ``FIRST + w`` (id 1
#: is the consumers' barrier, :data:`CONSUMER_BARRIER_ID`; hardware ids end at 15).
PINGPONG_FIRST_BARRIER = 2
#: Turn barriers of the ping-pong inside an ordered loop: ``bar.sync`` / ``bar.arrive`` that
#: order only when the warpgroups issue their gemms (no data), so a wgmma wait may sink past
#: them (``wgmma_wait_sinking``).
TURN_WAIT, TURN_ARRIVE = "tl::ws_turn_wait", "tl::ws_turn_arrive"


@dataclass
class _Turns:
    """The round robin of the consumer warpgroups' turns: warpgroup ``w`` waits on ``mine``
    (named barrier ``2 + w``) and hands over with ``bar.arrive`` on ``nxt`` (``2 + (w + 1) %
    W``; ``3 - w`` for two); each barrier counts the two warpgroups that meet on it. Warpgroup
    0 takes the first turn: warpgroup ``W - 1`` arrives on its barrier before the loop
    (``opener``) and warpgroup 0 takes the last arrival after it (``closer``)."""

    warpgroups: int
    mine: ir.PrimExpr
    nxt: ir.PrimExpr
    count: ir.PrimExpr
    opener: ir.PrimExpr  # the condition of the first hand-over (warpgroup W - 1)
    closer: ir.PrimExpr  # the condition of the last wait (warpgroup 0)
    first: ir.PrimExpr  # warpgroup 0's barrier id

    @property
    def note(self):
        more = "" if self.warpgroups == 2 else f", {self.warpgroups} warpgroups round robin"
        return f"tl.ws_pingpong{more}"

    def open(self, arrive):
        return [ir.If(self.opener, _call(arrive, self.first, self.count), None)]

    def close(self, wait):
        return [ir.If(self.closer, _call(wait, self.first, self.count), None)]


def _turns(planner, threads):
    """The :class:`_Turns` of ``threads`` consumer threads when they form 2 or more whole
    warpgroups whose barrier ids clash with no named barrier the kernel uses; else None
    (with a note when the ids clash). The callers check ``tl.ws_pingpong``."""
    pctx = planner.pctx
    if threads % 128 or threads < 256:
        return None
    w = threads // 128
    first = PINGPONG_FIRST_BARRIER
    ids = set(range(first, first + w))
    used = _named_barrier_ids(planner.root)
    if max(ids) > 15 or used is None or used & ids:
        pctx.tma_notes.append(
            f"no ping-pong turns (tl.ws_pingpong): {w} consumer warpgroups need named barriers "
            f"{sorted(ids)}, "
            + (
                "past the hardware's 16"
                if max(ids) > 15
                else "which the kernel's own barriers may use"
            )
        )
        return None
    wg = ir.prim.floordiv(planner.tx, 128)
    mine = ir.prim.Add(ir.const(first, "int32"), wg)
    if w == 2:
        nxt = ir.prim.Sub(ir.const(first + 1, "int32"), wg)
    else:
        nxt = ir.prim.Add(
            ir.const(first, "int32"),
            ir.prim.floormod(ir.prim.Add(wg, ir.const(1, "int32")), ir.const(w, "int32")),
        )
    return _Turns(w, mine, nxt, _u32(2 * 128), wg == w - 1, wg == 0, ir.const(first, "int32"))


def _named_barrier_ids(root):
    """The constant ids of the named barriers ``root`` uses (``T.named_barrier_*`` or their
    lowered calls), or None when one is not a constant."""
    ids = set()
    unknown = []

    def visit(call):
        name = extern_name(call)
        if name in ("tl::named_barrier_sync", "tl::named_barrier_arrive"):
            arg = call.args[1] if len(call.args) > 1 else None
        elif getattr(call.op, "name", "") in ("tl.named_barrier_sync", "tl.named_barrier_arrive"):
            arg = call.args[0] if call.args else None
        else:
            return
        if isinstance(arg, ir.IntImm):
            ids.add(int(arg.value))
        else:
            unknown.append(call)

    if root is not None:
        tvm_ffi.structural_walk(root, [(ir.Call, visit)])
    return None if unknown else ids


def _pingpong(planner, body, threads):
    """(body, before the loop, after the loop) with the consumer warpgroups taking turns at
    issuing the body's first gemm (pass config ``tl.ws_pingpong``), round robin
    (:class:`_Turns`): warpgroup ``w`` waits on named barrier ``2 + w``, issues the gemm, lets
    the next warpgroup go (``bar.arrive`` on its barrier), then waits for its own gemm.
    Warpgroup ``W - 1`` gives warpgroup 0 the first turn before the loop; warpgroup 0 takes
    the last arrival after it, so every barrier ends balanced. Applies when
    ``tl.ws_pingpong`` is True, to 256 or more consumer threads (whole warpgroups) and a
    body with exactly two wgmma gemms whose first reads both operands from shared memory;
    else unchanged."""
    pctx = planner.pctx
    if pctx.options.get("ws_pingpong") is not True:
        return body, [], []
    stmts = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
    readers = [(i, planner._reader_of(s)) for i, s in enumerate(stmts)]
    readers = [(i, r) for i, r in readers if r is not None]
    if len(readers) != 2:
        return body, [], []
    at, (rule, reader) = readers[0]
    if getattr(reader, "a_in_regs", True):
        return body, [], []
    turns = _turns(planner, threads)
    if turns is None:
        return body, [], []
    turn = [
        _call("tl::named_barrier_sync", turns.mine, turns.count),
        rule.mark(stmts[at], defer_wait=True),
        _call("tl::named_barrier_arrive", turns.nxt, turns.count),
        *rule.wait(pctx, reader, 0),
    ]
    before = turns.open("tl::named_barrier_arrive")
    after = turns.close("tl::named_barrier_sync")
    pctx.tma_notes.append(f"consumer warpgroups take turns at the first gemm ({turns.note})")
    return ir.SeqStmt(stmts[:at] + turn + stmts[at + 1 :]), before, after


def _ordered_turns(planner, loop_stmts, threads):
    """(loop statements, before, after) with the consumer warpgroups taking turns at
    issuing the steady-state loop's gemms (pass config ``tl.ws_pingpong``, FlashAttention-3's
    scheduler barrier in its intra-warpgroup overlapped loop), round robin
    (:class:`_Turns`): warpgroup ``w`` waits for its turn (named barrier ``2 + w``) right
    before the body's first gemm and hands the turn over (``bar.arrive`` on the next one's
    barrier) right after its last, so one warpgroup's softmax runs while another's Q @ K^T
    and P @ V keep the tensor cores busy. The gemms' waits sink past the turn barriers
    (they carry no data). Warpgroup ``W - 1`` gives warpgroup 0 the first turn before the
    consumer loop; warpgroup 0 takes the last arrival after it, so each barrier ends
    balanced (every warpgroup runs the same iterations: the loop bounds are block-uniform).
    Applies to 256 or more consumer threads (whole warpgroups) and a loop body with two or
    more gemms at its top level, unless ``tl.ws_pingpong`` is False; else unchanged."""
    pctx = planner.pctx
    if pctx.options.get("ws_pingpong") is False:  # on unless turned off
        return loop_stmts, [], []
    at = [i for i, s in enumerate(loop_stmts) if isinstance(s, ir.For)]
    if len(at) != 1:
        return loop_stmts, [], []
    loop = loop_stmts[at[0]]
    stmts = flatten_seq(loop.body)
    gemms = [i for i, s in enumerate(stmts) if planner._reader_of(s) is not None]
    if len(gemms) < 2:
        return loop_stmts, [], []
    first, last = gemms[0], gemms[-1]
    shared = _shared_across(stmts[first : last + 1], stmts[:first] + stmts[last + 1 :])
    if shared:
        pctx.tma_notes.append(
            "no ping-pong turns (tl.ws_pingpong): the gemms' turn would span a consumer "
            f"barrier (shared {', '.join(sorted(shared))} also used outside it)"
        )
        return loop_stmts, [], []
    turns = _turns(planner, threads)
    if turns is None:
        return loop_stmts, [], []
    body = [
        *stmts[:first],
        _call(TURN_WAIT, turns.mine, turns.count),
        *stmts[first : last + 1],
        _call(TURN_ARRIVE, turns.nxt, turns.count),
        *stmts[last + 1 :],
    ]
    new_loop = ir.For(
        loop.var,
        loop.begin,
        loop.end,
        loop.step,
        loop.kind,
        ir.SeqStmt(body),
        loop.annotations,
        loop.loc,
    )
    pctx.tma_notes.append(
        f"consumer warpgroups take turns at the ordered loop's gemms ({turns.note})"
    )
    out = list(loop_stmts)
    out[at[0]] = new_loop
    return out, turns.open(TURN_ARRIVE), turns.close(TURN_WAIT)


def _shared_across(inside, outside) -> set:
    """Names of the shared tensors that statements ``inside`` a turn span and statements
    ``outside`` it both name (MLA's ``S_shared``: written by the softmax, read by ``P @ V``).
    The consumers' barrier that orders those accesses would fall inside the span, where one
    warpgroup holds the turn while the others wait for it: a deadlock (the stage tiles that
    the producer fills are not named outside their readers)."""
    found = {}

    def collect(node, into):
        def visit(v):
            if is_shared(v):
                into[v.__chandle__()] = v.name

        tvm_ffi.structural_walk(node, [(ir.Var, visit)])

    ins, outs = {}, {}
    for stmt in inside:
        collect(stmt, ins)
    for stmt in outside:
        collect(stmt, outs)
    for handle, name in ins.items():
        if handle in outs:
            found[handle] = name
    return set(found.values())


def _bound_vars(node) -> set:
    """Handles of the Vars that binds and loops inside ``node`` bind."""
    return {v.__chandle__() for v in bound_vars(node)}


def _only_free(node, forbidden) -> bool:
    """Whether ``node`` reads none of the ``forbidden`` Var handles outside its own binds
    and loops."""
    bound = _bound_vars(node)
    bad = []

    def var(v):
        h = v.__chandle__()
        if h in forbidden and h not in bound:
            bad.append(v)

    tvm_ffi.structural_walk(node, [(ir.Var, var)])
    return not bad


def consumer_scalars(body):
    """Handles of the scalar Vars the producer may not read: those bound in the kernel body
    (binds, loops) except the binds before its first other statement whose values read no
    tensor but read-only ones (block-index arithmetic such as ``T.use_swizzle``'s, a
    sequence length read from an input)."""
    _, inner = launches_of(body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    ok = set()
    for s in stmts:
        if not isinstance(s, ir.Bind):
            break
        loads = []
        tvm_ffi.structural_walk(s.value, [(ir.TensorLoad, loads.append)])
        # elements of a tensor nothing in the kernel writes (a sequence length) read the
        # same in the producer
        if all(read_only(inner, x.source) for x in loads):
            ok.add(s.var.__chandle__())
    return _bound_vars(inner) - ok


def split_kernel(body, parts: WsParts, regs):
    """``body`` (the kernel after planning, ``parts.consumer`` in place of the loop) as the
    producer/consumer split of the module doc; the thread launch grows by 128 threads."""
    threads = parts.threads
    launches, inner = launches_of(body)
    tx = next(var for tag, _, var in launches if tag == "threadIdx.x")
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    lead = []
    for s in stmts:
        if not isinstance(s, ir.Bind):
            break
        lead.append(s)
    rest = stmts[len(lead) :]
    # allocations stay at the kernel's top level (shared tiles must, and a Bind of an
    # allocation reads nothing): those among the later statements move up too
    lead += [s for s in rest if alloc_of(s) is not None]
    rest = [s for s in rest if alloc_of(s) is None]
    sync = _call("__syncthreads")
    # in a cluster, peers multicast into this block's tiles and arrive on its barriers:
    # the initialised barriers are published to the cluster before, and no block exits
    # while a peer may still use them after (cluster_multicast.py)
    from .cluster_multicast import closing_barrier, publishing_barrier

    published = publishing_barrier(parts.cluster_sync) if parts.cluster > 1 else [sync]
    init = [sync, ir.If(tx == 0, ir.SeqStmt(parts.init), None), *published]
    consumer = [_call(CONSUMER_MARKER)]
    producer = []
    if regs is not None:
        consumer.append(_call(f"tl::set_max_nreg<{regs[0]}, 1>"))
        producer.append(_call(f"tl::set_max_nreg<{regs[1]}, 0>"))
    consumer += rest
    producer.append(parts.producer)
    split = ir.If(tx < threads, ir.SeqStmt(consumer), ir.SeqStmt(producer))
    tail = closing_barrier(parts.cluster_sync) if parts.cluster > 1 else []
    new_inner = ir.SeqStmt([*lead, *init, split, *tail])
    return with_launch_body(body, new_inner, threads + PRODUCER_THREADS)


def register_split(threads: int):
    """(consumer, producer) register counts for ``setmaxnreg``, or None when the block is
    small enough that every thread may already hold the maximum (``threads + 128 < 384``).
    Measured on the H200 (session 5): two resident blocks of 128 + 128 threads with 216/40
    registers ran the 128x128 GEMM slower (0.87-0.89x torch) than one block without
    ``setmaxnreg`` (0.92-0.96x), and FlashAttention the same.

    The producer keeps 24 registers (FlashAttention-3's split for two consumer warpgroups,
    240/24): at 232 (producer 40) ptxas serialized the wgmmas of the FlashAttention backward
    (warning C7512, 116 bytes spilled); at 240 it does not (76 bytes of loop-invariant
    addresses spilled). The producer loop only computes TMA coordinates."""
    total = threads + PRODUCER_THREADS
    if total < 384:
        return None
    producer = 24
    consumer = min(240, (65536 - PRODUCER_THREADS * producer) // threads // 8 * 8)
    return consumer, producer


# ------------------------------------------------------------------- after tile lowering
def _is_marker(stmt) -> bool:
    return extern_name(stmt) == CONSUMER_MARKER


def consumer_barriers(body, thread_var, insert_sync):
    """``body`` with the consumer branch synchronised on its own: ``insert_sync`` run over
    the branch alone, its ``__syncthreads`` (inserted or emitted by tile-op rules) turned
    into ``bar.sync 1, T``, and the marker removed. Bodies without the split are returned
    unchanged (``None`` as the second value), else the thread count ``T``."""
    launches, inner = launches_of(body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    at = [
        i
        for i, s in enumerate(stmts)
        if isinstance(s, ir.If) and s.else_case is not None and _is_marker(first_stmt(s.then_case))
    ]
    if not at:
        return body, None
    split = stmts[at[0]]
    threads = int(split.condition.b.value)
    branch = insert_sync(_drop_marker(split.then_case), thread_var)
    named = consumer_barrier(threads)

    def sync(e):
        return named if is_sync(e) else e

    branch = tvm_ffi.structural_map(branch, [(ir.Evaluate, sync)])
    stmts[at[0]] = ir.If(split.condition, branch, split.else_case, split.loc)
    return with_launch_body(body, ir.SeqStmt(stmts)), threads


def _drop_marker(stmt):
    seq = list(stmt.seq) if isinstance(stmt, ir.SeqStmt) else [stmt]
    seq = [s for s in seq if not _is_marker(s)]
    return seq[0] if len(seq) == 1 else ir.SeqStmt(seq)


__all__ = [
    "CONSUMER_MARKER",
    "WsParts",
    "candidate_loop",
    "consumer_barrier",
    "consumer_barriers",
    "consumer_scalars",
    "register_split",
    "split_kernel",
    "ws_loop",
]
