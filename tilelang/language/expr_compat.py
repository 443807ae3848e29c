"""Upstream's expression surface on TIRx expressions, installed at import.

``expr.dtype``: the element type of a scalar expression (``x.dtype``, ``A[i].dtype``,
``T.exp(x).dtype``), as upstream's ``PrimExpr.dtype``; TIRx spells it ``expr.ty`` and had no
``dtype`` for scalars (tensors already had one).

Python integer literals in ``&``, ``|`` and ``^`` are typed as the other operand, as upstream
does. TIRx turns the Python int of ``x & 0xFFFFFFFF`` into a 32-bit constant before it looks at
``x``: with a uint32 ``x`` that is a raw "cannot make uint from negative value" check failure,
and with an int64 ``x`` the literal silently wraps (``x & 2**40`` became ``x & 0``). Upstream
types the literal as ``x``'s integer type. This module installs that rule on TIRx's operator
overloads; a literal that does not fit ``x``'s type is a TraceError naming both.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .. import errors

_SYMBOL = {"and": "&", "or": "|", "xor": "^"}


def _fits(value: int, dtype: str) -> bool:
    bits = int("".join(ch for ch in dtype if ch.isdigit()) or 32)
    if dtype.startswith("uint"):
        return 0 <= value < 2**bits
    return -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)


def _typed_literal(expr, value, op: str):
    """``value`` (a Python int) as a constant of ``expr``'s integer type, or None to leave the
    operands to TIRx (``expr`` not an integer scalar)."""
    try:
        dtype = str(expr.expr_ty())
    except Exception:  # noqa: BLE001 - not a primitive-valued expression
        return None
    if not (dtype.startswith("int") or dtype.startswith("uint")) or "x" in dtype:
        return None
    if not _fits(value, dtype):
        raise errors.TraceError(
            f"`{expr} {_SYMBOL[op]} {value}`: the integer literal {value} does not fit "
            f'{expr}\'s type {dtype}; cast one operand first (e.g. T.Cast("int64", ...) or '
            f"T.uint32({value}))"
        )
    return ir.const(value, dtype)


def _wrap(original, op: str):
    def method(self, other):
        if isinstance(other, int) and not isinstance(other, bool):
            typed = _typed_literal(self, other, op)
            if typed is not None:
                other = typed
        return original(self, other)

    method.__name__ = original.__name__
    method.__doc__ = original.__doc__
    method.__tilelang_int_literal__ = True
    return method


def _install_dtype() -> None:
    prim = ir.PrimType
    if "dtype" not in prim.__expr_properties__:
        # a dict of PrimType's own: Type's default is shared by every type class
        prim.__expr_properties__ = {
            **prim.__expr_properties__,
            "dtype": lambda ty, expr: tvm_ffi.dtype(str(ty)),
        }


def _install_literals() -> None:
    from tvm_tirx.ir import _prim_expr_overload as overload

    for op in ("and", "or", "xor"):
        for name in (f"__{op}__", f"__r{op}__"):
            original = getattr(overload.ExprOp, name)
            if getattr(original, "__tilelang_int_literal__", False):
                continue
            wrapped = _wrap(original, op)
            setattr(overload.ExprOp, name, wrapped)
            # ExprOperand (Var, TensorLoad, ...) dispatches through the module-level aliases
            setattr(overload, name, wrapped)


_install_dtype()
_install_literals()
