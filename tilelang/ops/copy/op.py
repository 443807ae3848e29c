"""``T.copy(src, dst)``: move a tile between any two scopes, converting the element type.

IR: ``tl.copy(src_region, dst_region)``; options ``coalesced_width``,
``disable_tma``, ``eviction_policy``. Source and destination must have the same
extents once unit dimensions are dropped. Reads outside a global tensor give
zero, writes outside it are skipped (tails of non-multiple shapes).
"""

from __future__ import annotations

from ... import errors
from ...lowering import irb
from ...lowering.bounds import guarded_load, guarded_store
from ...lowering.region import RegionView, _const
from ..registry import TileOpDef, lower_rule

COPY = TileOpDef(
    "copy",
    ("src", "dst"),
    {"coalesced_width": -1, "disable_tma": False, "eviction_policy": ""},
)


def matched_axes(src: RegionView, dst: RegionView, loc, op="T.copy"):
    """Pairs of (src axis, dst axis) that iterate together, and their extents."""
    sa, da = src.nonunit_axes(), dst.nonunit_axes()
    if len(sa) != len(da):
        raise errors.compile_error(
            f"{op}: {src.name}{_fmt(src.extents)} and {dst.name}{_fmt(dst.extents)} "
            "have different tile shapes",
            loc,
        )
    extents = []
    for a, b in zip(sa, da):
        es, ed = src.extents[a], dst.extents[b]
        cs, cd = _const(es), _const(ed)
        if cs is not None and cd is not None and cs != cd:
            raise errors.compile_error(
                f"{op}: {src.name}{_fmt(src.extents)} and {dst.name}{_fmt(dst.extents)} "
                "have different tile shapes",
                loc,
            )
        extents.append(ed if cd is not None else es)
    return sa, da, extents


def _fmt(extents):
    return "[" + ", ".join(str(e) for e in extents) + "]"


@lower_rule("copy", "cpu")
def lower_copy_cpu(v, ctx):
    """Nested loops over the tile; guarded where a global tensor may end inside it."""
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    sa, da, extents = matched_axes(src, dst, v.loc)

    def body(vars_):
        ranges = {var: (0, e) for var, e in zip(vars_, extents)}
        s_idx = src.index(dict(zip(sa, vars_)))
        d_idx = dst.index(dict(zip(da, vars_)))
        value = guarded_load(src.tensor, s_idx, ctx, ranges)
        return guarded_store(dst.tensor, d_idx, value, ctx, ranges, loc=v.loc)

    return irb.loop_nest(extents, body, loc=v.loc)
