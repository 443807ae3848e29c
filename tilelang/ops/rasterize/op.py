"""``T.use_swizzle(panel_size, order)``: visit the block grid in panels for L2 reuse.

IR: ``tl.use_swizzle()`` with ``panel_size``, ``order`` ("row"/"col") and ``enable``.
The op is a kernel-level hint: ``tilelang.backends.cuda.passes.rasterize_blocks`` consumes it
on GPU targets by renumbering the blocks; on the CPU, where block order does not
touch a shared cache this way, it lowers to nothing.
"""

from __future__ import annotations

from ..registry import TileOpDef, lower_rule

USE_SWIZZLE = TileOpDef("use_swizzle", (), {"panel_size": 8, "order": "row", "enable": True})


@lower_rule("use_swizzle", "cpu")
def lower_use_swizzle_cpu(v, ctx):
    return None


@lower_rule("use_swizzle", "cuda")
def lower_use_swizzle_cuda(v, ctx):
    """Already applied by ``rasterize_blocks`` at the start of the CUDA pipeline."""
    return None
