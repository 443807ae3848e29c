"""ROCm lowering of ``T.reduce_*``: the CUDA algorithm on 64-lane wavefronts.

Lanes of one wavefront exchange registers with ``__shfl_xor(value, mask, 64)`` (HIP's
shuffle, ``ds_bpermute``/DPP on CDNA); rows spread over more than 64 threads combine
through the shared workspace exactly as on CUDA (``cuda.lower_reduce_threads``). The
layout rule is CUDA's (a projection of the source fragment; lane-count independent).
"""

from __future__ import annotations

from tvm_tirx import tirx as _tirx

from ...lowering.target_info import warp_size
from ..registry import layout_rule, lower_rule
from .cuda import lower_reduce_threads, reduce_layout


def _shfl_xor_wave(value, lane_mask, dtype, width=64):
    return _tirx.call_extern("__shfl_xor", value, lane_mask, width, ty=dtype)


@lower_rule("reduce", "rocm")
def lower_reduce_rocm(v, ctx):
    """Wavefront shuffles (``__shfl_xor`` over ``warp_size(arch)`` lanes), then LDS."""
    width = warp_size(ctx.arch)
    return lower_reduce_threads(v, ctx, lambda x, m, d: _shfl_xor_wave(x, m, d, width), width)


layout_rule("reduce", "rocm")(reduce_layout)
