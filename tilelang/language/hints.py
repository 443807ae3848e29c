"""Upstream hints with no effect on what a kernel computes: ``T.__ldg``,
``T.disable_warp_group_reg_alloc``, ``T.no_set_max_nreg``, ``T.annotate_min_blocks_per_sm``,
``T.func_attr``.

``T.__ldg(A[i])`` reads ``A[i]`` through CUDA's read-only data cache (``__ldg(&A[i])`` in the
CUDA source; a plain load on the CPU). The register-allocation hints concern Hopper
warp-specialized kernels whose warp groups re-balance registers with ``setmaxnreg``; tilelang
never emits ``setmaxnreg``, so "do not re-balance" is what already happens: they are checked
and accepted. ``T.annotate_min_blocks_per_sm(n)`` (upstream: the second argument of
``__launch_bounds__``) is validated and not used yet (an occupancy hint only).
``T.func_attr`` accepts upstream's function attributes (``tir.noalias``...), which describe
what tilelang already assumes, and ignores them.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
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


def disable_warp_group_reg_alloc():
    """Keep warp groups from re-balancing registers (tilelang never does; accepted)."""
    builder.state()


def no_set_max_nreg():
    """Emit no ``setmaxnreg`` (tilelang never does; accepted)."""
    builder.state()


def annotate_min_blocks_per_sm(n: int):
    """Occupancy hint (upstream: ``__launch_bounds__(threads, n)``); validated, not used yet."""
    builder.state()
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise errors.TraceError(
            f"T.annotate_min_blocks_per_sm: n must be a positive int, got {n!r}"
        )


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
