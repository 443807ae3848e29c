"""``T.atomic_add/atomic_max/atomic_min(dst, value)``: read-modify-write that concurrent blocks may share.

IR: ``tl.atomic(dst_region, value)`` with ``kind`` in add/max/min and
``value_is_region`` telling whether ``value`` is a tile (elementwise atomics over
the region) or one scalar expression (applied to every element of ``dst``, as upstream). ``use_tma``
(``T.atomic_add`` of a tile only): upstream's bulk reduction of a shared tile on
sm_90+ (``backends/cuda/passes/tma_reduce.py``); the CPU rule refuses it, as upstream.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ...lowering import irb
from ...lowering.bounds import guarded_load, guarded_store
from ...lowering.region import RegionView
from ..copy.op import matched_axes
from ..registry import TileOpDef, lower_rule

ATOMIC = TileOpDef(
    "atomic",
    ("dst", "value"),
    {"kind": "add", "value_is_region": False, "memory_order": "", "use_tma": False},
)


def refuse_use_tma(v, target: str):
    """The CompileError of ``T.atomic_add(..., use_tma=True)`` on a target without TMA
    (upstream refuses it at compile time too: ``cp.reduce`` is a CUDA sm_90+ instruction)."""
    from ... import errors

    if getattr(v, "use_tma", False):
        raise errors.compile_error(
            f"T.atomic_add(use_tma=True): TMA atomic add requires a CUDA target with TMA "
            f"support (SM90+), but got target {target}; drop use_tma=True (the plain "
            "atomics give the same result)",
            v.loc,
        )


def apply(kind, old, value):
    if kind == "add":
        return old + value
    if kind == "max":
        return _tirx.max(old, value)
    if kind == "min":
        return _tirx.min(old, value)
    raise ValueError(kind)


@lower_rule("atomic", "cpu")
def lower_atomic_cpu(v, ctx):
    """Plain read-modify-write: the CPU backend runs blocks of atomic kernels one after another.

    Guarded like ``T.copy`` (and like the CUDA rule): elements outside a global tensor are
    skipped, for one element (a ``T.Parallel`` tail) as for a tile.
    """
    refuse_use_tma(v, "cpu (llvm)")
    dst = RegionView.of(v.dst)
    if not v.value_is_region:
        value = v.value.astype(dst.dtype)
        axes = dst.nonunit_axes()
        if not axes:
            old = ir.TensorLoad(dst.tensor, dst.begins)
            return guarded_store(
                dst.tensor, dst.begins, apply(v.kind, old, value), ctx, {}, loc=v.loc
            )
        extents = [dst.extents[a] for a in axes]

        def each(vars_):  # a scalar into a tile: every element of dst (upstream)
            ranges = {var: (0, e) for var, e in zip(vars_, extents)}
            d_idx = dst.index(dict(zip(axes, vars_)))
            new = apply(v.kind, ir.TensorLoad(dst.tensor, d_idx), value)
            return guarded_store(dst.tensor, d_idx, new, ctx, ranges, loc=v.loc)

        return irb.loop_nest(extents, each, loc=v.loc)
    src = RegionView.of(v.value)
    sa, da, extents = matched_axes(src, dst, v.loc, op=f"T.atomic_{v.kind}")

    def body(vars_):
        ranges = {var: (0, e) for var, e in zip(vars_, extents)}
        d_idx = dst.index(dict(zip(da, vars_)))
        s_idx = src.index(dict(zip(sa, vars_)))
        value = guarded_load(src.tensor, s_idx, ctx, ranges).astype(dst.dtype)
        new = apply(v.kind, ir.TensorLoad(dst.tensor, d_idx), value)
        return guarded_store(dst.tensor, d_idx, new, ctx, ranges, loc=v.loc)

    return irb.loop_nest(extents, body, loc=v.loc)
