"""``T.fill(buffer, value)`` and ``T.clear(buffer)``: set every element of a tile.

IR: ``tl.fill(region, value)``.
"""

from __future__ import annotations

from ...lowering import irb
from ...lowering.bounds import guarded_store
from ...lowering.region import RegionView
from ..registry import TileOpDef, lower_rule

FILL = TileOpDef("fill", ("dst", "value"), {})


@lower_rule("fill", "cpu")
def lower_fill_cpu(v, ctx):
    dst = RegionView.of(v.dst)
    axes = list(range(len(dst.extents)))

    def body(vars_):
        ranges = {var: (0, e) for var, e in zip(vars_, dst.extents)}
        return guarded_store(
            dst.tensor, dst.index(dict(zip(axes, vars_))), v.value, ctx, ranges, loc=v.loc
        )

    return irb.loop_nest(dst.extents, body, loc=v.loc)
