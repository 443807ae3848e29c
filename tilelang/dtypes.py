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
    "uint": "uint32",
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
        """Width in bits of one scalar element (a vector type counts one lane)."""
        return bits(self)

    @property
    def lanes(self) -> int:
        """Number of vector lanes (1 for a scalar type such as ``float16``)."""
        return lanes(self)

    @property
    def itemsize(self) -> int:
        """Bytes of one (possibly vector) element, rounded up for sub-byte types."""
        return (bits(self) * lanes(self) + 7) // 8

    def with_lanes(self, n: int) -> dtype:
        """The vector type of ``n`` lanes of this element type (``float32.with_lanes(4)``)."""
        base = scalar_name(self)
        return dtype(base if int(n) == 1 else f"{base}x{int(n)}")

    def as_torch(self):
        """The torch dtype of this element type (``T.float16.as_torch() is torch.float16``)."""
        return as_torch(self)


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


def scalar_name(name) -> str:
    """The element type of a vector dtype (``float32x4`` -> ``float32``); scalars unchanged."""
    text = canonical(name)
    match = re.fullmatch(r"(.+?)x(\d+)", text)
    return match.group(1) if match else text


def lanes(name) -> int:
    """Vector lanes of a dtype (``float32x4`` -> 4, ``float16`` -> 1)."""
    match = re.fullmatch(r"(.+?)x(\d+)", canonical(name))
    return int(match.group(2)) if match else 1


def bits(name) -> int:
    """Width in bits of one (scalar) element."""
    text = scalar_name(name)
    if text == "bool":
        return 8
    match = re.match(r"[a-z]*?(\d+)", text)
    return int(match.group(1))


_TORCH_NAMES = {"float4_e2m1fn": "float4_e2m1fn_x2", "bool": "bool"}


def as_torch(name):
    """The torch dtype of ``name``; a TypeError when torch has none (e.g. vector types)."""
    import torch

    text = canonical(name)
    attr = getattr(torch, _TORCH_NAMES.get(text, text), None)
    if not isinstance(attr, torch.dtype):
        raise TypeError(f"dtype {text!r} has no torch equivalent")
    return attr


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

# Every further upstream element-type name (issue 10): sub-byte / fp8 variants and the C-style
# aliases upstream exports (``T.float`` is float32, ``T.int`` int32, ``T.long`` int64...).
float8_e8m0fnu = dtype("float8_e8m0fnu")
float8_e4m3fnuz = dtype("float8_e4m3fnuz")
float8_e5m2fnuz = dtype("float8_e5m2fnuz")
float8_e4m3b11fnuz = dtype("float8_e4m3b11fnuz")
float8_e3m4 = dtype("float8_e3m4")
float6_e2m3fn = dtype("float6_e2m3fn")
float6_e3m2fn = dtype("float6_e3m2fn")
float4_e2m1fn = dtype("float4_e2m1fn")
int4 = dtype("int4")
float_, double, half = float32, float64, float16
int_, long, short, uint = int32, int64, int16, uint32

_VECTOR_BASES = (
    "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e3m4",
    "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
)  # fmt: skip
VECTOR_TYPES = {
    f"{base}x{n}": dtype(f"{base}x{n}") for base in _VECTOR_BASES for n in (2, 4, 8, 16, 32, 64)
}


# ---------------------------------------------------------------- upstream's FP4 helpers
def is_float4_e2m1fn(value) -> bool:
    """Whether ``value`` is the packed 4-bit FP4 E2M1 type (``float4_e2m1fn``)."""
    return canonical(value) == "float4_e2m1fn"


def is_float4_e2m1_unpacked(value) -> bool:
    """Whether ``value`` is upstream's 8-bit "unpacked" FP4 storage type: tilelang has no
    such type, so this is False for every dtype it knows (unknown names raise
    :class:`UnknownDTypeError`)."""
    canonical(value)
    return False


def is_float4(value) -> bool:
    """Whether ``value`` is an FP4 E2M1 type (packed; tilelang has no unpacked form)."""
    return is_float4_e2m1fn(value) or is_float4_e2m1_unpacked(value)


def resolve_torch_storage_dtype(value) -> dtype:
    """The tilelang dtype of the torch storage of ``value`` (``float4_e2m1fn`` is stored two
    to a byte in torch's ``float4_e2m1fn_x2``, which tilelang names ``float4_e2m1fn``)."""
    name = str(as_torch(value)).replace("torch.", "")
    return dtype("float4_e2m1fn" if name == "float4_e2m1fn_x2" else canonical(name))


def __getattr__(name: str):
    """``_TORCH_DTYPE_TO_STR``: upstream's private table torch dtype -> element type name
    (its example helpers import it from ``tilelang.language.dtypes``)."""
    if name != "_TORCH_DTYPE_TO_STR":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import torch

    table = {}
    for attr in dir(torch):
        value = getattr(torch, attr, None)
        if isinstance(value, torch.dtype) and value not in table:
            try:
                table[value] = canonical(value)
            except Exception:  # noqa: BLE001 - torch dtypes tilelang has no name for
                continue
    return table
