"""Scalar CUDA gemm (pass config ``tl.gemm_scalar``): plain FMAs, any C layout.

Used by the pipeline only while no ``("gemm", "cuda")`` rule (the mma.sync one) is
registered. Layout: C gets the mma.sync accumulator fragment of the warp partition the
policy picks (so later mma code sees the same layouts), or the default parallel
fragment when the tile does not divide. Lowering: fragment A/B operands are first
staged through shared memory; then for each k every thread updates the C elements it
owns, reading A[i, k] and B[k, j] from shared memory (through the tiles' layouts). Slow but correct; spills are
expected for large C tiles (the mma rule is the fast path).
"""

from __future__ import annotations

from tvm_tirx import ir

from ...layout import expr as E
from ...layout import make_mma_accumulator_fragment, make_parallel_fragment
from ...layout.partition import atom_partition
from ...lowering.irb import seq, store
from ...lowering.region import RegionView
from ...lowering.thread_utils import (
    alloc,
    for_,
    fragment_points,
    is_fragment,
    new_tensor,
    physical,
)
from .op import gemm_dims


def warp_partition(m, n, warps, policy):
    """(warp_m, warp_n) as upstream's policies: FullRow, FullCol or Square, in 16x8 atoms
    (None when no split divides the tile)."""
    return atom_partition(m, n, warps, int(policy), 16, 8)


def gemm_layout(v, ctx):
    """C gets the mma accumulator fragment where the warps split it, else a parallel one."""
    if ctx.level != "strict":
        return {}
    c = RegionView.of(v.C)
    if not is_fragment(c.tensor) or ctx.get_layout(c.tensor) is not None:
        return {}
    m, n = int(c.shape[-2]), int(c.shape[-1])
    part = warp_partition(m, n, ctx.threads // 32, v.policy) if ctx.threads % 32 == 0 else None
    if part is None:
        return {c.tensor: make_parallel_fragment([m, n], ctx.threads, 1)}
    return {c.tensor: make_mma_accumulator_fragment(m, n, *part)}


def _stage(view, ctx, stmts):
    """A fragment operand copied to a shared tile of the same shape; returns its view."""
    layout, local = ctx.get_layout(view.tensor), ctx.local_of(view.tensor)
    tile = new_tensor(f"{view.name}_stage", [int(s) for s in view.shape], view.dtype, "shared.dyn")
    ctx.extra_allocs.append(alloc(tile))
    lv = ir.Var("gs", "int32")
    pts = fragment_points(layout, lv, ctx.thread_var)[: len(view.shape)]
    inner = ctx.with_range(lv, 0, layout.get_local_size())
    body = store(tile, [inner.simplify(p) for p in pts], ir.TensorLoad(local, [lv]))
    stmts.append(for_(lv, layout.get_local_size(), body))
    return RegionView(tile, view.begins, view.extents)


def staged_operands(v, ctx):
    """``(a, b, c, stmts)``: the gemm's region views, a fragment A or B replaced by a
    shared copy whose staging statements are ``stmts`` (every rule without register
    operands: scalar, MFMA, simdgroup)."""
    a, b, c, _, _, _ = gemm_dims(v)
    stmts = []
    if is_fragment(a.tensor):
        a = _stage(a, ctx, stmts)
    if is_fragment(b.tensor):
        b = _stage(b, ctx, stmts)
    return a, b, c, stmts


def lower_gemm_scalar(v, ctx):
    """Scalar FMAs per owned C element; fragment A/B operands are staged through shared memory."""
    a, b, c, stmts = staged_operands(v, ctx)
    _, _, _, m, n, k = gemm_dims(v)
    layout, cl = ctx.get_layout(c.tensor), ctx.local_of(c.tensor)
    size = layout.get_local_size()
    if v.clear_accum:
        z = ir.Var("gz", "int32")
        stmts.append(for_(z, size, store(cl, [z], 0.0), ir.ForKind.UNROLLED))
    kv, lv = ir.Var("gk", "int32"), ir.Var("gl", "int32")
    inner = ctx.with_range(kv, 0, k).with_range(lv, 0, size)
    i, j = [inner.simplify(p) for p in fragment_points(layout, lv, ctx.thread_var)[-3:-1]]
    ra, rb = len(a.extents), len(b.extents)

    def at(view, rank, row, col):  # through the tile's shared layout (swizzle), if any
        return physical(view.tensor, view.index({rank - 2: row, rank - 1: col}), inner)

    av = ir.TensorLoad(a.tensor, at(a, ra, kv, i) if v.transpose_A else at(a, ra, i, kv))
    bv = ir.TensorLoad(b.tensor, at(b, rb, j, kv) if v.transpose_B else at(b, rb, kv, j))
    acc = c.dtype
    upd = store(cl, [lv], ir.TensorLoad(cl, [lv]) + av.astype(acc) * bv.astype(acc), loc=v.loc)
    unroll = ir.ForKind.UNROLLED if size <= 256 else None
    stmts.append(
        for_(kv, E.as_const_int(k) if E.as_const_int(k) else k, for_(lv, size, upd, unroll))
    )
    return seq(stmts)
