"""More scalar math of upstream's ``T.*``: inverse trigonometric and hyperbolic functions,
two-argument float functions, bit counts, ``T.fma``/``T.fmul``, the IEEE operations with an
explicit rounding mode (``T.ieee_add(x, y, "rz")``...) and ``T.fast_rcp``.

Targets:
- CUDA prints the libdevice functions (``acosf``, ``atan2f``, ``__fadd_rz``, ``__frcp_rn``,
  ``__fmaf_rd``...); half and bfloat16 operands are computed in float32.
- The CPU (LLVM), ROCm and Metal backends compute the same functions through TIRx's
  intrinsic lowering. The IEEE operations with a rounding mode other than ``"rn"`` are CUDA's
  directed-rounding instructions and raise a clear error on those targets (the rounding mode is
  not a run-time property there); ``"rn"`` is the ordinary operation everywhere.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
from ..transform.ieee_math import FAST_RCP, cuda_function
from . import builder
from . import math as _math

_ROUNDING_MODES = ("rn", "rz", "ru", "rd")


def _float_arg(name: str, x, like=None):
    """``x`` as a float expression (a Python number takes ``like``'s dtype, else float32)."""
    x = builder.unwrap(x)
    if isinstance(x, int | float) and not isinstance(x, bool):
        dtype = str(like.ty) if builder.is_expr(like) else "float32"
        return ir.const(float(x), dtype)
    if not builder.is_expr(x):
        raise errors.TraceError(f"T.{name} takes float expressions, got {x!r}")
    if not str(x.ty).startswith(("float", "bfloat")):
        raise errors.TraceError(f"T.{name} takes float expressions, got one of dtype {x.ty}")
    return x


def _float_args(name: str, *args):
    """The float operands of a several-argument function, Python numbers matched to an IR one."""
    like = next((builder.unwrap(a) for a in args if builder.is_expr(builder.unwrap(a))), None)
    exprs = [_float_arg(name, a, like) for a in args]
    dtypes = {str(e.ty) for e in exprs}
    if len(dtypes) > 1:
        raise errors.TraceError(
            f"T.{name} takes operands of one float dtype, got {sorted(dtypes)}; cast them first"
        )
    return exprs


def _in_float32(fn, *args):
    """``fn`` of 16-bit float operands computed in float32 and rounded back once (CUDA and LLVM
    have no half-precision form of these functions)."""
    dtype = str(args[0].ty)
    if dtype in ("float16", "bfloat16"):
        return fn(*(a.astype("float32") for a in args)).astype(dtype)
    return fn(*args)


def _unary_float(name: str, fn):
    def wrapped(x):
        return _in_float32(fn, _float_arg(name, x))

    wrapped.__name__ = wrapped.__qualname__ = name
    wrapped.__doc__ = f"Elementwise ``{name}`` of a float expression."
    return wrapped


def _binary_float(name: str, fn, doc: str):
    def wrapped(x1, x2):
        return _in_float32(fn, *_float_args(name, x1, x2))

    wrapped.__name__ = wrapped.__qualname__ = name
    wrapped.__doc__ = doc
    return wrapped


acos = _unary_float("acos", _tirx.acos)
acosh = _unary_float("acosh", _tirx.acosh)
asin = _unary_float("asin", _tirx.asin)
asinh = _unary_float("asinh", _tirx.asinh)
atan = _unary_float("atan", _tirx.atan)
atanh = _unary_float("atanh", _tirx.atanh)
cosh = _unary_float("cosh", _tirx.cosh)
sinh = _unary_float("sinh", _tirx.sinh)
nearbyint = _unary_float("nearbyint", _tirx.nearbyint)
atan2 = _binary_float("atan2", _tirx.atan2, "``atan(x1 / x2)`` in the quadrant of ``(x2, x1)``.")
copysign = _binary_float("copysign", _tirx.copysign, "``|x1|`` with the sign of ``x2``.")
fmod = _binary_float("fmod", _tirx.fmod, "Remainder of ``x1 / x2`` rounded toward zero (C fmod).")
hypot = _binary_float("hypot", _tirx.hypot, "``sqrt(x1**2 + x2**2)`` without overflow.")
nextafter = _binary_float(
    "nextafter", _tirx.nextafter, "The next representable value after ``x1`` toward ``x2``."
)


def fabs(x):
    """Absolute value of a float expression."""
    return _tirx.abs(_float_arg("fabs", x))


def ldexp(x1, x2):
    """``x1 * 2**x2`` (``x2`` an integer), exact: C's ``ldexpf``/``ldexp`` on every target."""
    x = _float_arg("ldexp", x1)
    exponent = builder.unwrap(x2)
    if isinstance(exponent, int) and not isinstance(exponent, bool):
        exponent = ir.const(exponent, "int32")
    if not builder.is_expr(exponent) or not str(exponent.ty).startswith(("int", "uint")):
        raise errors.TraceError(f"T.ldexp takes an integer exponent, got {x2!r}")
    exponent = _tirx.Cast("int32", exponent)

    def call(v, k):
        name = "ldexp" if str(v.ty) == "float64" else "ldexpf"
        return _tirx.call_pure_extern(name, v, k, ty=str(v.ty))

    dtype = str(x.ty)
    if dtype in ("float16", "bfloat16"):
        return call(x.astype("float32"), exponent).astype(dtype)
    return call(x, exponent)


def _int_arg(name: str, x):
    x = builder.unwrap(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return ir.const(x, "int32")
    if not builder.is_expr(x) or not str(x.ty).startswith(("int", "uint")):
        raise errors.TraceError(f"T.{name} takes an integer expression, got {x!r}")
    return x


def popcount(x):
    """Number of set bits of an integer."""
    return _tirx.popcount(_int_arg("popcount", x))


def clz(x):
    """Number of leading zero bits of a 32- or 64-bit integer (undefined for 0, as in TIR)."""
    return _tirx.clz(_int_arg("clz", x))


def bitwise_not(x):
    """``~x`` of an integer."""
    return _tirx.bitwise_not(_int_arg("bitwise_not", x))


def likely(cond):
    """``cond`` itself: upstream's branch-probability hint. The hint is dropped (the CUDA and
    LLVM compilers lay out the branches themselves); the value is unchanged."""
    cond = builder.unwrap(cond)
    if isinstance(cond, bool) or builder.is_expr(cond):
        return cond
    raise errors.TraceError(f"T.likely takes a condition, got {cond!r}")


def cdiv(lhs, rhs):
    """``ceil(lhs / rhs)`` for integers (upstream's spelling of ``T.ceildiv``)."""
    return _math.ceildiv(lhs, rhs)


def _check_mode(name: str, rounding_mode) -> str:
    if rounding_mode not in _ROUNDING_MODES:
        raise ValueError(
            f"T.{name}: rounding_mode must be one of {list(_ROUNDING_MODES)}, got {rounding_mode!r}"
        )
    return rounding_mode


def _ieee(op: str, operands, rounding_mode: str):
    """CUDA's device function of ``op`` in ``rounding_mode`` (other targets:
    ``tilelang/transform/ieee_math.py``)."""
    mode = _check_mode(f"ieee_{op}", rounding_mode)
    exprs = _float_args(f"ieee_{op}", *operands)
    dtype = str(exprs[0].ty)
    if dtype not in ("float32", "float64"):
        raise errors.TraceError(
            f"T.ieee_{op} takes float32 or float64 operands (CUDA's directed-rounding "
            f"instructions), got {dtype}"
        )
    name = cuda_function(op, dtype, mode)
    return _tirx.call_pure_extern(name, *exprs, ty=dtype, loc=builder.user_loc())


def ieee_add(x, y, rounding_mode="rn"):
    """``x + y`` rounded by ``rounding_mode`` (``rn``, ``rz``, ``ru``, ``rd``)."""
    return _ieee("add", (x, y), rounding_mode)


def ieee_sub(x, y, rounding_mode="rn"):
    """``x - y`` rounded by ``rounding_mode``."""
    return _ieee("sub", (x, y), rounding_mode)


def ieee_mul(x, y, rounding_mode="rn"):
    """``x * y`` rounded by ``rounding_mode`` (never contracted into an FMA)."""
    return _ieee("mul", (x, y), rounding_mode)


def ieee_fmaf(x, y, z, rounding_mode="rn"):
    """``x * y + z`` with one rounding by ``rounding_mode``."""
    return _ieee("fmaf", (x, y, z), rounding_mode)


def ieee_fdiv(x, y, rounding_mode="rn"):
    """``x / y`` rounded by ``rounding_mode``."""
    return _ieee("fdiv", (x, y), rounding_mode)


def ieee_frcp(x, rounding_mode="rn"):
    """``1 / x`` rounded by ``rounding_mode``."""
    return _ieee("frcp", (x,), rounding_mode)


def ieee_fsqrt(x, rounding_mode="rn"):
    """``sqrt(x)`` rounded by ``rounding_mode``."""
    return _ieee("fsqrt", (x,), rounding_mode)


def ieee_frsqrt(x):
    """``1 / sqrt(x)`` rounded to nearest."""
    return _ieee("frsqrt", (x,), "rn")


def fma(x, y, z):
    """``x * y + z`` as one fused multiply-add (one rounding)."""
    return _ieee("fmaf", (x, y, z), "rn")


def fmul(x, y):
    """``x * y`` rounded to nearest, never contracted into an FMA with a following add."""
    return _ieee("mul", (x, y), "rn")


def fast_rcp(x):
    """Approximate ``1 / x`` (CUDA's ``rcp.approx``; exact division on other targets)."""
    x = _float_arg("fast_rcp", x)
    if str(x.ty) != "float32":
        return ir.const(1.0, str(x.ty)) / x
    return _tirx.call_pure_extern(FAST_RCP, ir.const(1.0, "float32"), x, ty="float32")
