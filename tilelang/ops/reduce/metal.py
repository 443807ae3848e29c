"""Metal lowering of ``T.reduce_*``: the CUDA algorithm on 32-lane SIMD-groups.

Rows shared by all 32 lanes of a SIMD-group reduce with one ``simd_sum`` / ``simd_max`` /
``simd_min`` (``simd_and``/``simd_or``/``simd_xor`` for the bitwise kinds); smaller lane
groups use ``simd_shuffle_xor`` butterflies; rows spanning SIMD-groups combine through
threadgroup memory as on CUDA (``cuda.lower_reduce_threads``). The layout rule is CUDA's.
"""

from __future__ import annotations

from tvm_tirx import tirx as _tirx

from ..registry import layout_rule, lower_rule
from .cuda import lower_reduce_threads, reduce_layout

_WHOLE = {"sum": "simd_sum", "max": "simd_max", "min": "simd_min",
          "bitand": "simd_and", "bitor": "simd_or", "bitxor": "simd_xor"}  # fmt: skip


def _shuffle(value, lane_mask, dtype):
    return _tirx.call_extern("simd_shuffle_xor", value, lane_mask, ty=dtype)


def _whole(kind, value, dtype):
    name = _WHOLE.get(kind)
    return None if name is None else _tirx.call_extern(name, value, ty=dtype)


@lower_rule("reduce", "metal")
def lower_reduce_metal(v, ctx):
    """SIMD-group reductions (``simd_sum``/``simd_max``/``simd_shuffle_xor``), then threadgroup memory."""
    return lower_reduce_threads(v, ctx, _shuffle, 32, whole_warp=_whole)


layout_rule("reduce", "metal")(reduce_layout)
