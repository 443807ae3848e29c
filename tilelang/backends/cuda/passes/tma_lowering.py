"""TMA pipelining (CUDA sm_90+): a ``T.Pipelined`` loop's copies as bulk tensor copies.

Called by :mod:`.pipeline_planning` for a loop whose leading copies (and hoisted later
copies) all pass :func:`tilelang.backends.cuda.tensor_map.plan_tma_copy`; otherwise (or
with the pass config ``tl.disable_tma_lower``) the loop keeps cp.async. Every decision
is recorded in the function attribute ``tl.tma`` (one line per copy, with the reason when
a loop stays on cp.async).

Schedule, with ``S`` stages, ``A = S-1`` copies ahead (``S-2`` with a wgmma group in
flight, see pipeline_planning), ``rel = k - begin``, one mbarrier ``bar[s]`` per stage
(arrival count 1) and ``elected = threadIdx.x == 0``::

    prologue: __syncthreads()                       (earlier users of the barriers done)
              if elected: mbarrier_init(bar[s], 1) for every s; fence.mbarrier_init
              __syncthreads()
              for s < A: if begin + s < end and elected: issue(begin + s) -> stage s
    loop k:   mbarrier_wait(bar[rel % S], (rel / S) & 1)
              [fence.proxy.async with wgmma or generic reads]; __syncthreads()
              if k + A < end and elected: issue(k + A) -> stage (rel + A) % S
              rest of the body (reads stage rel % S)
    issue(j) -> s: mbarrier_arrive_expect_tx(bar[s], bytes of all boxes)
                   tma_load(box) -> X_mb[s] + box offset, completing on bar[s]  (each box)

Stage ``s`` is loaded for iterations ``s, s+S, s+2S, ...`` in that order, each load issued
after the previous one's wait (``A <= S-1``), so phase ``n`` of ``bar[s]`` is the n-th load
and its parity is ``(rel / S) & 1``. The barrier after the wait gives the same guarantee
as the cp.async schedule: every thread finished iteration ``k-1`` (which read the stage
refilled now; with a wgmma group in flight, iteration ``k-2``'s reads are complete after
iteration ``k-1``'s ``wgmma.wait_group 1``). ``S == 1``: issue, wait, barrier, body,
barrier. The TMA writes are complete and visible to a thread once its wait returned;
wgmma reads them through the async proxy like TMA writes them (the fence stays for
shared operands written by ordinary stores, see pipeline_planning's ``tl_wgmma_fenced``).
Stages read through the generic proxy (ldmatrix, element loads: ``ws_stage_reads``) are
fenced before the barrier that precedes the TMA write refilling them (after the body too
with ``S == 1``).
"""

from __future__ import annotations

import re

from tvm_tirx import ir, tirx

from ....lowering.thread_utils import extern_stmt as _call
from ....lowering.thread_utils import i32, new_tensor
from ..tensor_map import TmaCopy, plan_tma_copy


def tma_supported(arch: str, options: dict) -> bool:
    """Whether TMA lowering is on for ``arch`` (sm_90 and later) and the pass configs."""
    m = re.match(r"sm_(\d+)", arch or "")
    return bool(m) and int(m.group(1)) >= 90 and options.get("disable_tma") is not True


def plan_tma_copies(copies, pctx, loop_name: str):
    """The :class:`TmaCopy` of every copy (AsyncCopy list), or None (and a note why not)."""
    out = []
    for c in copies:
        plan = plan_tma_copy(c.view, pctx, pctx)
        if isinstance(plan, str):
            pctx.tma_notes.append(
                f"loop {loop_name}: cp.async ({c.src.name} -> {c.dst.name}: {plan})"
            )
            return None
        out.append(plan)
    return out


def shared_map(pctx, spec):
    """The tensor map shared by every copy with the same tensor, box and swizzle."""
    for known in pctx.tma_maps:
        if known.key() == spec.key():
            return known
    pctx.tma_maps.append(spec)
    return spec


def tma_loop(
    planner, loop, ctx, stages, copies, rest, mapping, in_flight, fence, restage, ordered=None
):
    """The TMA schedule of ``loop`` (module doc), or None when a copy cannot use TMA.

    ``copies``: the loop's pipelined AsyncCopy list; ``rest``: the other statements of the
    body (wgmma marks applied); ``mapping``: tile -> multi-buffered tile; ``restage``:
    pipeline_planning's ``_restage``; ``ordered``: the consumer loop of ``T.Pipelined(order=,
    stage=)`` (``passes/pipeline_order.py``), honored when the loop is warp-specialized.
    """
    from .pipeline_planning import _with_loop

    pctx = planner.pctx
    if not tma_supported(pctx.arch, pctx.options) or planner.tx is None:
        return None
    # warp specialization for tensor-core loops; how a consumer hands a stage back depends
    # on who reads it (``fence`` is non-empty exactly when there is a wgmma; ws_stage_reads)
    from .ws_stage_reads import RELEASE_FENCED, stage_release

    release = stage_release(planner, rest, mapping, bool(fence), pctx.arch)
    ws_wanted = (
        planner.ws_loop is not None and planner.ws_loop.same_as(loop.var) and release is not None
    )
    auto = pctx.options.get("disable_tma") is None  # TMA only with warp specialization
    if auto and not ws_wanted:
        pctx.tma_notes.append(
            f"loop {loop.var.name}: cp.async (TMA only where the loop is warp-specialized: "
            "one pipelined loop at the kernel's top level with a wgmma gemm, or an mma.sync "
            "gemm on sm_90/sm_90a, no explicit Hopper ops, threads a multiple of 128; "
            "tl.disable_tma_lower=False forces TMA)"
        )
        return None
    if release == RELEASE_FENCED and not fence:  # generic reads before the next TMA write
        from .pipeline_planning import fence_proxy_async

        fence = [fence_proxy_async()]
    n_maps, n_notes = len(pctx.tma_maps), len(pctx.tma_notes)
    tma = plan_tma_copies(copies, pctx, loop.var.name)
    if tma is None:
        return None
    for t in tma:
        t.spec = shared_map(pctx, t.spec)
        pctx.tma_notes.append(f"loop {loop.var.name}: {t.describe()}")
    k, begin, end = loop.var, loop.begin, loop.end
    rel = k - begin
    tx = planner.tx
    total = sum(t.bytes for t in tma)
    if ws_wanted:
        from .persistent_tiles import ring_base
        from .warp_specialize_auto import ws_loop

        base = ring_base(planner, loop, ordered)  # tl.persistent_tiles: rings span tiles
        ring = rel if base is None else base + rel
        body_rest = restage(ir.SeqStmt(rest) if len(rest) > 1 else rest[0], mapping, ring % stages)
        parts = ws_loop(
            planner,
            loop,
            stages,
            tma,
            mapping,
            total,
            body_rest,
            in_flight,
            fence,
            _issue_copy,
            ordered=ordered,
            fenced_release=release == RELEASE_FENCED,
        )
        if parts is not None:
            planner.ws_parts = parts
            return parts.consumer
        note = (
            f"loop {loop.var.name}: not warp-specialized (the copies read values the loop's "
            "threads compute)"
        )
        if auto:  # back to cp.async: forget the maps planned for this loop
            del pctx.tma_maps[n_maps:]
            del pctx.tma_notes[n_notes:]
            pctx.tma_notes.append(note + "; cp.async")
            return None
        pctx.tma_notes.append(note)

    bar = new_tensor(f"tma_bar_{loop.var.name}", [stages], "uint64", "shared.dyn")
    from .pipeline_planning import make_alloc

    pctx.extra_allocs.append(make_alloc(bar))

    def bar_ptr(stage):
        return tirx.address_of(ir.TensorLoad(bar, [i32(stage)]))

    def issue(k_value, stage):
        stmts = [_call("tl::mbarrier_arrive_expect_tx", bar_ptr(stage), ir.const(total, "uint32"))]
        for t in tma:
            stmts += _issue_copy(t, mapping[t.dst.tensor], stage, k, k_value, bar_ptr(stage))
        return ir.If(tx == 0, ir.SeqStmt(stmts), None)

    def guarded(cond, stmt):
        return [stmt] if ctx.prove(cond) else [ir.If(cond, stmt, None)]

    from .pipeline_planning import sync_threads

    init = [_call("tl::mbarrier_init", bar_ptr(s), ir.const(1, "uint32")) for s in range(stages)]
    init.append(_call("tl::mbarrier_init_fence"))
    prologue = [sync_threads(), ir.If(tx == 0, ir.SeqStmt(init), None), sync_threads()]
    body_rest = restage(ir.SeqStmt(rest) if len(rest) > 1 else rest[0], mapping, rel % stages)
    wait = _call("tl::mbarrier_wait", bar_ptr(rel % stages), ir.prim.floordiv(rel, stages) % 2)
    if stages == 1:  # the next iteration's load follows this one's reads: fence them too
        after_reads = fence if release == RELEASE_FENCED else []
        body = [issue(k, 0), wait, *fence, sync_threads(), body_rest, *after_reads, sync_threads()]
        return ir.SeqStmt([*prologue, _with_loop(loop, body)])
    ahead = stages - 2 if in_flight is not None else stages - 1
    for s in range(ahead):
        prologue += guarded(begin + s < end, issue(begin + s, s))
    refill = guarded(k + ahead < end, issue(k + ahead, (rel + ahead) % stages))
    body = [wait, *fence, sync_threads()]
    after = []
    if in_flight is not None:  # (pipelining rule, reader) of the op kept in flight
        rule, reader = in_flight
        if pctx.options["wgmma_copies_after"]:
            body += [body_rest, *refill, *rule.wait(pctx, reader, 1)]
        else:
            body += [*refill, body_rest]
        after = rule.drain(pctx, reader)
    else:
        body += [*refill, body_rest]
    return ir.SeqStmt([*prologue, _with_loop(loop, body), *after])


def _issue_copy(t: TmaCopy, tile_mb, stage, k, k_value, bar_ptr):
    """``tl::tma_load_<R>d`` of every box of copy ``t`` into stage ``stage`` of ``tile_mb``."""
    from ....lowering.stmt import substitute

    begins = [substitute(b, {k: k_value}) for b in t.src.begins]
    nbytes = t.bits // 8
    tile_elems = t.plan.box_rows * t.plan.box_cols * len(t.plan.boxes)
    ptr_ty = ir.PtrType(ir.PrimType(t.dst.dtype), t.dst.scope)
    out = []
    for row0, col0, offset in t.plan.boxes:
        coords = t.box_coords(begins, row0, col0)
        if t.spec.shift is not None:  # the map starts 16-byte aligned, before the tensor
            coords[-1] = coords[-1] + t.spec.shift
        elem = i32(stage) * tile_elems + offset
        smem = tirx.ptr_byte_offset(tirx.address_of(tile_mb), elem * nbytes, ty=ptr_ty)
        args = [smem, tirx.address_of(t.spec.var), bar_ptr]
        args += [ir.prim.Cast("int32", c) if str(c.ty) != "int32" else c for c in reversed(coords)]
        out.append(_call(f"tl::tma_load_{t.spec.rank}d", *args))
    return out


__all__ = ["plan_tma_copies", "tma_loop", "tma_supported"]
