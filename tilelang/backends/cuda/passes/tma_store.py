"""TMA stores (CUDA sm_90+): ``T.copy(shared -> global)`` as bulk tensor stores, and the
staged epilogue of warp-specialized kernels.

Runs at tile level after ``pipeline_planning`` and ``apply_shared_layouts`` (the
warp-specialized split and the loads' tensor maps exist, the layouts are known; the
thread-level statements emitted here index shared tiles physically already).

**Stores** (:func:`lower_tma_stores`). Where TMA is on for the kernel (sm_90+, and either
the pass config ``tl.disable_tma_lower=False`` or the kernel was warp-specialized, as for
the loads), every ``T.copy(shared tile -> global region)`` that
:func:`~tilelang.backends.cuda.tensor_map.plan_tma_copy` accepts (the same conditions as a
load, read the other way: a whole static 2-d tile whose layout a TMA box/swizzle
reproduces, 16-byte multiple global strides, 8/16/32/64-bit elements of one type) becomes::

    fence.proxy.async.shared::cta        every thread: its shared writes -> async proxy
    __syncthreads()                      (bar.sync 1, T in a warp-specialized consumer)
    if tx == 0:
        tl::tma_store_<R>d(&map, box, coords...)   per box (cp.async.bulk.tensor ... bulk_group)
        tl::tma_store_commit()                     cp.async.bulk.commit_group
        tl::tma_store_wait_read<0>()               the tile is read: free to reuse / exit

The map is encoded on the host like the loads' (its swizzle is the tile's); a box that
reaches past the tensor's end is clipped by the hardware, so tail tiles need no predicate.
``insert_sync`` sees the elected thread's store as a read of the tile, so a later write of
the tile by other threads gets a barrier (after the wait). Copies TMA cannot express keep
the thread copy; ``tl.tma`` (``tilelang.lower``'s dump) says why.

**Epilogue staging** (:func:`stage_epilogues`, pass config ``tl.tma_store_epilogue``). In a
warp-specialized kernel, a ``T.copy(fragment -> global)`` after the pipelined loop becomes
``T.copy(fragment -> S)`` + ``T.copy(S -> global)`` (a TMA store) through a staging tile
``S`` of the global tensor's type, swizzled (128B where the row allows) so that the
fragment's register pairs land in distinct banks and the store's box reproduces it. ``S``
reuses the bytes of a pipeline stage buffer when one is large enough (every TMA load has
completed once the consumers' last ``full`` wait returned; a consumer barrier in front of
the staging writes waits for the other warpgroups' last wgmmas), else it is a new tile
when the shared memory allows (always in a persistent kernel, ``tl.persistent_tiles``: the
producer refills the stages during the epilogue); otherwise the copy stays as it is (and ``tl.tma`` says so).
The fragment -> ``S`` step is warp-wide ``stmatrix`` for 16-bit types where the fragment's
register pairs are rows of 8x8 matrices in ``S``'s layout (the wgmma accumulator: one
``stmatrix.x4`` per 8 accumulator values, checked as ldmatrix's fit), else one 2-element
vector store per register pair (``tl::st_shared_pair``), else the copy's own lowering.
The same epilogue written through a tile of the program's own, ``T.copy(fragment -> U)``
then ``T.copy(U -> global)`` (FlashAttention's ``O_shared``), is staged in ``U``'s place
when ``U`` is row-major (no layout: each register pair of a row of 8 lanes lands in the
same banks, 8-way conflicts), of the global's type, copied whole and named by no other
statement; ``U``'s allocation is dropped.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from tvm_tirx import ir, tirx

from ....layout import expr as E
from ....layout.swizzle import SwizzleMode, dtype_bits, make_swizzle_layout_for_mode
from ....lowering.region import RegionView, _const, full_region
from ....lowering.stmt import (
    StmtMutator,
    alloc_of,
    flatten_seq,
    launches_of,
    with_launch_body,
)
from ....lowering.thread_utils import (
    alloc,
    decl_view,
    extern_calls,
    extern_name,
    is_fragment,
    is_global,
    is_shared,
    new_tensor,
    sync_threads,
    tensor_handles,
)
from ....lowering.thread_utils import (
    extern_stmt as _call,
)
from ....ops import tile_op_of
from ....ops.copy.op import COPY
from ..tensor_map import ATTR_TMA, TmaCopy, plan_tma_copy
from .persistent_tiles import cancel, persistent
from .plan_shared_memory import smem_limit, tile_bytes
from .tma_lowering import shared_map, tma_supported
from .warp_specialize_auto import CONSUMER_MARKER

#: The elected thread's wait that ends a TMA store's (or reduce's) read of its tile.
WAIT_READ = "tl::tma_store_wait_read<0>"

#: Marker in ``tl.tma`` of a kernel split by automatic warp specialization.
_WS_NOTE = "warp-specialized ("


def tma_store_off_reason(ctx) -> str | None:
    """Why TMA stores are off for the kernel ``ctx`` lowers, or None when they are on."""
    if not tma_supported(ctx.arch, ctx.options):
        return "TMA is off (architecture before sm_90 or tl.disable_tma_lower=True)"
    if ctx.options.get("disable_tma") is False:
        return None
    if any(_WS_NOTE in n for n in ctx.tma_notes):
        return None
    return "TMA is on only in warp-specialized kernels (tl.disable_tma_lower=False forces it)"


def plan_tma_store(view, ctx) -> TmaCopy | str:
    """``view`` (a ``T.copy(shared -> global)``) as a :class:`TmaCopy` whose ``src`` is the
    global region and ``dst`` the shared tile, or the reason it cannot be a TMA store."""
    src, dst = RegionView.of(view.src), RegionView.of(view.dst)
    if not (is_shared(src.tensor) and is_global(dst.tensor)):
        return "not a shared -> global copy"
    swapped = SimpleNamespace(src=view.dst, dst=view.src, loc=view.loc)
    return plan_tma_copy(swapped, ctx, ctx)


def tma_store_stmts(t: TmaCopy, tx, op: str = "tl::tma_store") -> list:
    """The fence, barrier and elected-thread store (module doc) of the planned copy ``t``
    (``op``: the device helper, ``<op>_<R>d``; ``tl::tma_store_add``: the TMA reduction of
    ``passes/tma_reduce.py``)."""
    nbytes = t.bits // 8
    tile = t.dst.tensor
    ptr_ty = ir.PtrType(ir.PrimType(t.dst.dtype), t.dst.scope)
    issue = []
    for row0, col0, offset in t.plan.boxes:
        coords = t.box_coords(list(t.src.begins), row0, col0)
        if t.spec.shift is not None:  # the map starts 16-byte aligned, before the tensor
            coords[-1] = coords[-1] + t.spec.shift
        smem = tirx.ptr_byte_offset(tirx.address_of(tile), int(offset) * nbytes, ty=ptr_ty)
        args = [tirx.address_of(t.spec.var), smem]
        args += [ir.prim.Cast("int32", c) if str(c.ty) != "int32" else c for c in reversed(coords)]
        issue.append(_call(f"{op}_{t.spec.rank}d", *args))
    issue += [_call("tl::tma_store_commit"), _call(WAIT_READ)]
    return [
        _call("tl::fence_proxy_async_shared"),
        sync_threads(),
        ir.If(tx == 0, ir.SeqStmt(issue), None),
    ]


class _StoreLowering(StmtMutator):
    def __init__(self, ctx, tx, off):
        super().__init__("cuda")
        self.lctx, self.tx, self.off = ctx, tx, off

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None or found[0].name != "copy":
            return stmt
        view = COPY.view(found[1])
        src, dst = RegionView.of(view.src), RegionView.of(view.dst)
        if not (is_shared(src.tensor) and is_global(dst.tensor)):
            return stmt
        what = f"store {src.name} -> {dst.name}"
        if self.off is not None:
            return stmt  # TMA is off for the whole kernel: nothing to say per copy
        if view.disable_tma:
            self.lctx.tma_notes.append(f"{what}: thread copy (T.copy(..., disable_tma=True))")
            return stmt
        plan = plan_tma_store(view, self.lctx)
        if isinstance(plan, str):
            self.lctx.tma_notes.append(f"{what}: thread copy ({plan})")
            return stmt
        plan.spec = shared_map(self.lctx, plan.spec)
        p = plan.plan
        self.lctx.tma_notes.append(
            f"{what}: TMA store, {len(p.boxes)} box(es) of {p.box_rows}x{p.box_cols}, "
            f"swizzle {p.mode.name}, {plan.bytes} bytes"
        )
        return ir.SeqStmt(tma_store_stmts(plan, self.tx))


def lower_tma_stores(body, ctx):
    """Every TMA-expressible ``T.copy(shared -> global)`` of ``body`` as a TMA store."""
    off = tma_store_off_reason(ctx)
    return _StoreLowering(ctx, ctx.thread_var, off)(body)


# ---------------------------------------------------------------------------------------
# epilogue staging
# ---------------------------------------------------------------------------------------
def staging_layout(rows: int, cols: int, dtype: str):
    """The widest bank swizzle a ``rows x cols`` staging tile allows (None: row-major)."""
    row_bytes = cols * dtype_bits(dtype) // 8
    for mode in (SwizzleMode.SWIZZLE_128B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_32B):
        if rows % 8 == 0 and row_bytes % mode.swizzle_byte_size() == 0:
            return make_swizzle_layout_for_mode(((rows, cols), dtype), mode)
    return None


def _consumer_split(stmts):
    """Index of the warp-specialized split (``If(tx < T, consumer, producer)``), or None."""
    for i, s in enumerate(stmts):
        if isinstance(s, ir.If) and s.else_case is not None:
            first = flatten_seq(s.then_case)
            if first and extern_name(first[0]) == CONSUMER_MARKER:
                return i
    return None


def _stage_buffers(producer) -> list:
    """The shared tiles the producer's TMA loads fill (free once the loop is over)."""
    out = []
    for call in extern_calls(producer, "tl::tma_load_"):
        ptr = call.args[1]
        while isinstance(ptr, ir.Call) and ptr.op.name == "tirx.ptr_byte_offset":
            ptr = ptr.args[0]
        if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.address_of":
            var = ptr.args[0].source
            if not any(var.same_as(v) for v in out):
                out.append(var)
    return out


def _candidate(stmt):
    """(view, fragment view, global view) of a whole 2-d ``T.copy(fragment -> global)``."""
    found = tile_op_of(stmt)
    if found is None or found[0].name != "copy":
        return None
    view = COPY.view(found[1])
    src, dst = RegionView.of(view.src), RegionView.of(view.dst)
    if not (is_fragment(src.tensor) and is_global(dst.tensor)) or view.disable_tma:
        return None
    return view, src, dst


def _user_pair(tail, n, split, others, ctx):
    """((view, fragment view, global view), U) when ``tail[n]`` is a whole-tile
    ``T.copy(fragment -> U)`` and ``tail[n + 1]`` the whole-tile ``T.copy(U -> global)`` of a
    2-d shared tile ``U`` (FlashAttention's ``O_shared``) of the global's type, row-major (no
    layout: the fragment's register pairs hit 8 rows of the same banks), that no other
    statement of the kernel names: the pair is the epilogue ``T.copy(fragment -> global)``
    through ``U``, staged like one (swizzled, ``stmatrix``); else None."""
    if n + 1 >= len(tail):
        return None
    first, second = tile_op_of(tail[n]), tile_op_of(tail[n + 1])
    if first is None or second is None or first[0].name != "copy" or second[0].name != "copy":
        return None
    into, out_of = COPY.view(first[1]), COPY.view(second[1])
    src, mid = RegionView.of(into.src), RegionView.of(into.dst)
    mid2, dst = RegionView.of(out_of.src), RegionView.of(out_of.dst)
    user = mid.tensor
    if not (is_fragment(src.tensor) and is_shared(user) and is_global(dst.tensor)):
        return None
    if not mid2.tensor.same_as(user) or into.disable_tma or out_of.disable_tma:
        return None
    if user in ctx.layout_map or str(user.ty.dtype) != str(dst.tensor.ty.dtype):
        return None
    shape = [_const(x) for x in user.ty.shape]
    for region in (mid, mid2):
        if (
            any(_const(b) != 0 for b in region.begins)
            or [_const(e) for e in region.extents] != shape
        ):
            return None
    h = user.__chandle__()
    rest = [x for i, x in enumerate(tail) if i not in (n, n + 1)]
    if any(h in tensor_handles(x) for x in rest) or h in tensor_handles(split.else_case):
        return None
    if any(h in tensor_handles(x) for x in others if not user.same_as(alloc_of(x))):
        return None
    view = SimpleNamespace(src=into.src, dst=out_of.dst, loc=into.loc, disable_tma=False)
    return (view, src, dst), user


def stage_epilogues(body, ctx):
    """``body`` with the epilogue copies of a warp-specialized kernel staged through shared
    memory (module doc); unchanged without ``tl.tma_store_epilogue`` or the split."""
    option = ctx.options.get("tma_store_epilogue")  # None: default (16-bit outputs only)
    if option is False or tma_store_off_reason(ctx) is not None:
        return body
    in_cluster = tuple(getattr(ctx, "cluster_dims", (1, 1, 1))) != (1, 1, 1)
    if in_cluster and ctx.options.get("cluster_multicast_sync") == "cluster":
        # the first cluster schedule, kept as it was measured (tl.cluster_multicast_sync)
        ctx.tma_notes.append("epilogue: register stores (tl.cluster_multicast_sync='cluster')")
        return body
    # In a cluster, peers multicast into this block's stage buffers, but only for the
    # iterations this block's consumers wait for: every such write has landed once the
    # consumers' last ``full`` wait returned, so the staging tile may reuse any stage.
    _, inner = launches_of(body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    at = _consumer_split(stmts)
    if at is None:
        return body
    split = stmts[at]
    consumer = flatten_seq(split.then_case)
    waits = [i for i, s in enumerate(consumer) if extern_calls(s, "tl::mbarrier_wait")]
    if not waits:
        return body
    free = _stage_buffers(split.else_case)
    used = []  # stage buffers already holding a staging tile
    budget = _shared_bytes(stmts, ctx)
    limit = smem_limit(ctx.arch)
    new_allocs = []
    out = consumer[: waits[-1] + 1]
    tail = consumer[waits[-1] + 1 :]
    dead = []  # user tiles whose fragment -> tile -> global pair is staged instead
    skip = False
    for n, stmt in enumerate(tail):
        if skip:
            skip = False
            continue
        cand = _candidate(stmt)
        if cand is None:
            pair = _user_pair(tail, n, stmts[at], [*stmts[:at], *stmts[at + 1 :]], ctx)
            if pair is None:
                out.append(stmt)
                continue
            cand, user = pair
            dead.append(user)
            skip = True
        view, frag, dst = cand
        if option is None and str(dst.tensor.ty.dtype) not in _STMATRIX_DTYPES:
            ctx.tma_notes.append(
                f"epilogue {frag.name} -> {dst.name}: not staged (by default only 16-bit "
                "outputs, the stmatrix path measured on the H200; tl.tma_store_epilogue=True "
                "stages this one too)"
            )
            out.append(stmt)
            continue
        # a staged user pair frees its tile U
        room = budget - (tile_bytes(dead[-1]) + 1024 if skip else 0)
        if persistent(ctx):  # the producer refills the stages during the epilogue
            staged = _stage_one(view, frag, dst, ctx, [], used, room, limit)
            if isinstance(staged, str) and "do not fit" in staged and not skip:
                cancel(ctx, f"epilogue {frag.name} -> {dst.name}: {staged} beside the stages")
        if not persistent(ctx):
            staged = _stage_one(view, frag, dst, ctx, free, used, room, limit)
        if isinstance(staged, str):
            ctx.tma_notes.append(f"epilogue {frag.name} -> {dst.name}: not staged ({staged})")
            if skip:  # the user's pair stays as written
                out += tail[n : n + 2]
                dead.pop()
            else:
                out.append(stmt)
            continue
        if skip:
            ctx.tma_notes[-1] += f" (in place of {dead[-1].name}: a row-major tile)"
        bind, tile, aliased, stmts_new = staged
        new_allocs.append(bind)
        budget = room
        if not aliased:
            budget += tile_bytes(tile) + 1024
        out += stmts_new
    if not new_allocs:
        return body
    new_split = ir.If(split.condition, ir.SeqStmt(out), split.else_case, split.loc)
    stmts = stmts[:at] + new_allocs + [new_split] + stmts[at + 1 :]
    stmts = [x for x in stmts if not any(v.same_as(alloc_of(x)) for v in dead)]
    return with_launch_body(body, ir.SeqStmt(stmts))


def _shared_bytes(stmts, ctx) -> int:
    """Shared bytes the kernel allocates already (every tile live at once, 1 KB alignment
    slack each: the consumer branch is one statement for the shared-memory planner)."""
    total = 0
    for s in list(stmts) + list(ctx.extra_allocs):
        var = alloc_of(s)
        if var is not None and is_shared(var):
            total += tile_bytes(var) + 1024
    return total


#: C types of staging elements in the ldsm.h helpers (stmatrix: the 16-bit ones).
_C_TYPES = {
    "float16": "half_t",
    "bfloat16": "bfloat16_t",
    "float32": "float",
    "float64": "double",
    "int32": "int",
}
_STMATRIX_DTYPES = ("float16", "bfloat16")


def _slot_offsets(frag, tile, ctx):
    """Offsets in ``tile`` (through its layout) of every (thread, local slot) of the whole
    fragment ``frag``, shape ``(span, slots)``; None unless the fragment holds one element
    per (thread < span, slot) with threads starting at 0 in whole warps."""
    from ....layout import Fragment
    from ....ops.copy.ldmatrix_cuda import WARP, _offset_tables, _slot_table

    layout = ctx.get_layout(frag.tensor)
    if not isinstance(layout, Fragment) or layout.output_dim != 1:
        return None
    if layout.get_thread_range() is not None and E.as_const_int(layout.thread_range[0]) != 0:
        return None
    span, slots = layout.get_thread_size(), layout.get_local_size()
    if span % WARP or span > ctx.threads or slots % 2:
        return None
    table = _slot_table(layout)
    if table is None:
        return None
    offsets = _offset_tables(table, RegionView.of(full_region(tile)), [0, 1], [0, 1], ctx)
    return None if offsets is None else offsets[0]


def plan_stmatrix(offsets, tile, ctx) -> int | None:
    """Matrices per ``stmatrix`` call (4, 2 or 1) storing the fragment whose slot
    ``offsets`` (:func:`_slot_offsets`) are given into the 16-bit ``tile``, or None. The
    fit is ldmatrix's, read the other way: the slot pair ``(2s, 2s + 1)`` of every lane
    must be one row word of an 8x8 matrix whose rows start 16-byte aligned."""
    from ....ops.copy.ldmatrix_cuda import _register_mode

    m = re.match(r"sm_(\d+)", str(ctx.arch or ""))
    if m is None or int(m.group(1)) < 90 or str(tile.ty.dtype) not in _STMATRIX_DTYPES:
        return None
    modes = [_register_mode(offsets[None], s, 2, 8) for s in range(0, offsets.shape[1], 2)]
    if any(mode is not False for mode in modes):
        return None
    return next(n for n in (4, 2, 1) if len(modes) % n == 0)


def pairs_fit(offsets) -> bool:
    """Whether each slot pair ``(2s, 2s + 1)`` of every thread is two consecutive elements
    of the tile starting at an even offset (one 2-element vector store)."""
    first, second = offsets[:, 0::2], offsets[:, 1::2]
    return bool((second == first + 1).all() and (first % 2 == 0).all())


def _store_loop(frag, tile, ctx, extern, step, thread, slot_of) -> ir.Stmt:
    """``for i: extern(&tile[element of (thread, slot_of(i * step))], &local[i * step])``,
    unrolled: one statement for ``insert_sync`` (the calls write disjoint elements)."""
    from ....lowering.thread_utils import for_, fragment_points, physical

    layout = ctx.get_layout(frag.tensor)
    local = ctx.local_of(frag.tensor)
    n = layout.get_local_size() // step
    i = ir.Var("st_i", "int32")
    inner = ctx.with_range(i, 0, n)
    points = fragment_points(layout, slot_of(i * step), thread)[:-1]
    phys = physical(tile, [inner.simplify(p) for p in points], inner)
    ptr = tirx.address_of(ir.TensorLoad(tile, phys))
    regs = tirx.address_of(ir.TensorLoad(local, [i * step]))
    body = for_(i, n, _call(extern, ptr, regs), ir.ForKind.UNROLLED)
    if layout.get_thread_size() < ctx.threads:
        body = ir.If(ctx.thread_var < layout.get_thread_size(), body, None)
    return body


def staging_stores(frag, tile, ctx):
    """(statement, description) writing the whole fragment ``frag`` into ``tile``:
    warp-wide ``tl::ptx_stmatrix_x<n><T>`` (16-bit types), else one 2-element vector store
    per slot pair (``tl::st_shared_pair<T>``), else None (the copy's own lowering)."""
    offsets = _slot_offsets(frag, tile, ctx)
    dtype = str(tile.ty.dtype)
    if offsets is None or dtype not in _C_TYPES:
        return None
    ctype = _C_TYPES[dtype]
    num = plan_stmatrix(offsets, tile, ctx)
    tx = ctx.thread_var
    if num is not None:
        lane = tx % 32
        q = (lane // 8) % num if num > 1 else 0
        # row r of matrix q: the element lane 4 r of the warp holds in its register q
        thread = tx // 32 * 32 + 4 * (lane % 8)
        extern = f"tl::ptx_stmatrix_x{num}<{ctype}>"
        stmt = _store_loop(frag, tile, ctx, extern, 2 * num, thread, lambda s: s + 2 * q)
        return stmt, f"{offsets.shape[1] // (2 * num)} stmatrix.x{num} per thread"
    if pairs_fit(offsets):
        stmt = _store_loop(frag, tile, ctx, f"tl::st_shared_pair<{ctype}>", 2, tx, lambda s: s)
        return stmt, f"{offsets.shape[1] // 2} paired stores per thread"
    return None


def _stage_one(view, frag, dst, ctx, free, used, budget, limit):
    """(Bind of the staging tile, the tile, whether it aliases a stage buffer, the
    statements replacing the copy), or why the copy is not staged."""
    shape = [_const(s) for s in frag.shape]
    if len(shape) != 2 or None in shape:
        return "the fragment is not a static 2-d tile"
    if any(_const(b) != 0 for b in frag.begins) or [_const(e) for e in frag.extents] != shape:
        return "the copy does not read the whole fragment"
    dtype = dst.dtype
    name = f"{dst.name}_epilogue"
    tile = new_tensor(name, shape, dtype, "shared.dyn")
    layout = staging_layout(shape[0], shape[1], dtype)
    if layout is not None:
        ctx.layout_map[tile] = layout
    store_view = SimpleNamespace(src=full_region(tile), dst=view.dst, loc=view.loc)
    plan = plan_tma_store(store_view, ctx)
    if isinstance(plan, str):
        ctx.layout_map.pop(tile, None)
        return f"no TMA store: {plan}"
    need = tile_bytes(tile)
    fits = [b for b in free if tile_bytes(b) >= need and not any(b.same_as(u) for u in used)]
    if fits:
        base = min(fits, key=tile_bytes)
        used.append(base)
        bind, aliased = decl_view(tile, base, 0), True
        ctx.tma_notes.append(
            f"epilogue {frag.name} -> {dst.name}: staged in {name} ({need} bytes, reusing "
            f"the stage buffer {base.name})"
        )
    elif budget + need <= limit:
        bind, aliased = alloc(tile), False
        why = (
            "persistent kernel: the producer refills the stages meanwhile"
            if persistent(ctx)
            else "no stage buffer is large enough"
        )
        ctx.tma_notes.append(
            f"epilogue {frag.name} -> {dst.name}: staged in {name} ({need} bytes, allocated: {why})"
        )
    else:
        ctx.layout_map.pop(tile, None)
        return f"{need} bytes of staging do not fit in shared memory"
    stores = staging_stores(frag, tile, ctx)
    if stores is not None:
        copy_in, how = stores
        ctx.tma_notes[-1] += f"; {how}"
    else:  # the copy's own lowering (per-thread stores through the swizzle)
        copy_in = ir.Evaluate(COPY.make(view.src, full_region(tile), loc=view.loc))
    copy_out = ir.Evaluate(COPY.make(full_region(tile), view.dst, loc=view.loc))
    # the stage buffer may still be read by another warpgroup's last wgmma
    stmts = ([sync_threads()] if aliased else []) + [copy_in, copy_out]
    return bind, tile, aliased, stmts


def stage_tma_store(func, state):
    """Pipeline stage: epilogue staging, then TMA stores, then the TMA reductions of
    ``T.atomic_add(..., use_tma=True)`` (``passes/tma_reduce.py``); ``tl.tma`` updated."""
    from .tma_reduce import lower_tma_reduces

    ctx = state.ctx
    notes = len(ctx.tma_notes)
    body = stage_epilogues(func.body, ctx)
    body = lower_tma_stores(body, ctx)
    body = lower_tma_reduces(body, ctx)
    func = func.with_body(body)
    if len(ctx.tma_notes) != notes:
        func = func.with_attr(ATTR_TMA, list(ctx.tma_notes))
    return func


__all__ = [
    "lower_tma_stores",
    "plan_tma_store",
    "stage_epilogues",
    "stage_tma_store",
    "staging_layout",
    "staging_stores",
    "tma_store_off_reason",
    "tma_store_stmts",
]
