"""CUDA lowering of ``T.cumsum`` on fragment or shared tiles: one thread per row.

A fragment ``src`` is first staged into a shared scratch tile (every thread writes the
elements it owns); then thread ``t`` scans rows ``t, t + threads, ...`` serially in
shared memory (in ``dst`` when it is shared, else in the scratch tile); a fragment
``dst`` finally reads its elements back. ``insert_sync`` puts the barriers between
these phases. Simple and correct rather than fast (a row is scanned by one thread).
"""

from __future__ import annotations

from tvm_tirx import ir

from ... import errors
from ...layout import expr as E
from ...lowering.fragment_region import is_whole
from ...lowering.fragments import within_owners
from ...lowering.irb import seq, store
from ...lowering.thread_utils import (
    alloc,
    for_,
    fragment_points,
    is_fragment,
    is_shared,
    new_tensor,
    physical,
)
from ..registry import lower_rule
from .op import cumsum_axes, scan_step


def _whole(view, what, loc):
    """A CompileError unless the fragment region ``view`` is its whole fragment."""
    if not is_whole(view):
        raise errors.compile_error(
            f"T.cumsum: only whole fragments are supported on CUDA ({what} {view.name}"
            f"[{', '.join(f'{b}:{b + e}' for b, e in zip(view.begins, view.extents))}] is a "
            f"part of {view.name}{list(view.shape)}); copy the part into a fragment of its own",
            loc,
        )


def _fragment_moves(frag_view, scratch, ctx, to_scratch, loc):
    """Each thread copies its fragment elements to (or from) the shared ``scratch`` tile."""
    layout, local = ctx.get_layout(frag_view.tensor), ctx.local_of(frag_view.tensor)
    lvar = ir.Var("cl", "int32")
    inner = ctx.with_range(lvar, 0, layout.get_local_size())
    pts = [inner.simplify(p) for p in fragment_points(layout, lvar, ctx.thread_var)]
    idx = pts[: len(frag_view.shape)]
    if to_scratch:
        value = ir.TensorLoad(local, [lvar]).astype(str(scratch.ty.dtype))
        body = store(scratch, physical(scratch, idx, inner), value, loc=loc)
    else:
        value = ir.TensorLoad(scratch, physical(scratch, idx, inner)).astype(frag_view.dtype)
        body = store(local, [lvar], value, loc=loc)
    body = within_owners(body, layout, ctx, f"T.cumsum({frag_view.name})", loc)
    n = layout.get_local_size()
    return for_(lvar, n, body, ir.ForKind.UNROLLED if n <= 64 else None, loc=loc)


@lower_rule("cumsum", "cuda")
def lower_cumsum_cuda(v, ctx):
    src, dst, dim = cumsum_axes(v)
    for view in (src, dst):
        if not (is_fragment(view.tensor) or is_shared(view.tensor)):
            raise errors.compile_error(
                f"T.cumsum on CUDA needs fragment or shared tiles ({view.name} is {view.scope})",
                v.loc,
            )
    shape = [E.as_const_int(e) for e in src.extents]
    if None in shape:
        raise errors.compile_error("T.cumsum: tile extents must be static on CUDA", v.loc)
    stmts = []
    if is_shared(dst.tensor):
        work, wview = dst.tensor, dst
    else:
        _whole(dst, "dst", v.loc)
        work = new_tensor(f"{dst.name}_scan", shape, dst.dtype, "shared.dyn")
        ctx.extra_allocs.append(alloc(work))
        wview = None
    if is_fragment(src.tensor):
        _whole(src, "src", v.loc)
        if wview is not None:
            _whole(dst, "dst", v.loc)
        stmts.append(_fragment_moves(src, work, ctx, True, v.loc))
        read, read_view = work, wview
    else:
        read, read_view = src.tensor, src

    def at(view, tensor, axes_vals):
        idx = (
            view.index(axes_vals) if view is not None else [axes_vals[a] for a in range(len(shape))]
        )
        return physical(tensor, idx, ctx) if view is not None else idx

    kept = [a for a in range(len(shape)) if a != dim]
    rows = int(E.prod([shape[a] for a in kept])) if kept else 1
    n = shape[dim]
    t = ctx.thread_var
    it, r = ir.Var("cs_it", "int32"), ir.Var("cs_r", "int32")
    row = it * ctx.threads + t
    fixed, q = {}, row
    for a in reversed(kept):
        fixed[a] = q % shape[a]
        q = q // shape[a]

    def pos(k):
        return (n - 1 - k) if v.reverse else k

    def elem(k):
        return {**fixed, dim: pos(k)}

    first = store(work, at(wview, work, elem(0)), ir.TensorLoad(read, at(read_view, read, elem(0))))
    prev = ir.TensorLoad(work, at(wview, work, elem(r)))
    cur = ir.TensorLoad(read, at(read_view, read, elem(r + 1))).astype(dst.dtype)
    step = store(work, at(wview, work, elem(r + 1)), scan_step(v, prev, cur), loc=v.loc)
    scan = seq([first, for_(r, n - 1, step)]) if n > 1 else first
    iters = (rows + ctx.threads - 1) // ctx.threads
    if rows % ctx.threads:
        scan = ir.If(row < rows, scan, None)
    stmts.append(for_(it, iters, scan, loc=v.loc))
    if is_fragment(dst.tensor):
        stmts.append(_fragment_moves(dst, work, ctx, False, v.loc))
    return seq(stmts)
