"""Scalar expressions: math functions, min/max, casts, ``T.if_then_else``, ``T.infinity``."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import dtypes


def _expr(x, like=None):
    if isinstance(x, ir.Expr):
        return x
    if like is not None and isinstance(like, ir.Expr):
        return dtypes.convert(x, str(like.ty))
    if isinstance(x, float):
        return ir.const(x, "float32")
    if isinstance(x, bool):
        return ir.const(x, "bool")
    return ir.const(x, "int32")


def _unary(fn):
    def wrapped(x):
        return fn(_expr(x))

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = f"Elementwise ``{fn.__name__}``."
    return wrapped


exp = _unary(_tirx.exp)
exp2 = _unary(_tirx.exp2)
exp10 = _unary(_tirx.exp10)
log = _unary(_tirx.log)
log2 = _unary(_tirx.log2)
log10 = _unary(_tirx.log10)
log1p = _unary(_tirx.log1p)
sqrt = _unary(_tirx.sqrt)
rsqrt = _unary(_tirx.rsqrt)
tanh = _unary(_tirx.tanh)
sin = _unary(_tirx.sin)
cos = _unary(_tirx.cos)
tan = _unary(_tirx.tan)
erf = _unary(_tirx.erf)
sigmoid = _unary(_tirx.sigmoid)
floor = _unary(_tirx.floor)
ceil = _unary(_tirx.ceil)
_round_even = _unary(_tirx.round)
trunc = _unary(_tirx.trunc)
isnan = _unary(_tirx.isnan)
isinf = _unary(_tirx.isinf)
isfinite = _unary(_tirx.isfinite)


def round(x, rounding_mode="ties-to-even"):  # noqa: A001 - upstream name
    """Nearest integer: halves to even (``"ties-to-even"``, the default) or away from zero
    (``"ties-away-from-zero"``), upstream's two rounding modes."""
    if rounding_mode == "ties-to-even":
        return _round_even(x)
    if rounding_mode != "ties-away-from-zero":
        from .. import errors

        raise errors.TraceError(
            f"T.round: rounding_mode must be 'ties-to-even' or 'ties-away-from-zero', "
            f"got {rounding_mode!r}"
        )
    x = _expr(x)
    whole = _tirx.trunc(x)
    half = ir.const(0.5, str(x.ty))
    step = _tirx.Select(x < ir.const(0, str(x.ty)), ir.const(-1, str(x.ty)), ir.const(1, str(x.ty)))
    # x - trunc(x) is exact, so the tie test is too (floor(|x| + 0.5) is not: 0.49999997)
    return _tirx.Select(_tirx.abs(x - whole) >= half, whole + step, whole)


def abs(x):  # noqa: A001 - upstream name
    """Absolute value."""
    if isinstance(x, int | float):
        return x if x >= 0 else -x
    return _tirx.abs(x)


def pow(x, y):  # noqa: A001 - upstream name
    """``x ** y``."""
    x = _expr(x, y)
    return _tirx.pow(x, _expr(y, x))


def max(a, b, *rest):  # noqa: A001 - upstream name
    """Maximum of IR or Python values."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        out = a if a >= b else b
    else:
        out = _tirx.max(_expr(a, b), _expr(b, a))
    return max(out, *rest) if rest else out


def min(a, b, *rest):  # noqa: A001 - upstream name
    """Minimum of IR or Python values."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        out = a if a <= b else b
    else:
        out = _tirx.min(_expr(a, b), _expr(b, a))
    return min(out, *rest) if rest else out


def clamp(dst, min_val, max_val):
    """``min(max(dst, min_val), max_val)`` (upstream's parameter names)."""
    return min(max(dst, min_val), max_val)


def if_then_else(cond, then_value, else_value):
    """``then_value`` where ``cond`` holds, else ``else_value`` (only the chosen side is read)."""
    if isinstance(cond, bool):
        return then_value if cond else else_value
    t = _expr(then_value, else_value)
    e = _expr(else_value, t)
    return _tirx.if_then_else(cond, t, e)


def infinity(dtype):
    """+inf of a floating ``dtype`` (float16/32/64, bfloat16, float8_e5m2...); see
    :func:`tilelang.language.scalar.infinity` for the types without one."""
    from .scalar import infinity as _infinity

    return _infinity(dtype)


def max_value(dtype):
    """Largest finite value of ``dtype``."""
    return _tirx.max_value(ty=dtypes.canonical(dtype))


def min_value(dtype):
    """Smallest finite value of ``dtype``."""
    return _tirx.min_value(ty=dtypes.canonical(dtype))


def cast(value, dtype):
    """``value`` converted to ``dtype``."""
    return dtypes.convert(value, dtypes.canonical(dtype))


def Cast(dtype, value):  # noqa: N802 - TVMScript's spelling
    """``value`` converted to ``dtype`` (argument order of TVMScript's ``T.Cast``)."""
    return cast(value, dtype)


def reinterpret(value, dtype):
    """The bits of ``value`` read as ``dtype`` (same width), e.g. float32 <-> int32.
    Upstream's order is ``(value, dtype)``; ``(dtype, value)`` is accepted too."""
    if isinstance(value, str) and not isinstance(dtype, str):
        value, dtype = dtype, value
    return _tirx.reinterpret(_expr(value), ty=dtypes.canonical(dtype))


def address_of(load):
    """The address of a tensor element ``A[i]`` (for ``T.call_extern``)."""
    return _tirx.address_of(load)


def ceildiv(a, b):
    """``ceil(a / b)`` for integers (Python ints stay Python ints)."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return _tirx.ceildiv(_expr(a), _expr(b))


def floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return _tirx.floordiv(_expr(a), _expr(b))


def floormod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    return _tirx.floormod(_expr(a), _expr(b))


def truncdiv(a, b):
    return _tirx.truncdiv(_expr(a), _expr(b))


def truncmod(a, b):
    return _tirx.truncmod(_expr(a), _expr(b))


def shift_left(a, b):
    return _tirx.shift_left(_expr(a), _expr(b))


def shift_right(a, b):
    return _tirx.shift_right(_expr(a), _expr(b))


def bitwise_and(a, b):
    return _tirx.bitwise_and(_expr(a, like=b), _expr(b, like=a))


def bitwise_or(a, b):
    return _tirx.bitwise_or(_expr(a, like=b), _expr(b, like=a))


def bitwise_xor(a, b):
    return _tirx.bitwise_xor(_expr(a, like=b), _expr(b, like=a))
