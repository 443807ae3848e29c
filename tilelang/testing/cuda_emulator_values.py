"""Numpy types and elementwise operations of the CUDA emulator (``cuda_emulator``).

The emulator's errors, the numpy type of each TIRx dtype (bfloat16 and fp8 through
``ml_dtypes``), the numpy ufuncs of TIRx's binary, comparison and math operations, the
atomics, and the C string-literal unescaping of device ``printf``. No IR walking here:
``cuda_emulator._Machine`` evaluates expressions with these tables.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
from tvm_tirx.ir.prim import expr as P


class EmulationError(RuntimeError):
    """The emulated kernel did something a correct CUDA kernel must not do."""


class DeviceTrap(EmulationError):
    """The emulated kernel executed ``__trap()`` (a failed ``T.device_assert``)."""


_NP = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "bfloat16": ml_dtypes.bfloat16,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
_ML_FLOATS = tuple(
    np.dtype(x) for x in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)
)


def _floating(dtype) -> bool:
    """Whether a numpy type is a float (bfloat16 and fp8 included, which numpy does not know)."""
    return np.issubdtype(dtype, np.floating) or np.dtype(dtype) in _ML_FLOATS


_BIN = {
    P.Add: np.add,
    P.Sub: np.subtract,
    P.Mul: np.multiply,
    P.Min: np.minimum,
    P.Max: np.maximum,
    P.FloorMod: np.mod,
    P.BitwiseAnd: np.bitwise_and,
    P.BitwiseOr: np.bitwise_or,
    P.BitwiseXor: np.bitwise_xor,
    P.LShift: np.left_shift,
    P.RShift: np.right_shift,
}
_CMP = {
    P.LT: np.less,
    P.LE: np.less_equal,
    P.GT: np.greater,
    P.GE: np.greater_equal,
    P.EQ: np.equal,
    P.NE: np.not_equal,
}
_MATH = {
    "exp": np.exp,
    "isnan": np.isnan,
    "cos": np.cos,
    "sin": np.sin,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "fabs": np.abs,
    "abs": np.abs,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "floor": np.floor,
    "ceil": np.ceil,
    "expf": np.exp,
    "exp2f": np.exp2,
    "__expf": np.exp,
    "logf": np.log,
    "sqrtf": np.sqrt,
    "rsqrtf": lambda x: 1 / np.sqrt(x),
}


#: two-operand device math functions: CUDA's fmax/fmin family drops a NaN operand
MATH2 = {
    "fmaxf": np.fmax,
    "fminf": np.fmin,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "__hmax": np.fmax,
    "__hmin": np.fmin,
}


ATOMICS = {
    "atomicAdd": np.add,
    "atomicMax": np.maximum,
    "atomicMin": np.minimum,
    "tl::AtomicAdd": np.add,
    "tl::AtomicMax": np.maximum,
    "tl::AtomicMin": np.minimum,
}


def _c_unescape(text: str) -> str:
    """The characters a C string literal's text stands for (``\\n``, ``\\"``, ...)."""
    table = {"n": "\n", "t": "\t", "r": "\r"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), m.group(1)), text)


def np_dtype(dtype) -> type:
    """numpy type of a TIRx dtype string."""
    name = str(dtype)
    if name not in _NP:
        raise EmulationError(f"the emulator has no numpy type for {name}")
    return _NP[name]
