"""Scalar helpers of upstream's ``T`` namespace: ``T.Select``, ``T.let``/``T.Let``, ``T.assume``,
``T.align_up``, ``T.infinity`` of every float dtype, ``T.annotate_safe_value``, ``T.sync_grid``."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from . import builder
from .math import _expr


def Select(condition, true_value, false_value):  # noqa: N802 - upstream name
    """``true_value`` where ``condition`` holds, else ``false_value``. Both sides are evaluated
    (use ``T.if_then_else`` when a side must not run, e.g. an out-of-bounds load)."""
    condition = builder.unwrap(condition)
    if isinstance(condition, bool):
        return true_value if condition else false_value
    if not builder.is_expr(condition):
        raise errors.TraceError(
            f"T.Select: the condition must be a bool or an IR expression, got {condition!r}"
        )
    t = _expr(builder.unwrap(true_value), builder.unwrap(false_value))
    f = _expr(builder.unwrap(false_value), t)
    if str(t.ty) != str(f.ty):
        f = dtypes.convert(f, str(t.ty))
    return _tirx.Select(condition, t, f)


def let(var, value, body=None):
    """Bind the variable ``var`` (e.g. ``v = T.int32()``) to ``value`` for the rest of the
    scope (upstream's statement form), or, with ``body``, the expression ``body`` with
    ``var`` bound to ``value``."""
    value = builder.unwrap(value)
    if not isinstance(var, ir.Var) or not isinstance(var.ty, ir.PrimType):
        raise errors.TraceError(
            f"T.let: the first argument must be a scalar variable such as T.int32(), got {var!r}"
        )
    value = dtypes.convert(value, str(var.ty))
    if body is not None:
        return _tirx.Let(var, value, _expr(builder.unwrap(body)))
    builder.state()
    _T.emit_(ir.Bind(var, value, loc=builder.user_loc()))
    return var


def Let(expr, where):  # noqa: N802 - upstream name
    """The expression ``expr`` with the single binding ``where = {var: value}``."""
    if not isinstance(where, dict) or len(where) != 1:
        raise errors.TraceError("T.Let takes exactly one binding: T.Let(expr, where={v: value})")
    (var, value), = where.items()  # fmt: skip
    return let(var, value, expr)


def assume(cond):
    """Promise that ``cond`` holds here; the compiler may use it to drop checks. A Python
    ``False`` is an error; the promise is not checked at run time."""
    cond = builder.unwrap(cond)
    if isinstance(cond, bool):
        if not cond:
            raise errors.TraceError("T.assume(False): the assumption never holds")
        return None
    if not builder.is_expr(cond) or str(cond.ty) != "bool":
        raise errors.TraceError(f"T.assume needs a boolean condition, got {cond!r}")
    builder.state()
    _T.emit_(ir.Evaluate(_tirx.assume(cond), loc=builder.user_loc()))
    return None


def align_up(x, y):
    """``x`` rounded up to a multiple of ``y`` (``ceildiv(x, y) * y``); Python ints stay ints."""
    if isinstance(x, int) and isinstance(y, int):
        if y <= 0:
            raise errors.TraceError(f"T.align_up: the alignment must be positive, got {y}")
        return -(-x // y) * y
    x, y = _expr(x, y), _expr(y, x)
    return _tirx.ceildiv(x, y) * y


_NO_INF = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
           "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")  # fmt: skip


def infinity(dtype):
    """+inf of a floating ``dtype`` (float16/32/64, bfloat16, float8_e5m2...). Types without
    an infinity (float8_e4m3fn, the ``fnuz``/fp6/fp4 types) are an error: use
    ``T.max_value``."""
    name = dtypes.canonical(dtype)
    if not dtypes.is_float(name):
        raise errors.TraceError(f"T.infinity: {name} is not a floating-point type")
    if name in _NO_INF:
        raise errors.TraceError(
            f"T.infinity: {name} has no infinity; use T.max_value({name!r}) for its largest value"
        )
    return ir.const(float("inf"), name)


def annotate_safe_value(safe_value_map: dict):
    """Declare the value out-of-bounds loads of each global tensor read as (upstream: the
    padding of guarded ``T.Parallel`` loads). Not honoured yet: any value other than 0
    is an error naming the tensor, since tilelang's guarded loads read 0."""
    from ..lowering.region import is_tensor

    builder.state()
    if not isinstance(safe_value_map, dict):
        raise errors.TraceError("T.annotate_safe_value takes a dict {tensor: value}")
    for buf, value in safe_value_map.items():
        if not is_tensor(buf):
            raise errors.TraceError(
                f"T.annotate_safe_value: the keys must be tensors, got {type(buf).__name__}"
            )
        const = builder.static_value(builder.unwrap(value))
        if const is None or const != 0:
            raise errors.TraceError(
                f"T.annotate_safe_value: a safe value of {value!r} for {buf.name} is not "
                "supported yet (out-of-bounds loads of guarded T.Parallel loops read 0)"
            )


def sync_grid():
    """A barrier of every thread of the grid (upstream: a cooperative launch). Not supported:
    an error naming the line on every target (split the kernel in two instead)."""
    builder.state()
    raise errors.TraceError(
        "`T.sync_grid` is not supported on cpu or cuda (needs a cooperative launch); split "
        "the kernel at the grid barrier into two kernels"
    )


def index_to_coordinates(index, shape):
    """The row-major coordinates of the flat ``index`` in ``shape`` (one per dimension)."""
    if not len(shape):
        raise errors.TraceError("T.index_to_coordinates: shape must have at least one dimension")
    coords = []
    for extent in reversed(list(shape)):
        if isinstance(index, int) and isinstance(extent, int):
            coords.append(index % extent)
            index //= extent
        else:
            coords.append(_tirx.floormod(_expr(index, extent), _expr(extent, index)))
            index = _tirx.floordiv(_expr(index, extent), _expr(extent, index))
    return coords[::-1]


def transpose(src, dst, annotations=None):
    """``dst[..., j, i] = src[..., i, j]`` for whole tiles (upstream: shared-memory tiles; here
    any on-chip or global tensors). Emitted as a ``T.Parallel`` loop over ``src``, so every
    backend spreads it over the block's threads (CUDA inserts the barriers around it)."""
    from ..lowering.region import is_tensor
    from .loops import Parallel

    builder.state()
    src, dst = builder.unwrap(src), builder.unwrap(dst)
    for name, t in (("src", src), ("dst", dst)):
        if not is_tensor(t):
            raise errors.TraceError(
                f"T.transpose: {name} must be a whole tensor (e.g. a T.alloc_shared tile), got "
                f"{type(t).__name__}"
            )
    s_shape, d_shape = list(src.ty.shape), list(dst.ty.shape)
    if len(s_shape) < 2 or len(s_shape) != len(d_shape):
        raise errors.TraceError(
            f"T.transpose: needs two tensors of the same rank >= 2, got {src.name}{s_shape} "
            f"and {dst.name}{d_shape}"
        )
    want = [*s_shape[:-2], s_shape[-1], s_shape[-2]]
    for a, b in zip(want, d_shape):
        ca, cb = builder.static_value(a), builder.static_value(b)
        if ca is not None and cb is not None and ca != cb:
            raise errors.TraceError(
                f"T.transpose: {dst.name}{d_shape} is not the transpose of {src.name}{s_shape}"
            )
    names = ", ".join(f"i{k}" for k in range(len(s_shape)))
    for idx in builder.for_(Parallel(*s_shape), names):
        idx = list(idx) if isinstance(idx, tuple) else [idx]
        value = dtypes.convert(ir.TensorLoad(src, idx), str(dst.ty.dtype))
        builder.store(dst, [*idx[:-2], idx[-1], idx[-2]], value)
