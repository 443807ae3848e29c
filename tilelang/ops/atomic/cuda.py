"""CUDA lowering of ``T.atomic_add/max/min`` through ``tl::AtomicAdd/Max/Min`` (atomic.h).

- Scalar form (``dst`` one element): every thread that reaches the statement performs
  its own atomic when the address or the value depends on the thread (the usual case
  inside a ``T.Parallel`` loop, e.g. a histogram), or when it sits under an ``if`` on the
  thread index (the threads the user picked); a thread-independent update (serial
  code, which every thread of the block runs) is done once per block, by thread 0.
- Tile form from a fragment: each thread applies the elements its layout gives it;
  for replicated fragments only replica 0 does, so nothing is counted twice.
- Tile form from shared/global: all threads share the tile, one element each at a time.

Elements of a global ``dst`` outside the tensor are skipped (tails).

``T.atomic_add(global, shared, use_tma=True)`` on sm_90+ is lowered before this rule, by
``backends/cuda/passes/tma_reduce.py`` (one elected thread's ``cp.reduce.async.bulk.tensor``,
or these atomics where TMA cannot express the region: ``tl.tma`` says why); a ``use_tma``
that reaches this rule is on a target without TMA: a compile error, as upstream. The layout
rule gives such a shared tile, when nothing else chose its layout, the widest bank swizzle
its rows allow (a TMA box reads it as is; the fragment's stores into it spread over banks).
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...lowering.bounds import in_bounds
from ...lowering.fragment_region import is_whole, region_offsets, region_predicate
from ...lowering.fragments import within_owners
from ...lowering.region import RegionView
from ...lowering.stmt import uses_any
from ...lowering.thread_utils import for_, fragment_points, is_fragment, physical
from ..copy.cuda import _static, cooperative_loop
from ..copy.op import matched_axes
from ..registry import layout_rule, lower_rule
from .op import refuse_use_tma

HELPERS = {"add": "tl::AtomicAdd", "max": "tl::AtomicMax", "min": "tl::AtomicMin"}


def atomic_stmt(kind, tensor, indices, value, loc=ir.UNKNOWN_LOC) -> ir.Evaluate:
    """``tl::Atomic<Kind>(&tensor[indices], value)`` as a statement."""
    dtype = str(tensor.ty.dtype)
    address = _tirx.address_of(ir.TensorLoad(tensor, list(indices)))
    call = _tirx.call_extern(HELPERS[kind], address, value.astype(dtype), ty=dtype)
    return ir.Evaluate(call)


def _check_dst(dst, loc, kind):
    if is_fragment(dst.tensor) or str(dst.scope).startswith("local"):
        raise errors.compile_error(
            f"T.atomic_{kind}: {dst.name} is thread-local; atomics need a global or shared dst",
            loc,
        )


def _guarded(stmt, tensor, indices, ctx):
    pred = in_bounds(tensor, indices, ctx, {})
    return stmt if pred is None else ir.If(pred, stmt, None)


def tma_capable(arch) -> bool:
    """Whether ``arch`` (``sm_XY[a]``) has TMA (sm_90 and later)."""
    import re

    m = re.match(r"sm_(\d+)", str(arch or ""))
    return bool(m) and int(m.group(1)) >= 90


@layout_rule("atomic", "cuda")
def atomic_layout_cuda(v, ctx):
    """A ``use_tma`` atomic's 2-d shared source without a layout: the widest bank swizzle
    (128B/64B/32B) whose span divides its rows, at the "free" level (sm_90+, TMA on)."""
    if ctx.level != "free" or not getattr(v, "use_tma", False) or not v.value_is_region:
        return {}
    if not tma_capable(ctx.arch) or ctx.options.get("disable_tma") is True:
        return {}
    from ...layout.swizzle import SwizzleMode, dtype_bits, make_swizzle_layout_for_mode
    from ...lowering.thread_utils import is_shared

    src = RegionView.of(v.value)
    if not is_shared(src.tensor) or ctx.get_layout(src.tensor) is not None:
        return {}
    shape = [_static_int(x) for x in src.tensor.ty.shape]
    if len(shape) != 2 or None in shape:
        return {}
    dtype = str(src.tensor.ty.dtype)
    row_bytes = shape[1] * dtype_bits(dtype) // 8
    for mode in (SwizzleMode.SWIZZLE_128B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_32B):
        if shape[0] % 8 == 0 and row_bytes % mode.swizzle_byte_size() == 0:
            return {src.tensor: make_swizzle_layout_for_mode((tuple(shape), dtype), mode)}
    return {}


def _static_int(x):
    from ...layout import expr as E

    return E.as_const_int(x)


@lower_rule("atomic", "cuda")
def lower_atomic_cuda(v, ctx):
    refuse_use_tma(v, str(ctx.arch))
    dst = RegionView.of(v.dst)
    _check_dst(dst, v.loc, v.kind)
    if not v.value_is_region and dst.nonunit_axes():
        return _scalar_into_tile(v, dst, ctx)
    if not v.value_is_region:
        idx = physical(dst.tensor, dst.begins, ctx)
        stmt = _guarded(atomic_stmt(v.kind, dst.tensor, idx, v.value, v.loc), dst.tensor, idx, ctx)
        t = ctx.thread_var
        if uses_any(v.value, [t]) or any(uses_any(b, [t]) for b in dst.begins):
            return stmt
        if getattr(ctx, "thread_guarded", False):  # under `if tx == k`: the threads chosen
            return stmt
        return ir.If(t == 0, stmt, None)
    src = RegionView.of(v.value)
    sa, da, extents = matched_axes(src, dst, v.loc, op=f"T.atomic_{v.kind}")
    if is_fragment(src.tensor):
        return _from_fragment(v, src, dst, sa, da, ctx)
    extents = _static(extents, f"T.atomic_{v.kind}", v.loc)

    def body(offsets, inner):
        s_idx = [inner.simplify(i) for i in src.index(dict(zip(sa, offsets)))]
        d_idx = [inner.simplify(i) for i in dst.index(dict(zip(da, offsets)))]
        value = ir.TensorLoad(src.tensor, physical(src.tensor, s_idx, inner))
        preds = [in_bounds(src.tensor, s_idx, inner, {}), in_bounds(dst.tensor, d_idx, inner, {})]
        preds = [p for p in preds if p is not None]
        pred = None if not preds else (_tirx.all(*preds) if len(preds) > 1 else preds[0])
        phys = physical(dst.tensor, d_idx, inner)
        return atomic_stmt(v.kind, dst.tensor, phys, value, v.loc), pred

    # one element per vector lane: atomics are never vectorized
    return cooperative_loop([(src, [])], extents, ctx, body, name="a", loc=v.loc)


def _scalar_into_tile(v, dst, ctx):
    """``T.atomic_add(A[tile], scalar)``: the scalar into every element of the tile, the
    elements shared among the block's threads (upstream's meaning)."""
    axes = dst.nonunit_axes()
    extents = _static([dst.extents[a] for a in axes], f"T.atomic_{v.kind}", v.loc)

    def body(offsets, inner):
        d_idx = [inner.simplify(i) for i in dst.index(dict(zip(axes, offsets)))]
        pred = in_bounds(dst.tensor, d_idx, inner, {})
        phys = physical(dst.tensor, d_idx, inner)
        return atomic_stmt(v.kind, dst.tensor, phys, v.value, v.loc), pred

    return cooperative_loop([(dst, [])], extents, ctx, body, name="a", loc=v.loc)


def _from_fragment(v, src, dst, sa, da, ctx):
    layout = ctx.get_layout(src.tensor)
    # a part of the fragment: scalar atomics of the slots inside it (no pairs)
    pairs = is_whole(src) and _float_pairs(v, src, dst, sa, da, layout, ctx)
    scalar = _fragment_loop(v, src, dst, sa, da, layout, ctx, pairs=False)
    if not pairs:
        return scalar
    vector = _fragment_loop(v, src, dst, sa, da, layout, ctx, pairs=True)
    align = getattr(dst.tensor.ty, "data_alignment", None)
    if align is not None and int(align) % 8 == 0:
        return vector
    # tensors promise element alignment only: pairs where the base pointer is 8-byte aligned
    aligned = _tirx.call_extern("tl::is_aligned", dst.tensor.data, ir.const(8, "int32"), ty="bool")
    return ir.If(aligned, vector, scalar)


def _fragment_loop(v, src, dst, sa, da, layout, ctx, pairs):
    """The loop over a thread's fragment slots (or slot pairs) doing its atomics."""
    local = ctx.local_of(src.tensor)
    n = layout.get_local_size()
    lvar = ir.Var("al", "int32")
    inner = ctx.with_range(lvar, 0, n // 2 if pairs else n)
    slot = lvar * 2 if pairs else lvar
    pts = [inner.simplify(p) for p in fragment_points(layout, slot, ctx.thread_var)]
    offsets = region_offsets(src, pts, sa)
    d_idx = [inner.simplify(i) for i in dst.index({d: offsets[s] for s, d in zip(sa, da)})]
    phys = physical(dst.tensor, d_idx, inner)
    if pairs:  # one vector atomic per pair of consecutive columns (sm_90+: float2)
        address = _tirx.address_of(ir.TensorLoad(dst.tensor, list(phys)))
        values = [ir.TensorLoad(local, [slot]), ir.TensorLoad(local, [slot + 1])]
        body = ir.Evaluate(_tirx.call_extern("tl::AtomicAddx2", address, *values, ty="void"))
    else:
        body = atomic_stmt(v.kind, dst.tensor, phys, ir.TensorLoad(local, [lvar]), v.loc)
    body = _guarded(body, dst.tensor, d_idx, inner)
    inside = region_predicate(src, pts[: len(src.shape)], inner.simplify)
    if inside is not None:
        body = ir.If(inside, body, None)
    if layout.get_replicate() > 1:
        body = ir.If(pts[-1] == 0, body, None)  # replica 0 only
    body = within_owners(body, layout, ctx, f"T.atomic_{v.kind}({src.name})", v.loc)
    count = n // 2 if pairs else n
    kind = ir.ForKind.UNROLLED if count <= 64 else ir.ForKind.DEFAULT
    return for_(lvar, count, body, kind, loc=v.loc)


def _float_pairs(v, src, dst, sa, da, layout, ctx) -> bool:
    """Whether the fragment's slots ``2m, 2m + 1`` hold, in every thread, two consecutive
    elements of one row of a float32 global ``dst`` stored row-major, the first at an even
    column of an even-length row (8-byte aligned when the base pointer is): then
    ``T.atomic_add`` issues one ``tl::AtomicAddx2`` per pair on sm_90+
    (``red.global.add.v2.f32``), under a run-time test of the base pointer's alignment
    unless the tensor is declared 8-byte aligned."""
    import numpy as np

    from ...lowering.global_layouts import vectorizable

    try:
        number = int(str(ctx.arch).split("_")[1].rstrip("a"))
    except (AttributeError, IndexError, ValueError):
        return False
    if v.kind != "add" or number < 90 or str(dst.dtype) != "float32":
        return False
    if not str(dst.scope).startswith("global") or layout.get_local_size() % 2:
        return False
    if not sa or sa[-1] != len(src.extents) - 1 or da[-1] != len(dst.extents) - 1:
        return False  # the fragment's columns must run along dst's rows
    if not vectorizable(dst.tensor):
        return False  # a storage layout (e.g. make_dq_layout) permutes the row
    if not ctx.prove(ir.prim.floormod(dst.shape[-1], 2) == 0):
        return False
    if not ctx.prove(ir.prim.floormod(dst.begins[-1], 2) == 0):
        return False
    try:
        table = layout.inverse().forward_table()  # (local, thread, *logical, rep)
    except Exception:  # noqa: BLE001 - a layout that cannot be tabulated: no pairs
        return False
    col = len(src.extents) - 1
    first, second = table[0::2], table[1::2]
    step = np.zeros(table.shape[-1], dtype=table.dtype)
    step[col] = 1
    return bool(np.all(second - first == step) and np.all(first[..., col] % 2 == 0))
