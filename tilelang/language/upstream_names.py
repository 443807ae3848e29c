"""Smaller upstream ``T.*`` names that its examples and language tests use.

- Fast-math spellings ``T.__exp``, ``T.__exp10``, ``T.__log``, ``T.__log2``, ``T.__log10``,
  ``T.__sin``, ``T.__cos``, ``T.__tan``: upstream emits CUDA's approximate intrinsics
  (``__expf``...); here they are the precise functions (``T.exp``...), which are within the
  intrinsics' error bounds on every target.
- ``T.__ffs(x)``: one-based position of the lowest set bit of an integer, 0 for 0 (CUDA's
  ``__ffs`` / ``__ffsll``), computed with a population count on every target.
- ``T.__fns(mask, base, offset)``: the ``offset``-th set bit from ``base`` (CUDA's ``__fns``),
  from population counts / leading-zero counts on every target.
- ``T.parallel(start, stop=None)``: the TIR spelling of a parallel loop (= ``T.Parallel`` over
  one range).
- ``T.PrimExpr`` / ``T.Var``: classes for ``isinstance`` checks on traced values.
- ``T.pdl_trigger()`` / ``T.pdl_sync()``: programmatic dependent launch (``griddepcontrol``).
  tilelang launches kernels without the PDL attribute, where ``griddepcontrol.wait`` returns at
  once and ``launch_dependents`` has nothing to release, so both are correctly no-ops.
- ``T.atomic_or(dst, value, memory_order=None)``: atomic OR of one integer element
  (``tilelang/ops/atomic/bitwise.py``; CPU, CUDA and ROCm).
- ``T.annotate_producer_reg_dealloc`` / ``T.annotate_consumer_reg_alloc``: register split hints
  for upstream's warp-specialized kernels; tilelang's warp specialization keeps the default
  split, so they are validated and accepted (like ``T.no_set_max_nreg``).
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from ..lowering.region import region_extents, to_region
from ..ops.atomic import bitwise
from . import builder
from . import math as _math
from .builder import LoopSpec

_FAST_MATH_TYPES = ("float16", "bfloat16", "float32", "float64")


def _fast(name: str, precise):
    def fast_math(x):
        value = builder.unwrap(x)
        if builder.is_expr(value) and str(value.ty) not in _FAST_MATH_TYPES:
            # upstream's check and message: the fast intrinsics exist for these types only
            raise TypeError(f"T.{name} only supports floating-point inputs, but got {value.ty}")
        return precise(x)

    fast_math.__name__ = name
    fast_math.__qualname__ = name
    fast_math.__doc__ = f"Upstream's fast ``{name}``: ``T.{precise.__name__}`` here (precise)."
    return fast_math


FAST_MATH = {
    f"__{fn.__name__}": _fast(f"__{fn.__name__}", fn)
    for fn in (
        _math.exp,
        _math.exp10,
        _math.log,
        _math.log2,
        _math.log10,
        _math.sin,
        _math.cos,
        _math.tan,
    )
}


def ffs(value):
    """One-based index of the lowest set bit of integer ``value`` (0 when it is 0)."""
    value = builder.unwrap(value)
    if isinstance(value, bool):
        raise errors.TraceError(f"T.__ffs takes an integer, got {value!r}")
    if isinstance(value, int):
        if value == 0:
            return ir.const(0, "int32")
        return ir.const((value & -value).bit_length(), "int32")
    if not builder.is_expr(value) or not str(value.ty).startswith(("int", "uint")):
        raise errors.TraceError(f"T.__ffs takes an integer expression, got {value!r}")
    bits = 64 if str(value.ty).endswith("64") else 32
    unsigned = _tirx.Cast(f"uint{bits}", value)
    below_and_lowest = unsigned ^ (unsigned - ir.const(1, f"uint{bits}"))
    count = _tirx.Cast("int32", _tirx.popcount(below_and_lowest))
    return _tirx.Select(unsigned == ir.const(0, f"uint{bits}"), ir.const(0, "int32"), count)


def parallel(start, stop=None, *, annotations=None):
    """A parallel loop over ``[start, stop)`` (``[0, start)`` with one argument)."""
    begin, end = (0, start) if stop is None else (start, stop)
    return LoopSpec([(begin, end, None)], "parallel", dict(annotations or {}))


class _PrimExprMeta(type):
    def __instancecheck__(cls, value):
        return builder.is_expr(builder.unwrap(value))


class PrimExpr(metaclass=_PrimExprMeta):
    """``isinstance(x, T.PrimExpr)``: whether ``x`` is a scalar IR expression."""


Var = ir.Var


def pdl_trigger():
    """Let a dependent kernel start (PDL); a no-op, as tilelang does not launch with PDL."""
    builder.state()


def pdl_sync():
    """Wait for the kernel this one depends on (PDL); a no-op, as launches are not PDL."""
    builder.state()


def _reg_count(name: str, reg_count) -> None:
    builder.state()
    if isinstance(reg_count, bool) or not isinstance(reg_count, int):
        raise errors.TraceError(f"T.{name}: reg_count must be an int, got {reg_count!r}")
    if reg_count < 24 or reg_count > 256 or reg_count % 8:
        raise errors.TraceError(
            f"T.{name}: reg_count must be a multiple of 8 in [24, 256], got {reg_count}"
        )


def annotate_producer_reg_dealloc(reg_count: int = 24):
    """Registers for producer warp groups (a hint; accepted, the default split is kept)."""
    _reg_count("annotate_producer_reg_dealloc", reg_count)


def annotate_consumer_reg_alloc(reg_count: int = 240):
    """Registers for consumer warp groups (a hint; accepted, the default split is kept)."""
    _reg_count("annotate_consumer_reg_alloc", reg_count)


MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def atomic_or(dst, value, memory_order=None):
    """Atomically ``dst |= value``; ``dst`` is one int32 or uint32 element of a global
    or shared tensor (upstream: scalar addresses only)."""
    st = builder.state()
    st.uses_atomics = True
    if memory_order is not None and memory_order not in MEMORY_ORDERS:
        raise errors.TraceError(
            f"T.atomic_or: memory_order must be one of {MEMORY_ORDERS}, got {memory_order!r}"
        )
    dst_r = to_region(builder.unwrap(dst), what="T.atomic_or dst")
    extents = [builder.static_value(e) for e in region_extents(dst_r)]
    if any(e != 1 for e in extents):
        raise errors.TraceError(
            f"T.atomic_or: dst must be one element (e.g. A[i]), got extents {extents}"
        )
    dtype = str(dst_r.source.ty.dtype)
    if dtype not in bitwise.DTYPES:
        raise errors.TraceError(
            f"T.atomic_or: {dst_r.source.name} is {dtype}; atomic_or takes "
            f"{', '.join(bitwise.DTYPES)} elements"
        )
    value = dtypes.scalar_value(builder.unwrap(value), dtype, "T.atomic_or value")
    call = bitwise.ATOMIC_OR.make(
        dst_r,
        value,
        loc=builder.user_loc(),
        memory_order="" if memory_order in (None, "relaxed") else memory_order,
    )
    _T.emit_(ir.Evaluate(call, loc=call.loc))


def _u32(x):
    if isinstance(x, int):
        return ir.const(x & 0xFFFFFFFF, "uint32")
    return _tirx.Cast("uint32", x)


def fns(mask, base, offset):
    """Bit position of the ``offset``-th set bit of the 32-bit ``mask`` counted from bit
    ``base`` (toward the MSB for ``offset > 0``, the LSB for ``offset < 0``; ``offset == 0``:
    ``base`` itself if set), or 0xFFFFFFFF when there is none (CUDA's ``__fns``, PTX
    ``fns.b32``). ``offset`` must be known when tracing; ``base`` must be in [0, 31]."""
    offset = builder.static_value(builder.unwrap(offset))
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise errors.TraceError("T.__fns: offset must be an int known when tracing")
    m, b = _u32(builder.unwrap(mask)), _u32(builder.unwrap(base))
    zero, one, none = ir.const(0, "uint32"), ir.const(1, "uint32"), ir.const(0xFFFFFFFF, "uint32")
    if offset == 0:
        return _tirx.Select(((m >> b) & one) == one, b, none)
    if offset > 0:
        m = m & (none << b)  # bits base..31
        for _ in range(offset - 1):
            m = m & (m - one)  # drop the lowest set bit
        lowest = _tirx.Cast("uint32", _tirx.popcount(m ^ (m - one))) - one
        return _tirx.Select(m == zero, none, lowest)
    m = m & (none >> (ir.const(31, "uint32") - b))  # bits 0..base
    for _ in range(-offset - 1):  # drop the highest set bit
        top = ir.const(31, "uint32") - _tirx.Cast("uint32", _tirx.clz(m))
        m = _tirx.Select(m == zero, zero, m ^ (one << top))
    highest = ir.const(31, "uint32") - _tirx.Cast("uint32", _tirx.clz(m))
    return _tirx.Select(m == zero, none, highest)
