"""Element types: ``T.float16`` and friends, and conversion of Python values to IR."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

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


def canonical(name) -> str:
    """The canonical spelling of a dtype given as a string, a dtype object, a torch dtype or a PrimType."""
    if isinstance(name, ir.PrimType):
        return str(name)
    text = str(name)
    if text.startswith("torch."):
        text = text[len("torch.") :]
    text = _ALIASES.get(text, text)
    try:
        ir.PrimType(text)
    except Exception as err:  # noqa: BLE001 - report the user's spelling
        raise TypeError(f"unknown dtype {name!r}") from err
    return text


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
