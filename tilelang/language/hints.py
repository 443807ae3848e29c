"""Upstream hints with no effect on what a kernel computes: ``T.__ldg``,
``T.disable_warp_group_reg_alloc``, ``T.no_set_max_nreg``, ``T.annotate_min_blocks_per_sm``,
``T.annotate_restrict_buffers``, ``T.annotate_l2_hit_ratio``, ``T.func_attr``.

``T.__ldg(A[i])`` reads ``A[i]`` through CUDA's read-only data cache (``__ldg(&A[i])`` in the
CUDA source; a plain load on the CPU). The others become function attributes the CUDA backend
reads (``lowering/kernel_hints.py``):

- ``T.disable_warp_group_reg_alloc()`` / ``T.no_set_max_nreg()``: a warp-specialized kernel
  (sm_90a) keeps the default register split: no ``setmaxnreg``.
- ``T.annotate_min_blocks_per_sm(n)``: ``__launch_bounds__(threads, n)``.
- ``T.annotate_restrict_buffers(*tensors)``: those kernel parameters lose ``__restrict__``
  (upstream's meaning: they may alias).
- ``T.annotate_l2_hit_ratio({tensor: ratio})``: upstream sets an L2 persistence window on the
  launch; it is validated (global tensors, ratios in [0, 1]) and recorded, and tilelang
  launches without the window (a cache hint: results are the same).

``T.func_attr`` accepts upstream's function attributes (``tir.noalias``...), which describe
what tilelang already assumes, and ignores them.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
from ..lowering.kernel_hints import (
    ATTR_L2_HIT_RATIO,
    ATTR_MIN_BLOCKS_PER_SM,
    ATTR_NO_SET_MAX_NREG,
    ATTR_NON_RESTRICT,
)
from . import builder

LDG = "__ldg"
_LDG_TYPES = (
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
)  # fmt: skip


def ldg(load):
    """``load`` (a global tensor element ``A[i]``) through the read-only data cache."""
    builder.state()
    load = builder.unwrap(load)
    if not isinstance(load, ir.TensorLoad):
        raise errors.TraceError(
            f"T.__ldg takes one element of a global tensor, e.g. T.__ldg(A[i]); got {load!r}"
        )
    scope = str(getattr(load.source.ty, "scope", "global"))
    if scope not in ("", "global"):
        raise errors.TraceError(f"T.__ldg: {load.source.name} is a {scope} tensor, not global")
    dtype = str(load.source.ty.dtype)
    if dtype not in _LDG_TYPES:
        raise errors.TraceError(f"T.__ldg: unsupported dtype {dtype}")
    return _tirx.call_extern(LDG, _tirx.address_of(load), ty=dtype)


def _set_attr(key: str, value) -> None:
    builder.state().func_attrs[key] = value


def disable_warp_group_reg_alloc():
    """Keep the warp groups of a warp-specialized kernel at the default register split (no
    ``setmaxnreg``)."""
    _set_attr(ATTR_NO_SET_MAX_NREG, True)


def no_set_max_nreg():
    """Emit no ``setmaxnreg`` in a warp-specialized kernel."""
    _set_attr(ATTR_NO_SET_MAX_NREG, True)


def annotate_min_blocks_per_sm(n: int):
    """At least ``n`` resident blocks per SM: ``__launch_bounds__(threads, n)`` on CUDA."""
    builder.state()
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise errors.TraceError(
            f"T.annotate_min_blocks_per_sm: n must be a positive int, got {n!r}"
        )
    _set_attr(ATTR_MIN_BLOCKS_PER_SM, n)


def _param_name(tensor, what: str) -> str:
    value = builder.unwrap(tensor)
    ty = getattr(value, "ty", None)
    if not (isinstance(value, ir.Var) and hasattr(ty, "shape")):
        raise errors.TraceError(f"{what} takes kernel tensors, got {tensor!r}")
    scope = str(getattr(ty, "scope", "") or "global")
    if scope != "global":
        raise errors.TraceError(f"{what}: {value.name} is a {scope} tile, not a kernel tensor")
    return value.name


def annotate_restrict_buffers(*buffers):
    """The kernel parameters ``buffers`` may alias: no ``__restrict__`` on them."""
    builder.state()
    if buffers:
        names = [_param_name(b, "T.annotate_restrict_buffers") for b in buffers]
        _set_attr(ATTR_NON_RESTRICT, names)


def annotate_l2_hit_ratio(l2_hit_ratio_map: dict):
    """Upstream's L2 persistence hint ``{tensor: ratio}``: validated and recorded; tilelang
    launches without a persistence window (the same results)."""
    builder.state()
    if not isinstance(l2_hit_ratio_map, dict):
        raise errors.TraceError("T.annotate_l2_hit_ratio takes a dict {tensor: ratio}")
    ratios = {}
    for tensor, ratio in l2_hit_ratio_map.items():
        name = _param_name(tensor, "T.annotate_l2_hit_ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise errors.TraceError(
                f"T.annotate_l2_hit_ratio: the ratio of {name} must be in [0, 1], got {ratio!r}"
            )
        ratios[name] = float(ratio)
    _set_attr(ATTR_L2_HIT_RATIO, ratios)


def func_attr(attrs: dict):
    """Upstream's function attributes (``{"tir.noalias": True}``...): accepted and ignored."""
    if not isinstance(attrs, dict):
        raise errors.TraceError(f"T.func_attr takes a dict, got {type(attrs).__name__}")


def CUDASourceCodeKernel(*blocks, threads=None, source_code_or_path=None, entry_name=None, **kw):  # noqa: N802
    """Upstream: launch a kernel given as CUDA source. Not supported by tilelang yet on any
    target: a TraceError naming the line (instead of a missing attribute)."""
    builder.state()
    raise errors.TraceError(
        "`T.CUDASourceCodeKernel` is not supported on cpu or cuda yet (a kernel given as CUDA "
        "source); write the kernel with T.Kernel"
    )
