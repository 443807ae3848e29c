"""Tile-op frontends: ``T.copy``, ``T.fill``, ``T.clear``, ``T.gemm``, ``T.reduce_*``, ``T.cumsum``, ``T.atomic_*``.

Each normalises its operands into tensor regions and records one ``tl.*`` call,
tagged with the user's source line, into the kernel being traced.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from ..lowering.region import region_extents, to_region
from ..ops.atomic import op as _atomic
from ..ops.copy import op as _copy
from ..ops.cumsum import op as _cumsum
from ..ops.fill import op as _fill
from ..ops.gemm import op as _gemm
from ..ops.gemm.op import GemmWarpPolicy
from ..ops.reduce import op as _reduce
from . import builder
from .ws_schedule import tagged as _ws_tagged

__all__ = ["GemmWarpPolicy"]


def _emit(call: ir.Call) -> None:
    _T.emit_(ir.Evaluate(call, loc=call.loc))


def _operand(value):
    """An operand as the IR value it carries (IRBuilder receipts unwrapped)."""
    return builder.unwrap(value)


def copy(
    src,
    dst,
    coalesced_width=None,
    disable_tma=False,
    eviction_policy=None,
    loop_layout=None,
    annotations=None,
):
    """Copy a tile: ``T.copy(A[by * bM, k * bK], A_shared)``; any scope to any scope.

    ``annotations`` (upstream): ``coalesced_width``, ``disable_tma`` and ``eviction_policy``
    entries take precedence over the keyword arguments; other hints are ignored (as upstream
    does for hints a target does not understand)."""
    builder.state()
    ann = _annotations(annotations, "T.copy")
    coalesced_width = ann.get("coalesced_width", coalesced_width)
    disable_tma = ann.get("disable_tma", disable_tma)
    eviction_policy = ann.get("eviction_policy", eviction_policy)
    src, dst = _operand(src), _operand(dst)
    src_ext, dst_ext = region_extents(src), region_extents(dst)
    if src_ext is None and dst_ext is None:
        src_r, dst_r = to_region(src, what="T.copy src"), to_region(dst, what="T.copy dst")
    else:
        src_r = to_region(src, dst_ext, what="T.copy src")
        dst_r = to_region(dst, region_extents(src_r), what="T.copy dst")
    loc = builder.user_loc()
    call = _copy.COPY.make(
        src_r,
        dst_r,
        loc=loc,
        coalesced_width=-1 if coalesced_width is None else int(coalesced_width),
        disable_tma=bool(disable_tma),
        eviction_policy=eviction_policy or "",
    )
    _copy.matched_axes(*map(_copy.RegionView.of, (src_r, dst_r)), loc)  # early shape check
    with _ws_tagged(ann, "T.copy"):
        _emit(call)


def _annotations(annotations, what):
    if annotations is None:
        return {}
    if not isinstance(annotations, dict):
        raise errors.TraceError(f"{what}: annotations must be a dict, got {annotations!r}")
    return dict(annotations)


def fill(buffer, value, annotations=None):
    """Set every element of a tile to ``value`` (``annotations``: upstream's scheduling
    hints, accepted and ignored)."""
    builder.state()
    ann = _annotations(annotations, "T.fill")
    region = to_region(_operand(buffer), what="T.fill buffer")
    value = dtypes.scalar_value(value, str(region.source.ty.dtype), "T.fill value")
    with _ws_tagged(ann, "T.fill"):
        _emit(_fill.FILL.make(region, value, loc=builder.user_loc()))


def clear(buffer):
    """Set every element of a tile to zero."""
    fill(buffer, 0)


def gemm(
    A,  # noqa: N803 - upstream API
    B,  # noqa: N803
    C,  # noqa: N803
    transpose_A=False,  # noqa: N803
    transpose_B=False,  # noqa: N803
    policy=GemmWarpPolicy.Square,
    clear_accum=False,
    k_pack=1,
    wg_wait=0,
    annotations=None,
):
    """``C += A @ B`` on tiles (C's element type accumulates); ``annotations``: upstream's
    scheduling hints (``T.WSID`` names the op for a warp-specialization schedule)."""
    builder.state()
    ann = _annotations(annotations, "T.gemm")
    regions = [
        to_region(_operand(x), what=f"T.gemm {n}") for x, n in ((A, "A"), (B, "B"), (C, "C"))
    ]
    call = _gemm.GEMM.make(
        *regions,
        loc=builder.user_loc(),
        transpose_A=bool(transpose_A),
        transpose_B=bool(transpose_B),
        policy=int(policy),
        clear_accum=static_clear_accum(clear_accum, regions[2]),
        k_pack=int(k_pack),
        wg_wait=int(wg_wait),
    )
    _gemm.gemm_dims(_gemm.GEMM.view(call))  # early shape check, names the user's line
    with _ws_tagged(ann, "T.gemm"):
        _emit(call)


def static_clear_accum(clear_accum, c_region) -> bool:
    """``clear_accum`` as a bool. A run-time condition (``clear_accum=(j == 0)`` in a loop;
    ``bool()`` of it was silently False) becomes ``if cond: T.clear(C)`` before an
    accumulating gemm, which computes the same."""
    flag = builder.unwrap(clear_accum)
    if not builder.is_expr(flag) or builder.static_value(flag) is not None:
        value = builder.static_value(flag)
        return bool(flag if value is None else value)
    with builder.if_(flag) as branch, branch.then():
        fill(c_region, 0)
    return False


def reduce(buffer, out, reduce_type: str, dim: int, clear: bool, batch=1, annotations=None):
    """Reduce ``buffer`` over ``dim`` into ``out``.

    ``batch`` (upstream: how many outputs share one cross-thread exchange) only affects
    speed and is validated, not used. ``annotations={"nan_propagate": True}`` makes a
    float max/min/absmax NaN when any input is NaN; other hints are ignored.
    """
    builder.state()
    if reduce_type not in _reduce.REDUCE_TYPES:
        raise errors.TraceError(f"unknown reduce_type {reduce_type!r}")
    if not isinstance(batch, int) or batch < 1:
        raise errors.TraceError(f"T.reduce: batch must be an int >= 1, got {batch!r}")
    ann = _annotations(annotations, "T.reduce")
    nan = bool(ann.get("nan_propagate", False))
    src = to_region(_operand(buffer), what="T.reduce src")
    dst = to_region(_operand(out), what="T.reduce dst")
    if nan and not (
        reduce_type in ("max", "min", "absmax") and dtypes.is_float(str(dst.source.ty.dtype))
    ):
        raise errors.TraceError(
            f"T.reduce_{reduce_type}: nan_propagate applies to float max/min/absmax only"
        )
    call = _reduce.REDUCE.make(
        src,
        dst,
        loc=builder.user_loc(),
        reduce_type=reduce_type,
        dim=int(dim),
        clear=bool(clear),
        nan_propagate=nan,
    )
    _reduce.reduce_axes(_reduce.REDUCE.view(call))
    with _ws_tagged(ann, "T.reduce"):
        _emit(call)


def _with_nan(annotations, nan_propagate):
    """``annotations`` plus upstream's ``nan_propagate=`` keyword (the keyword wins)."""
    if not nan_propagate:
        return annotations
    return {**(annotations or {}), "nan_propagate": True}


def reduce_max(
    buffer, out, dim: int = -1, clear: bool = True, batch=1, nan_propagate=False, annotations=None
):
    """Row/column maximum. ``nan_propagate=True``: NaN when any input is NaN (float types)."""
    reduce(buffer, out, "max", dim, clear, batch, _with_nan(annotations, nan_propagate))


def reduce_min(
    buffer, out, dim: int = -1, clear: bool = True, batch=1, nan_propagate=False, annotations=None
):
    """Row/column minimum. ``nan_propagate=True``: NaN when any input is NaN (float types)."""
    reduce(buffer, out, "min", dim, clear, batch, _with_nan(annotations, nan_propagate))


def reduce_sum(buffer, out, dim: int = -1, clear: bool = True, batch=1, annotations=None):
    """Row/column sum."""
    reduce(buffer, out, "sum", dim, clear, batch, annotations)


def reduce_abssum(buffer, out, dim: int = -1, clear: bool = True, batch=1, annotations=None):
    """Row/column sum of absolute values."""
    reduce(buffer, out, "abssum", dim, clear, batch, annotations)


def reduce_absmax(
    buffer, out, dim: int = -1, clear: bool = True, batch=1, nan_propagate=False, annotations=None
):
    """Row/column maximum of absolute values. ``nan_propagate=True``: NaN when any input is NaN (float types)."""
    reduce(buffer, out, "absmax", dim, clear, batch, _with_nan(annotations, nan_propagate))


def reduce_bitand(buffer, out, dim: int = -1, clear: bool = True, batch=1, annotations=None):
    reduce(buffer, out, "bitand", dim, clear, batch, annotations)


def reduce_bitor(buffer, out, dim: int = -1, clear: bool = True, batch=1, annotations=None):
    reduce(buffer, out, "bitor", dim, clear, batch, annotations)


def reduce_bitxor(buffer, out, dim: int = -1, clear: bool = True, batch=1, annotations=None):
    reduce(buffer, out, "bitxor", dim, clear, batch, annotations)


def cumsum(src, dst=None, dim: int = 0, reverse: bool = False, annotations=None, _op="sum"):
    """Inclusive prefix sum along ``dim`` (in place when ``dst`` is omitted)."""
    builder.state()
    _annotations(annotations, f"T.cum{_op}")
    what = f"T.cum{_op}"
    src_r = to_region(_operand(src), what=f"{what} src")
    dst_r = src_r if dst is None else to_region(_operand(dst), what=f"{what} dst")
    call = _cumsum.CUMSUM.make(
        src_r, dst_r, loc=builder.user_loc(), dim=int(dim), reverse=bool(reverse), op=_op
    )
    _cumsum.cumsum_axes(_cumsum.CUMSUM.view(call))  # early shape check, names the user's line
    _emit(call)


def cummax(src, dst=None, dim: int = 0, reverse: bool = False, annotations=None):
    """Inclusive prefix maximum along ``dim`` (in place when ``dst`` is omitted)."""
    cumsum(src, dst, dim, reverse, annotations, _op="max")


def _atomic_op(kind, dst, value, memory_order=None, annotations=None, use_tma=False):
    st = builder.state()
    st.uses_atomics = True
    dst = _operand(dst)
    value = _operand(value)
    value_ext = region_extents(value)
    is_region = value_ext is not None or (
        isinstance(value, ir.TensorLoad) and region_extents(dst) is not None
    )
    if is_region:
        value_r = to_region(value, region_extents(dst), what=f"T.atomic_{kind} value")
        dst_r = to_region(dst, region_extents(value_r), what=f"T.atomic_{kind} dst")
        operand = value_r
        views = (_copy.RegionView.of(value_r), _copy.RegionView.of(dst_r))
        _copy.matched_axes(*views, builder.user_loc(), op=f"T.atomic_{kind}")  # early check
    else:
        if use_tma:
            raise errors.TraceError(
                f"T.atomic_{kind}(use_tma=True) needs a tile value (a shared region added into "
                "a global region), not a scalar (as upstream)"
            )
        dst_r = to_region(dst, what=f"T.atomic_{kind} dst")
        operand = dtypes.scalar_value(value, str(dst_r.source.ty.dtype), f"T.atomic_{kind} value")
    call = _atomic.ATOMIC.make(
        dst_r,
        operand,
        loc=builder.user_loc(),
        kind=kind,
        value_is_region=bool(is_region),
        memory_order=memory_order or "",
        use_tma=bool(use_tma),
    )
    with _ws_tagged(_annotations(annotations, f"T.atomic_{kind}"), f"T.atomic_{kind}"):
        _emit(call)


_MEMORY_ORDERS = ("relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst")


def _check_order(memory_order, what):
    if memory_order is not None and memory_order not in _MEMORY_ORDERS:
        raise errors.TraceError(
            f"{what}: memory_order must be one of {_MEMORY_ORDERS}, got {memory_order!r}"
        )


def _atomic_prev(kind, dst, value, memory_order, annotations=None):
    """``return_prev=True``: one element's atomic update whose old value is returned."""
    from ..ops.atomic import prev as _prev
    from . import allocate

    st = builder.state()
    st.uses_atomics = True
    dst, value = _operand(dst), _operand(value)
    if region_extents(value) is not None or not isinstance(dst, ir.TensorLoad):
        raise errors.TraceError(
            f"T.atomic_{kind}(return_prev=True) needs one element as dst (A[i]) and a scalar "
            "value (as upstream, tile-region atomics do not return previous values)"
        )
    dst_r = to_region(dst, what=f"T.atomic_{kind} dst")
    dtype = str(dst_r.source.ty.dtype)
    operand = dtypes.scalar_value(value, dtype, f"T.atomic_{kind} value")
    cell = allocate.alloc_local((1,), dtype)
    call = _prev.ATOMIC_PREV.make(
        dst_r,
        operand,
        to_region(cell, what="prev"),
        loc=builder.user_loc(),
        kind=kind,
        memory_order=memory_order or "",
    )
    with _ws_tagged(_annotations(annotations, f"T.atomic_{kind}"), f"T.atomic_{kind}"):
        _emit(call)
    return ir.TensorLoad(cell, [ir.const(0, "int32")])


def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """Atomically ``dst += value`` (a scalar element or a whole tile); with
    ``return_prev=True`` (one element) returns the value ``dst`` held before.
    ``use_tma=True``: a shared tile added into a global region by one bulk tensor reduction
    (``cp.reduce.async.bulk.tensor``, CUDA sm_90+; a compile error on other targets, as
    upstream; ordinary atomics where TMA cannot express the region, ``tl.tma`` says why)."""
    _check_order(memory_order, "T.atomic_add")
    if return_prev:
        if use_tma:
            raise errors.TraceError("T.atomic_add: use_tma=True cannot return_prev")
        return _atomic_prev("add", dst, value, memory_order, annotations)
    _atomic_op("add", dst, value, memory_order, annotations, use_tma=use_tma)


def atomic_max(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically ``dst = max(dst, value)``; ``return_prev=True``: returns the old value."""
    _check_order(memory_order, "T.atomic_max")
    if return_prev:
        return _atomic_prev("max", dst, value, memory_order, annotations)
    _atomic_op("max", dst, value, memory_order, annotations)


def atomic_min(dst, value, memory_order=None, return_prev=False, annotations=None):
    """Atomically ``dst = min(dst, value)``; ``return_prev=True``: returns the old value."""
    _check_order(memory_order, "T.atomic_min")
    if return_prev:
        return _atomic_prev("min", dst, value, memory_order, annotations)
    _atomic_op("min", dst, value, memory_order, annotations)
