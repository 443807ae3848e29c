"""Element types: ``T.float16`` and friends, and conversion of Python values to IR."""

from __future__ import annotations

import re

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from . import errors

_ALIASES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "int": "int32",
    "float8_e4m3": "float8_e4m3fn",
    "e4m3_float8": "float8_e4m3fn",
    "e5m2_float8": "float8_e5m2",
}


class dtype(str):  # noqa: N801 - upstream spells it T.float16, a dtype object
    """A named element type. Compares equal to its string name; calling it converts a value."""

    def __new__(cls, name: str):
        return super().__new__(cls, canonical(name))

    def __call__(self, value=None):
        if value is None:
            return ir.Var("v", str(self))
        return convert(value, str(self), cast=True)

    @property
    def bits(self) -> int:
        return bits(self)


_KNOWN = re.compile(
    r"(bool|u?int(1|4|8|16|32|64)|float(16|32|64)|bfloat16|float[468]_e\w+|handle|void)"
    r"(x\d+)?"
)


class UnknownDTypeError(errors.TileLangError, TypeError):
    """A dtype name tilelang does not know (``"float33"``)."""


def _caller_where() -> str:
    """``file:line`` of the innermost frame outside tilelang (the user's annotation)."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))  # the tilelang package
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not name.startswith(here) and not frame.f_code.co_filename.startswith("<"):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def canonical(name) -> str:
    """The canonical spelling of a dtype given as a string, a dtype object, a torch dtype or a PrimType."""
    if isinstance(name, ir.PrimType):
        return str(name)
    text = str(name)
    if text.startswith("torch."):
        text = text[len("torch.") :]
    text = _ALIASES.get(text, text)
    valid = _KNOWN.fullmatch(text) is not None
    if valid:
        try:
            ir.PrimType(text)
        except Exception:  # noqa: BLE001 - report the user's spelling
            valid = False
    if not valid:
        where = _caller_where()
        raise UnknownDTypeError(
            f"{where + ': ' if where else ''}unknown dtype {name!r} (expected a name such as "
            "float16, bfloat16, float32, int8, int32, uint8, bool, float8_e4m3fn)"
        )
    return text


def scalar_value(value, dtype: str, what: str):
    """``value`` converted to a ``dtype`` scalar expression for ``what`` (a store, T.fill's
    value...); a TraceError naming ``what`` when it is not a number or scalar expression."""
    out = convert(value, dtype)
    if not (isinstance(out, ir.Expr) and ir.is_prim_expr(out)):
        kind = "a tensor" if hasattr(getattr(out, "ty", None), "shape") else type(value).__name__
        raise errors.TraceError(
            f"{what}: expected a number or a scalar expression of type {dtype}, got {kind} "
            f"{value!r}"
        )
    return out


def bits(name) -> int:
    """Width in bits of one element."""
    text = canonical(name)
    if text == "bool":
        return 8
    digits = "".join(ch for ch in text.split("_")[0] if ch.isdigit())
    return int(digits)


def is_float(name) -> bool:
    return canonical(name).startswith(("float", "bfloat"))


def convert(value, dtype: str, cast: bool = True):
    """``value`` as an IR expression of ``dtype`` (Python numbers become constants)."""
    dtype = canonical(dtype)
    if not isinstance(value, ir.Expr) and hasattr(value, "__tvm_ffi_object__"):
        value = value.__tvm_ffi_object__()  # a deferred ``a == b`` / ``a != b``
    if isinstance(value, bool):
        return ir.const(value, dtype) if dtype != "bool" else ir.const(value, "bool")
    if isinstance(value, int | float):
        if not is_float(dtype) and isinstance(value, float):
            if value in (float("inf"), float("-inf")):
                return (_tirx.max_value if value > 0 else _tirx.min_value)(ty=dtype)
            value = int(value)
        return ir.const(value, dtype)
    if isinstance(value, ir.Expr) and ir.is_prim_expr(value):
        if str(value.ty) != dtype and cast:
            return value.astype(dtype)
        return value
    return value


bool_ = dtype("bool")
int8, int16, int32, int64 = (dtype(f"int{b}") for b in (8, 16, 32, 64))
uint8, uint16, uint32, uint64 = (dtype(f"uint{b}") for b in (8, 16, 32, 64))
float16, float32, float64 = dtype("float16"), dtype("float32"), dtype("float64")
bfloat16 = dtype("bfloat16")
float8_e4m3fn = float8_e4m3 = dtype("float8_e4m3fn")
float8_e5m2 = dtype("float8_e5m2")
