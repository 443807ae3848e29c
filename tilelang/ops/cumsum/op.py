"""``T.cumsum`` / ``T.cummax(src, dst=None, dim=0, reverse=False)``: inclusive prefix sum /
maximum along one dimension (option ``op``: "sum" or "max").

IR: ``tl.cumsum(src_region, dst_region)`` with ``dim`` and ``reverse``; ``dst``
may be ``src`` (in place).
"""

from __future__ import annotations

from tvm_tirx import ir

from ... import errors
from ...lowering import irb
from ...lowering.region import RegionView, _const
from ..registry import TileOpDef, lower_rule

CUMSUM = TileOpDef("cumsum", ("src", "dst"), {"dim": 0, "reverse": False, "op": "sum"})


def scan_step(v, prev, cur):
    """One step of the scan: ``prev + cur`` (T.cumsum) or ``max(prev, cur)`` (T.cummax)."""
    from tvm_tirx import tirx as _tirx

    return _tirx.max(prev, cur) if v.op == "max" else prev + cur


def cumsum_axes(v):
    """(src view, dst view, scanned dim) with the shape checks done, or a CompileError."""
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    rank = len(src.extents)
    if len(dst.extents) != rank:
        raise errors.compile_error("T.cumsum: src and dst must have the same rank", v.loc)
    for es, ed in zip(src.extents, dst.extents):
        cs, cd = _const(es), _const(ed)
        if cs is not None and cd is not None and cs != cd:
            raise errors.compile_error(
                f"T.cumsum: {src.name}{list(src.extents)} and {dst.name}{list(dst.extents)} "
                "have different shapes",
                v.loc,
            )
    dim = v.dim + rank if v.dim < 0 else v.dim
    if not 0 <= dim < rank:
        raise errors.compile_error(f"T.cumsum: dim {v.dim} out of range for {src.name}", v.loc)
    return src, dst, dim


@lower_rule("cumsum", "cpu")
def lower_cumsum_cpu(v, ctx):
    src, dst, dim = cumsum_axes(v)
    rank = len(src.extents)
    kept = [a for a in range(rank) if a != dim]
    n = src.extents[dim]

    def outer(vars_):
        fixed = dict(zip(kept, vars_))

        def pos(r):
            return (n - 1 - r) if v.reverse else r

        def at(view, r):
            return view.index({**fixed, dim: r})

        first = irb.store(
            dst.tensor,
            at(dst, pos(0)),
            ir.TensorLoad(src.tensor, at(src, pos(0))).astype(dst.dtype),
        )

        def step(rv):
            r = rv[0] + 1
            prev = ir.TensorLoad(dst.tensor, at(dst, pos(r - 1)))
            cur = ir.TensorLoad(src.tensor, at(src, pos(r))).astype(dst.dtype)
            return irb.store(dst.tensor, at(dst, pos(r)), scan_step(v, prev, cur), loc=v.loc)

        return irb.seq([first, irb.loop_nest([n - 1], step, names=["r"])])

    return irb.loop_nest([src.extents[a] for a in kept], outer, loc=v.loc)
