"""CUDA lowering of ``T.copy``.

- global/shared <-> shared/global: a cooperative loop; the tile's elements are spread
  over all threads in 16-byte vectors where both sides are contiguous and provably
  aligned (else one element at a time); global accesses outside the tensor are skipped
  (stores) or read as zero (loads).
- shared -> fragment: warp-wide ``ldmatrix`` where the two layouts fit it
  (``copy_ldmatrix_cuda.py``), else as below.
- fragment <-> shared/global: each thread moves the elements its fragment layout gives it.
- fragment <-> fragment: register to register when both have the same layout, otherwise
  through a shared workspace (``copy_exchange_cuda.py``).
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...layout import expr as E
from ...lowering.bounds import in_bounds
from ...lowering.fragment_region import is_whole, region_offsets, region_predicate
from ...lowering.fragments import within_owners
from ...lowering.irb import store
from ...lowering.region import RegionView
from ...lowering.stmt import substitute
from ...lowering.thread_utils import (
    UNROLL_LIMIT,
    _bits,
    alloc,
    for_,
    fragment_points,
    is_fragment,
    is_global,
    physical,
)
from ...lowering.vectorize import (
    lanes_for,
    only_replica0,
    split_lanes,
    vectorize_lanes,
    with_fallback,
)
from ..registry import layout_rule, lower_rule
from .exchange_cuda import lower_fragment_exchange
from .ldmatrix_cuda import lower_ldmatrix_copy
from .op import matched_axes


def _static(extents, what, loc):
    out = []
    for e in extents:
        c = E.as_const_int(e)
        if c is None:
            raise errors.compile_error(f"{what}: tile extents must be static on CUDA", loc)
        out.append(c)
    return out


def _vector_width(views_axes, extents, ctx):
    """Elements per 16-byte vector usable for every (view, axes) side, or 1."""
    bits = max(_bits(v.tensor) for v, _ in views_axes)
    vec = max(1, 128 // bits)
    while vec > 1:
        ok = extents[-1] % vec == 0
        for view, axes in views_axes:
            if not axes or axes[-1] != len(view.shape) - 1:
                ok = False
                break
            last = E.as_const_int(view.shape[-1])
            if last is None or last % vec:
                ok = False
                break
            begin = view.begins[-1]
            if E.as_const_int(begin) is None and not ctx.prove(begin % vec == 0):
                ok = False
            elif E.as_const_int(begin) is not None and E.as_const_int(begin) % vec:
                ok = False
                break
        if ok:
            return vec
        vec //= 2
    return 1


def cooperative_loop(pairs, extents, ctx, body_fn, name="c", zero_fill=None, loc=None):
    """All threads share the tile: ``body_fn(offsets)`` per element (vectorized innermost).

    ``pairs`` is [(view, axes)] for the operands whose contiguity decides the vector width.
    ``body_fn(offsets, ctx)`` returns (statement, guard of its global accesses or None);
    the statement's global accesses are unguarded. With vectors of ``vec > 1`` elements
    the lane statement goes through ``transform/vectorize.py`` (one 16-byte access per
    vector; local arrays go to ``ctx.extra_allocs``); the scalar form, used when it
    cannot or at run time when global base pointers are misaligned, runs the lanes one by
    one under the guard of the first (vectors are wholly inside or outside a tensor).
    """
    t, threads = (
        ctx.cooperating_threads()
        if hasattr(ctx, "cooperating_threads")
        else (
            ctx.thread_var,
            ctx.threads,
        )
    )
    total = int(E.prod(extents))
    vec = _vector_width(pairs, extents, ctx)
    n_vec = total // vec
    iters = (n_vec + threads - 1) // threads
    it, v = ir.Var(f"{name}_it", "int32"), ir.Var(f"{name}_v", "int32")
    vi = it * threads + t
    offsets, q = [], vi * vec
    for e in reversed(extents):
        offsets.append(q % e if e != 1 else ir.const(0, "int32"))
        q = q // e
    offsets = list(reversed(offsets))
    inner = ctx.with_range(it, 0, iters).with_range(v, 0, vec)
    offsets = [inner.simplify(o) for o in offsets]
    _, pred_body = body_fn(offsets, inner)  # vectors are aligned: the first element decides
    offsets_v = offsets[:-1] + [offsets[-1] + v] if vec > 1 else offsets
    stmt, _ = body_fn(offsets_v, inner)
    body = for_(v, vec, stmt, ir.ForKind.UNROLLED) if vec > 1 else stmt
    v2 = None  # the zero fill's lane variable
    if pred_body is not None:
        other = None
        if zero_fill is not None:
            v2 = ir.Var(f"{name}_z", "int32")
            zstmt = zero_fill(offsets[:-1] + [offsets[-1] + v2])
            other = for_(v2, vec, zstmt, ir.ForKind.UNROLLED) if vec > 1 else zero_fill(offsets)
        body = ir.If(pred_body, body, other)
    site = vectorize_lanes(stmt, v, vec, inner) if vec > 1 else None
    vector = None
    if site is not None and site.lanes is None:  # a plain copy: no lanes left
        ctx.extra_allocs.extend(alloc(x) for x in site.allocs)
        vector = site.stmt(v, vec, loc=loc)
    elif site is not None:
        ctx.extra_allocs.extend(alloc(x) for x in site.allocs)
        guard = (lambda x: ir.If(pred_body, x, other)) if pred_body is not None else None
        vector = site.stmt(v, vec, guard=guard, loc=loc)

    def loop(body, var):
        if n_vec % threads:
            body = ir.If(vi < n_vec, body, None)
        if var is not it:  # the second form of the copy: loop variables of its own
            fresh = {it: var, v: ir.Var(f"{name}_vs", "int32")}
            if v2 is not None:  # the zero fill stands in both forms
                fresh[v2] = ir.Var(f"{name}_zs", "int32")
            body = substitute(body, fresh)
        kind = ir.ForKind.UNROLLED if iters <= 16 else ir.ForKind.DEFAULT
        return for_(var, iters, body, kind, loc=loc or ir.UNKNOWN_LOC)

    if vector is None:
        return loop(body, it)
    return with_fallback(site, loop(vector, it), loop(body, ir.Var(f"{name}_is", "int32")))


def lower_fragment_side(frag_view, other_view, fa, oa, ctx, to_frag, loc, cast=None, op=None):
    """Each thread moves its own fragment elements to/from ``other_view``.

    Global/shared stores of a replicated fragment are done by replica 0 only. When the
    layout gives a thread runs of consecutive elements along ``other_view``'s last axis,
    a vector form (``transform/vectorize.py``) moves each run with one access.
    """
    layout = ctx.get_layout(frag_view.tensor)
    local = ctx.local_of(frag_view.tensor)
    lvar = ir.Var("fl", "int32")
    n = layout.get_local_size()
    inner = ctx.with_range(lvar, 0, n)
    pts = [inner.simplify(p) for p in fragment_points(layout, lvar, ctx.thread_var)]
    replica0 = pts[-1] == 0 if layout.get_replicate() > 1 and not to_frag else None
    # a part of the fragment: only the slots inside it move, at their offsets in the region
    inside = region_predicate(frag_view, pts[: len(frag_view.shape)], inner.simplify)

    def element(slot, points, where):
        """(unguarded statement, bounds predicate) moving fragment slot ``slot``."""
        offsets = region_offsets(frag_view, points, fa)
        other_idx = other_view.index({o: offsets[f] for f, o in zip(fa, oa)})
        other_idx = [where.simplify(i) for i in other_idx]
        phys = physical(other_view.tensor, other_idx, where)
        pred = in_bounds(other_view.tensor, other_idx, where, {})
        if to_frag:
            return store(local, [slot], ir.TensorLoad(other_view.tensor, phys), loc=loc), pred
        return (op or store)(other_view.tensor, phys, ir.TensorLoad(local, [slot])), pred

    body, pred = element(lvar, pts, inner)
    if pred is not None and to_frag:
        zero = ir.const(0, other_view.dtype)
        body = store(local, [lvar], _tirx.if_then_else(pred, body.value, zero), loc=loc)
    elif pred is not None:
        body = ir.If(pred, body, None)
    if inside is not None:
        body = ir.If(inside, body, None)
    if replica0 is not None:
        body = only_replica0(body, replica0)
    kind = ir.ForKind.UNROLLED if n <= UNROLL_LIMIT else ir.ForKind.DEFAULT
    out = for_(lvar, n, body, kind, loc=loc)
    split = None
    if op is None and inside is None:  # vector runs: whole fragments only
        split = split_lanes(pts, lvar, n, ctx, lanes_for([other_view.tensor]))
    if split is not None:
        vec, lo, v, vpts, vctx = split
        lane, _ = element(lo * vec + v, vpts, vctx)
        site = vectorize_lanes(lane, v, vec, vctx)
        if site is not None:
            ctx.extra_allocs.extend(alloc(x) for x in site.allocs)
            vector = site.stmt(v, vec, loc=loc)
            if replica0 is not None:
                vector = only_replica0(vector, vpts[-1] == 0)
            out = with_fallback(site, for_(lo, n // vec, vector, kind, loc=loc), out)
    return within_owners(out, layout, ctx, "T.copy of a fragment", loc)


def _same_part(src, dst, ctx) -> bool:
    """Whether two same-shaped fragment regions are provably the same part of the tile."""
    if [E.as_const_int(d) for d in src.shape] != [E.as_const_int(d) for d in dst.shape]:
        return False
    pairs = list(zip(src.begins, dst.begins)) + list(zip(src.extents, dst.extents))
    return all(E.as_const_int(ctx.simplify(a - b)) == 0 for a, b in pairs)


def _same_part_copy(src, dst, layout, ctx, loc):
    """Register to register for the slots of the part ``src`` (= the part ``dst``)."""
    lvar = ir.Var("fl", "int32")
    n = layout.get_local_size()
    inner = ctx.with_range(lvar, 0, n)
    pts = [inner.simplify(p) for p in fragment_points(layout, lvar, ctx.thread_var)]
    body = store(ctx.local_of(dst.tensor), [lvar], ir.TensorLoad(ctx.local_of(src.tensor), [lvar]))
    inside = region_predicate(src, pts[: len(src.shape)], inner.simplify)
    if inside is not None:
        body = ir.If(inside, body, None)
    return for_(lvar, n, body, ir.ForKind.UNROLLED if n <= UNROLL_LIMIT else None, loc=loc)


@layout_rule("copy", "cuda")
def copy_layout_cuda(v, ctx):
    """A whole-fragment to whole-fragment copy gives the missing side the other's layout."""
    if ctx.level == "strict":
        return {}
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    if not (is_fragment(src.tensor) and is_fragment(dst.tensor)):
        return {}
    if [E.as_const_int(d) for d in src.shape] != [E.as_const_int(d) for d in dst.shape]:
        return {}
    ls, ld = ctx.get_layout(src.tensor), ctx.get_layout(dst.tensor)
    if ls is not None and ld is None:
        return {dst.tensor: ls}
    if ld is not None and ls is None:
        return {src.tensor: ld}
    return {}


@lower_rule("copy", "cuda")
def lower_copy_cuda(v, ctx):
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    sa, da, extents = matched_axes(src, dst, v.loc)
    sf, df = is_fragment(src.tensor), is_fragment(dst.tensor)
    if sf and df:
        ls, ld = ctx.get_layout(src.tensor), ctx.get_layout(dst.tensor)
        if not ls.is_equal(ld) or not (is_whole(src) and is_whole(dst)):
            # parts of fragments: register to register only where both are the same part
            if not (ls.is_equal(ld) and _same_part(src, dst, ctx)):
                if getattr(ctx, "thread_range", None) is not None:
                    raise errors.compile_error(
                        f"T.copy between fragments {src.tensor.name} and {dst.tensor.name} "
                        "of different layouts under an `if` on the thread index: the "
                        "exchange goes through shared memory with every thread of the "
                        "block; move the copy out of the `if`",
                        v.loc,
                    )
                return lower_fragment_exchange(src, dst, sa, da, ctx, v.loc)
            return _same_part_copy(src, dst, ls, ctx, v.loc)
        lvar = ir.Var("fl", "int32")
        body = store(
            ctx.local_of(dst.tensor), [lvar], ir.TensorLoad(ctx.local_of(src.tensor), [lvar])
        )
        return for_(lvar, ls.get_local_size(), body, ir.ForKind.UNROLLED, loc=v.loc)
    if sf:
        return lower_fragment_side(src, dst, sa, da, ctx, False, v.loc)
    if df:
        guarded = getattr(ctx, "thread_range", None) is not None  # ldmatrix: whole warps
        ldmatrix = None if guarded else lower_ldmatrix_copy(dst, src, da, sa, ctx, v.loc)
        if ldmatrix is not None:
            return ldmatrix
        return lower_fragment_side(dst, src, da, sa, ctx, True, v.loc)
    extents = _static(extents, "T.copy", v.loc)

    def body(offsets, inner):
        s_idx = [inner.simplify(i) for i in src.index(dict(zip(sa, offsets)))]
        d_idx = [inner.simplify(i) for i in dst.index(dict(zip(da, offsets)))]
        preds = [in_bounds(src.tensor, s_idx, inner, {}), in_bounds(dst.tensor, d_idx, inner, {})]
        preds = [p for p in preds if p is not None]
        pred = None
        if preds:
            from tvm_tirx import tirx as _tirx

            pred = _tirx.all(*preds) if len(preds) > 1 else preds[0]
        s_phys, d_phys = physical(src.tensor, s_idx, inner), physical(dst.tensor, d_idx, inner)
        return store(dst.tensor, d_phys, ir.TensorLoad(src.tensor, s_phys), loc=v.loc), pred

    zero = None
    if is_global(src.tensor) and not is_global(dst.tensor):

        def zero(offsets):
            idx = physical(dst.tensor, dst.index(dict(zip(da, offsets))), ctx)
            return store(dst.tensor, idx, ir.const(0, dst.dtype))

    return cooperative_loop([(src, sa), (dst, da)], extents, ctx, body, zero_fill=zero, loc=v.loc)
