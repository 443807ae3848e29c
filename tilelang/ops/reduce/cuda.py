"""CUDA layout rule and lowering of ``T.reduce_*`` on fragments.

Layout: ``dst``'s fragment is ``src``'s projected onto the kept axes, replicated over
the threads that shared a reduced row; when ``dst``'s layout is fixed first (a
``T.Parallel`` loop, a copy, another reduce), ``src`` gets one consistent with it
(``layouts.py``); two fixed layouts that disagree are a compile error. Whole fragments
only. Lowering, per thread: (1) a partial over the
registers it owns, (2) ``__shfl_xor_sync`` butterflies over the lanes sharing a row,
(3) across warps through a small shared workspace when a row spans warps, (4) combine
into ``dst`` (or overwrite with ``clear=True``).
"""

from __future__ import annotations

import numpy as np
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...lowering.fragments import owner_guard
from ...lowering.irb import seq, store
from ...lowering.region import RegionView, _const
from ...lowering.thread_utils import alloc, for_, fragment_points, is_fragment, new_tensor
from ..registry import layout_rule, lower_rule
from .layouts import rows_consistent, source_from_destination
from .memory import lower_reduce_from_memory, reads_memory
from .op import combine, init_value, reduce_axes


@layout_rule("reduce", "cuda")
def reduce_layout(v, ctx):
    """``dst`` gets ``src``'s fragment projected onto the kept axes; a ``src`` without a
    layout gets one consistent with an already fixed ``dst`` (:mod:`.layouts`); two fixed
    layouts that disagree are a compile error naming both buffers."""
    from ...lowering.fragments import project_fragment

    src, dst, dim, pairs = reduce_axes(v)
    if not (is_fragment(src.tensor) and is_fragment(dst.tensor)):
        return {}
    s_layout, d_layout = ctx.get_layout(src.tensor), ctx.get_layout(dst.tensor)
    if s_layout is None and d_layout is None:
        return {}
    if d_layout is None:
        frag = project_fragment(s_layout, [a for a, _ in pairs])
        if len(dst.shape) != len(frag.get_input_shape()):
            frag = frag.reshape([int(s) for s in dst.shape])
        return {dst.tensor: frag}
    if s_layout is None:
        if ctx.level not in ("deferred", "free"):
            return {}  # T.Parallel loops may lay the source out first (layout_inference)
        frag = source_from_destination(d_layout, src.tensor.ty.shape, dim, pairs, xor_group)
        return {} if frag is None else {src.tensor: frag}
    check_layouts(v, s_layout, d_layout, pairs, getattr(ctx, "origin_of", None))
    return {}


def check_layouts(v, s_layout, d_layout, pairs, origin_of=None) -> None:
    """Raise a CompileError (at the reduce's line) unless every thread holds in ``dst``
    exactly the rows it holds elements of in ``src``: the shuffle lowering would fold
    other rows' elements into its registers (a silently wrong result)."""
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    if rows_consistent(s_layout, d_layout, pairs):
        return

    def why(tensor):
        who = origin_of(tensor) if origin_of is not None else ""
        return f" (set by {who})" if who else ""

    raise errors.compile_error(
        f"layout conflict in T.reduce_{v.reduce_type}({src.name}, {dst.name}): the fragment "
        f"of {dst.name} {d_layout!r}{why(dst.tensor)} does not put each element on the "
        f"threads holding its row of {src.name} {s_layout!r}{why(src.tensor)}; give "
        f"{dst.name} its layout from the reduce (e.g. fix it after the reduce) or "
        f"T.copy the result into a fragment laid out as needed",
        v.loc,
    )


def _whole(view) -> bool:
    """Whether a region covers its whole tensor (the lowering works on whole fragments)."""
    shape = [_const(d) for d in view.tensor.ty.shape]
    return all(_const(b) == 0 for b in view.begins) and [_const(e) for e in view.extents] == shape


def _span(gens) -> set:
    span = {0}
    for g in gens:
        span |= {s ^ g for s in span}
    return span


def xor_group(frag, dim, idle_from=None, threads=None, idle_below=0, base=0):
    """Generator bits g such that the threads sharing a reduced row are ``t ^ span(g)``.

    With ``idle_from``/``threads``: a row's threads may also be completed to such a group
    by threads in ``[idle_from, threads)`` (or below ``idle_below``), which hold no
    element of ``frag`` and so add the reduction's identity (a 1-d fragment of 100
    elements on 128 threads: the row's threads 0..99 are completed by 100..127).

    ``base``: the group is of the threads' offsets ``t - base`` (a fragment starting at a
    later warp: its rows form a xor group relative to its first thread)."""
    table = frag.thread_table() - base  # (rep, *shape)
    if idle_from is not None and threads is not None:
        idle_from, threads, idle_below = idle_from - base, threads - base, idle_below - base
    moved = np.moveaxis(table, dim + 1, -1).reshape(-1, table.shape[dim + 1])
    rows = [sorted(set(int(x) for x in row)) for row in moved]
    groups = {frozenset(o ^ owners[0] for o in owners) for owners in rows}
    if len(groups) == 1:
        group = set(next(iter(groups)))
        gens = [g for g in sorted(group) if g and g & (g - 1) == 0]
        if _span(gens) == group:
            return gens
    if idle_from is None or threads is None:
        return None
    bits = 0
    for owners in rows:
        for o in owners:
            bits |= o ^ owners[0]
    gens = [1 << b for b in range(bits.bit_length()) if bits >> b & 1]
    span = _span(gens)
    for owners in rows:
        coset = {(owners[0] & ~bits) | s for s in span}
        extra = coset - set(owners)
        idle = [t for t in extra if idle_below <= t < idle_from or t >= threads]
        if not set(owners) <= coset or idle:
            return None
    return gens


def _shfl(value, lane_mask, dtype):
    mask = ir.const(0xFFFFFFFF, "uint32")
    return _tirx.call_extern("__shfl_xor_sync", mask, value, lane_mask, 32, ty=dtype)


@lower_rule("reduce", "cuda")
def lower_reduce_cuda(v, ctx):
    """Warp shuffles (``__shfl_xor_sync`` over 32 lanes), then shared memory across warps.
    ``tl.reduce_merged_exchange`` (default on): one shared exchange for all of a thread's
    rows (:func:`exchange_slots`)."""
    options = getattr(ctx, "options", None) or {}
    merged = options.get("reduce_merged_exchange", True)
    return lower_reduce_threads(v, ctx, _shfl, 32, merged_exchange=merged)


def exchange_slots(lanes, warps, threads: int, rows: int, warp: int = 32):
    """The compact layout of the cross-warp workspace, or None when it would not be smaller
    than one slot per thread: after the lane butterflies every lane of a group
    ``t ^ span(lanes)`` holds the same partial, so one of them (lane bits 0) writes it to
    slot ``row * width + compress(t)`` (``t`` without its lane bits). Returns
    ``(width, compress)`` where ``compress(expr)`` builds that index expression."""
    if not warps:
        return None
    lane_bits = sorted(g.bit_length() - 1 for g in lanes)
    width = threads >> len(lane_bits)
    if rows * width > threads:
        return None
    low = warp.bit_length() - 1  # bits of the lane index
    runs = []  # runs of consecutive kept lane-index bits: (first bit, length, rank)
    for rank, b in enumerate(b for b in range(low) if b not in lane_bits):
        if runs and b == runs[-1][0] + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1, runs[-1][2])
        else:
            runs.append((b, 1, rank))
    # a run reaching the top lane bit continues into the warp index: no mask, no extra term
    open_top = bool(runs) and runs[-1][0] + runs[-1][1] == low

    def compress(x):
        out = 0 if open_top else (x >> low) << (low - len(lane_bits))
        for i, (first, length, rank) in enumerate(runs):
            part = x >> first if first else x
            if not (open_top and i == len(runs) - 1):
                part = part & ((1 << length) - 1)
            out = out + (part << rank if rank else part)
        return out

    return width, compress


def lower_reduce_threads(v, ctx, shuffle, warp: int, whole_warp=None, merged_exchange=False):
    """The reduction over a block's threads: ``shuffle(value, lane_mask, dtype)`` exchanges
    registers between lanes closer than ``warp`` (the warp/wavefront size); rows spanning
    more lanes go through a shared workspace. Shared by the CUDA, ROCm and Metal rules.

    ``whole_warp(kind, value, dtype)``, when given, may return one expression reducing
    ``value`` over all ``warp`` lanes (Metal's ``simd_sum``/``simd_max``); it replaces the
    butterfly when the lanes sharing a row are exactly the whole warp.

    ``merged_exchange``: rows spanning warps go through the workspace together (all of a
    thread's rows written, one barrier, all read: ``insert_sync`` places one barrier per
    reduce instead of two per row) in the compact layout of :func:`exchange_slots`, when
    that layout is no larger than one slot per thread."""
    src, dst, dim, pairs = reduce_axes(v)
    if reads_memory(src, dst):
        return lower_reduce_from_memory(v, ctx, src, dst, dim, pairs)
    if not (is_fragment(src.tensor) and is_fragment(dst.tensor)):
        raise errors.compile_error(
            f"T.reduce_{v.reduce_type} on {ctx.backend}: src must be a fragment or a shared "
            f"tile, and dst a fragment (or a shared tile when src is shared); got "
            f"{src.name} ({src.scope}) -> {dst.name} ({dst.scope})",
            v.loc,
        )
    for view, what in ((src, "src"), (dst, "dst")):
        if not _whole(view):
            raise errors.compile_error(
                f"T.reduce_{v.reduce_type} on {ctx.backend}: only whole fragments are "
                f"supported ({what} {view.name}{list(view.extents)} is a part of "
                f"{list(view.tensor.ty.shape)}); T.copy the part into its own fragment",
                v.loc,
            )
    s_layout, d_layout = ctx.get_layout(src.tensor), ctx.get_layout(dst.tensor)
    check_layouts(v, s_layout, d_layout, pairs)
    t = ctx.thread_var
    try:  # the threads [lo, hi) holding src (a later warpgroup's fragment: lo > 0)
        owners = owner_guard(s_layout, t, ctx.threads)
    except ValueError as err:
        raise errors.compile_error(f"T.reduce_{v.reduce_type}({src.name}): {err}", v.loc) from None
    table = s_layout.thread_table()
    lo, hi = int(table.min()), int(table.max()) + 1
    gens, rel = xor_group(s_layout, dim, hi, ctx.threads, idle_below=lo), 0
    if gens is None and lo % warp == 0:  # a later warp's fragment: groups of t - lo
        gens, rel = xor_group(s_layout, dim, hi, ctx.threads, idle_below=lo, base=lo), lo
    if gens is None:
        raise errors.compile_error(
            f"T.reduce: the threads sharing a row of {src.name} do not form a xor group", v.loc
        )
    kind, dtype = v.reduce_type, dst.dtype
    merge = {"abssum": "sum", "absmax": "max"}.get(kind, kind)
    nan = bool(v.nan_propagate) and dtype.startswith(("float", "bfloat"))

    n_d = d_layout.get_local_size()
    sl, dl = ctx.local_of(src.tensor), ctx.local_of(dst.tensor)
    red = new_tensor(f"{dst.name}_red", [n_d], dtype, "local")
    stmts = [alloc(red)]
    ld = ir.Var("rd", "int32")
    stmts.append(for_(ld, n_d, store(red, [ld], init_value(kind, dtype)), ir.ForKind.UNROLLED))
    ls = ir.Var("rs", "int32")
    inner = ctx.with_range(ls, 0, s_layout.get_local_size())
    pts = fragment_points(s_layout, ls, t)
    kept = {b: pts[a] for a, b in pairs}
    d_index = [0] * len(dst.shape)
    for b, x in kept.items():
        d_index[b] = x
    slot = inner.simplify(d_layout.map_forward_index(d_index)[0])
    value = ir.TensorLoad(sl, [ls]).astype(dtype)
    acc = store(red, [slot], combine(kind, ir.TensorLoad(red, [slot]), value, nan))
    partial = for_(ls, s_layout.get_local_size(), acc, ir.ForKind.UNROLLED)
    if owners is not None:  # the other threads hold no src element
        partial = ir.If(owners, partial, None)
    stmts.append(partial)
    lanes = [g for g in gens if g < warp]
    warps = [g for g in gens if g >= warp]
    ld2 = ir.Var("rw", "int32")
    cur = ir.TensorLoad(red, [ld2])
    body = []
    whole = None
    whole_lanes = sorted(lanes) == [1 << b for b in range(warp.bit_length() - 1)]
    if whole_warp is not None and whole_lanes and not nan:  # simd_max & co. drop NaNs
        whole = whole_warp(merge, cur, dtype)
    if whole is not None:
        body.append(store(red, [ld2], whole))
    elif nan:
        # the NaN-propagating combine is a select whose arms both use the partner's value:
        # exchanged once into a register, so every lane runs the shuffle (a shuffle left in
        # one arm of the printed ?: ran in the lanes of one side only: a hang on the GPU)
        partner = new_tensor(f"{dst.name}_partner", [1], dtype, "local")
        stmts.append(alloc(partner))
        for g in lanes:
            body.append(store(partner, [0], shuffle(cur, g, dtype)))
            body.append(store(red, [ld2], combine(merge, cur, ir.TensorLoad(partner, [0]), nan)))
    else:
        for g in lanes:
            body.append(store(red, [ld2], combine(merge, cur, shuffle(cur, g, dtype), nan)))
    compact = exchange_slots(lanes, warps, ctx.threads, n_d, warp) if merged_exchange else None
    if warps:
        span = {0}
        for g in warps:
            span |= {s ^ g for s in span}
        # every thread of a group combines the partials in the same absolute order, so
        # all replicas of a row hold bit-identical results (float + is not associative)
        group_bits = 0
        for g in warps:
            group_bits |= g
        base = t - ((t - rel) & group_bits) if rel else t - (t & group_bits)
        order = sorted(span)
        # threads past the last whole group (idle ones, when the block size is no multiple
        # of the group's) read slots past the block: the workspace covers them too, and the
        # compact slots (which assume whole groups) are not used
        ws_size = rel + ((ctx.threads - 1 - rel) | group_bits) + 1
        if ws_size != ctx.threads or rel:
            compact = None
    if warps and compact is not None:
        # all rows written (one lane per lane group), then all read: one RAW barrier
        width, compress = compact
        ws = new_tensor(f"{dst.name}_ws", [n_d * width], dtype, "shared.dyn")
        ctx.extra_allocs.append(alloc(ws))
        lane_mask = sum(lanes)
        write = store(ws, [ld2 * width + compress(t)], cur)
        body.append(ir.If((t & lane_mask) == 0, write, None) if lane_mask else write)
        stmts.append(for_(ld2, n_d, seq(body), ir.ForKind.UNROLLED))
        ld4 = ir.Var("rx", "int32")
        row = ld4 * width + compress(base)

        def part(o):  # the partial of the group member ``base + o`` (o: warp bits only)
            return ir.TensorLoad(ws, [row + compress(o)])

        total = part(order[0])
        for o in order[1:]:
            total = combine(merge, total, part(o), nan)
        stmts.append(for_(ld4, n_d, store(red, [ld4], total), ir.ForKind.UNROLLED))
        body = []
    elif warps:
        ws = new_tensor(f"{dst.name}_ws", [ws_size], dtype, "shared.dyn")
        ctx.extra_allocs.append(alloc(ws))
        body.append(store(ws, [t], cur))
        total = ir.TensorLoad(ws, [base + order[0]])
        for o in order[1:]:
            total = combine(merge, total, ir.TensorLoad(ws, [base + o]), nan)
        read = store(red, [ld2], total)
        body.append(ir.If(t >= rel, read, None) if rel else read)  # below rel: no group
    if body:
        stmts.append(for_(ld2, n_d, seq(body), ir.ForKind.UNROLLED if not warps else None))
    ld3 = ir.Var("ro", "int32")
    out = ir.TensorLoad(red, [ld3])
    if not v.clear:
        out = combine(merge, ir.TensorLoad(dl, [ld3]), out, nan)
    stmts.append(for_(ld3, n_d, store(dl, [ld3], out, loc=v.loc), ir.ForKind.UNROLLED))
    return seq(stmts)
