"""Integer helpers for choosing kernel parameters (``tilelang.math``, upstream's names)."""

from __future__ import annotations

import operator

__all__ = ["cdiv", "next_power_of_2"]


def _as_int(value, name: str, func: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"tilelang.{func}: {name} must be an int, got {type(value).__name__} ({value!r})"
        ) from None


def _is_ir_expr(value) -> bool:
    from tvm_tirx import ir

    return isinstance(value, ir.Expr) and ir.is_prim_expr(value)


def cdiv(a: int, b: int) -> int:
    """Ceiling division ``ceil(a / b)`` of two Python ints; with a symbolic size (a
    ``T.dynamic``/``T.const`` dimension) the expression ``(a + b - 1) // b``, as upstream."""
    if _is_ir_expr(a) or _is_ir_expr(b):
        if not _is_ir_expr(a):
            _as_int(a, "a", "cdiv")
        if not _is_ir_expr(b) and _as_int(b, "b", "cdiv") == 0:
            raise ZeroDivisionError("tilelang.cdiv: b must not be zero")
        return (a + b - 1) // b
    a = _as_int(a, "a", "cdiv")
    b = _as_int(b, "b", "cdiv")
    if b == 0:
        raise ZeroDivisionError("tilelang.cdiv: b must not be zero")
    return -(-a // b)


def next_power_of_2(x: int) -> int:
    """The smallest power of two that is >= ``x`` (1 for ``x <= 1``)."""
    x = _as_int(x, "x", "next_power_of_2")
    if x <= 1:
        return 1
    return 1 << (x - 1).bit_length()
