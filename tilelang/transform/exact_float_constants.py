"""float64 constants written exactly in generated C/CUDA source.

TIRx's C printer writes a float64 constant in fixed notation with 15 decimals, so
``1e-20`` becomes ``0.000000000000000`` and ``1/3`` loses its last digits (a silent wrong
answer: ``T.rng_rand_float(bit=64)``'s ``2**-53`` scale printed as zero). Every float64
constant that this form would not give back exactly becomes
``__longlong_as_double(<its bit pattern>)`` (CUDA and HIP device intrinsic; folded by the
compiler).
"""

from __future__ import annotations

import math
import struct

import tvm_ffi
from tvm_tirx import ir, tirx

#: The device intrinsic that reinterprets an int64 bit pattern as a double.
BITS_TO_DOUBLE = "__longlong_as_double"


def printed_exactly(value: float) -> bool:
    """Whether the printer's ``%.15f`` form of ``value`` reads back as ``value``."""
    return not math.isfinite(value) or float(f"{value:.15f}") == value


def exact_float64_constants(body):
    """``body`` with each float64 constant the printer would round replaced by its bits."""

    def imm(node):
        if str(node.ty) != "float64" or printed_exactly(node.value):
            return node
        bits = struct.unpack("<q", struct.pack("<d", node.value))[0]
        return tirx.call_pure_extern(BITS_TO_DOUBLE, ir.const(bits, "int64"), ty="float64")

    return tvm_ffi.structural_map(body, [(ir.FloatImm, imm)])
