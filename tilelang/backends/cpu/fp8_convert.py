"""Conversions to float8 on the CPU, rounded to nearest even, subnormals included.

TIRx's FP8 legalization on LLVM builds the fp8 code from the float's bits by truncation:
subnormal results are truncated or flushed (0.01488 -> 0.01367 in e4m3fn, 0.00293 -> 0)
and out-of-range values wrap to unrelated codes. Every cast to ``float8_e4m3fn`` /
``float8_e5m2`` is rewritten here into integer arithmetic on the source's bits that gives
torch's result (which agrees with ml_dtypes wherever the value is in range):

- round to nearest, ties to even, for normal and subnormal results alike;
- e4m3fn has no infinity: beyond 448 (and for +-inf) it saturates to +-448 as torch does
  (ml_dtypes gives NaN there); e5m2 overflows to +-inf;
- NaN gives the NaN code ``0x7F`` with the sign kept.

float16/bfloat16 sources are widened to float32 exactly first; float64 and integer sources
are converted from float64 bits (one rounding). Casts from fp8 are decoded from the code's
bits as well (TIRx's decoding gets subnormals wrong too: code 0x00 read as 2**-7).
The stage after it stores the kernel's own fp8 tensors as ``uint8`` codes
(:func:`store_fp8_tiles_as_bytes`). Assumes: scalar expressions only (tile ops lowered).
Guarantees: no ``Cast`` to or from an fp8 type remains.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.ir.prim import expr as P
from tvm_tirx.script import tirx as _T

from ...lowering.stmt import alloc_of, make_alloc, uses_any

#: fp8 type -> (exponent bias, mantissa bits, largest finite code, code on overflow)
_FP8 = {
    "float8_e4m3fn": (7, 3, 0x7E, 0x7E),  # saturates to 448
    "float8_e5m2": (15, 2, 0x7B, 0x7C),  # overflows to inf
}
#: fp8 type -> (smallest code with all exponent bits set that is NaN, whether that
#: exponent's codes are inf (mantissa 0) / NaN (others), as in IEEE)
_SPECIAL = {"float8_e4m3fn": (0x7F, False), "float8_e5m2": (0x7D, True)}
_NAN_CODE = 0x7F
#: source float -> (bits, mantissa bits, exponent bias)
_SOURCES = {"float32": (32, 23, 127), "float64": (64, 52, 1023)}


def _i64(value):
    return _tirx.const(value, "int64")


def _round_shift(v, shift):
    """``v >> shift`` rounded to nearest even (``v`` non-negative int64, ``shift`` >= 1)."""
    one = _i64(1)
    q = v >> shift
    rem = v & ((one << shift) - one)
    half = one << (shift - one)
    up = _tirx.Or(rem > half, _tirx.And(rem == half, (q & one) == one))
    return q + _tirx.Select(up, one, _i64(0))


def _widened(value):
    """``value`` as a float32/float64 that holds it exactly (or as closely as one rounding)."""
    ty = str(value.ty)
    if ty in _SOURCES:
        return value
    if ty in ("float16", "bfloat16"):
        return value.astype("float32")
    return value.astype("float64")


def encode_fp8(value, target: str):
    """The expression converting ``value`` to the fp8 type ``target`` (see module doc)."""
    bias, mbits, max_code, overflow_code = _FP8[target]
    value = _widened(value)
    width, src_mbits, src_bias = _SOURCES[str(value.ty)]
    bits = _tirx.reinterpret(value, ty=f"uint{width}")
    sign = (bits >> _tirx.const(width - 1, f"uint{width}")).astype("int64")
    mag = (bits & _tirx.const((1 << (width - 1)) - 1, f"uint{width}")).astype("int64")
    inf_bits = ((1 << (width - 1 - src_mbits)) - 1) << src_mbits
    exponent = mag >> _i64(src_mbits)
    # results of normal fp8 exponent: re-bias, then round the mantissa to `mbits` bits (a
    # carry out of the mantissa bumps the exponent, as it must)
    rebias = (src_bias - bias) << src_mbits
    normal = _round_shift(mag - _i64(rebias), _i64(src_mbits - mbits))
    # subnormal results: the significand (hidden bit included) in units of the smallest
    # fp8 subnormal 2**(1 - bias - mbits); shifts past the significand give 0
    significand = (mag & _i64((1 << src_mbits) - 1)) | _i64(1 << src_mbits)
    shift = _i64(src_mbits + 1 - bias - mbits + src_bias) - exponent
    shift = _tirx.min(_tirx.max(shift, _i64(1)), _i64(src_mbits + 2))
    subnormal = _round_shift(significand, shift)
    is_normal = exponent >= _i64(src_bias - bias + 1)
    code = _tirx.Select(is_normal, normal, subnormal)
    code = _tirx.Select(code > _i64(max_code), _i64(overflow_code), code)
    code = _tirx.Select(mag > _i64(inf_bits), _i64(_NAN_CODE), code)
    byte = (code | (sign << _i64(7))).astype("uint8")
    return _tirx.reinterpret(byte, ty=target)


def decode_fp8(value):
    """The float32 expression of the fp8 ``value`` (exact: every fp8 value is a float32)."""
    source = str(value.ty)
    bias, mbits, _, _ = _FP8[source]
    first_nan, has_inf = _SPECIAL[source]
    code = _tirx.reinterpret(value, ty="uint8").astype("int64")
    sign = code >> _i64(7)
    mag = code & _i64(0x7F)
    exponent = mag >> _i64(mbits)
    mantissa = mag & _i64((1 << mbits) - 1)
    normal = ((exponent + _i64(127 - bias)) << _i64(23)) | (mantissa << _i64(23 - mbits))
    # subnormals: mantissa * 2**(1 - bias - mbits), exact in float32
    tiny = mantissa.astype("float32") * _tirx.const(2.0 ** (1 - bias - mbits), "float32")
    tiny_bits = _tirx.reinterpret(tiny, ty="uint32").astype("int64")
    bits = _tirx.Select(exponent == _i64(0), tiny_bits, normal)
    if has_inf:
        bits = _tirx.Select(mag == _i64(first_nan - 1), _i64(0x7F800000), bits)
    bits = _tirx.Select(mag >= _i64(first_nan), _i64(0x7FC00000), bits)
    bits = bits | (sign << _i64(31))
    return _tirx.reinterpret(bits.astype("uint32"), ty="float32")


def _rewrite(cast):
    target, source = str(cast.ty), str(cast.value.ty)
    if target == source:
        return cast
    if target in _FP8:
        value = decode_fp8(cast.value) if source in _FP8 else cast.value
        return encode_fp8(value, target)
    if source in _FP8:
        decoded = decode_fp8(cast.value)
        return decoded if target == "float32" else decoded.astype(target)
    return cast


def _is_reinterpret(x) -> bool:
    return isinstance(x, ir.Call) and getattr(x.op, "name", "") == "tirx.reinterpret"


def _as_bytes(value):
    """``value`` (an fp8 expression) as its ``uint8`` code: a reinterpret undone, a constant
    encoded, a select taken apart (TIRx's FP8 legalization would compute those in float32
    and then reinterpret a float32 as a byte)."""
    if _is_reinterpret(value) and str(value.args[0].ty) == "uint8":
        return value.args[0]
    if isinstance(value, ir.FloatImm):
        dtype = getattr(ml_dtypes, str(value.ty))
        return _tirx.const(int(np.array([value.value], dtype=dtype).view(np.uint8)[0]), "uint8")
    if isinstance(value, P.Select):
        return _tirx.Select(
            value.condition, _as_bytes(value.true_value), _as_bytes(value.false_value)
        )
    if isinstance(value, ir.Call) and getattr(value.op, "name", "") == "prim.if_then_else":
        cond, a, b = value.args
        return _tirx.if_then_else(cond, _as_bytes(a), _as_bytes(b))
    return _tirx.reinterpret(value, ty="uint8")


def _fold_reinterprets(x):
    """``reinterpret(reinterpret(b, fp8), uint8)`` -> ``b``."""
    if _is_reinterpret(x) and str(x.ty) == "uint8" and str(x.args[0].ty) in _FP8:
        return _as_bytes(x.args[0])
    return x


def store_fp8_tiles_as_bytes(body):
    """The kernel's own fp8 tensors (shared, fragment, local) become ``uint8`` tensors of
    the same shape: a load reads the code, a store writes it. Afterwards no fp8 value
    lives in an on-chip tensor or a temporary: TIRx's FP8 legalization on LLVM promotes
    fp8 temporaries (e.g. the common subexpression of a load-modify-store of an fp8
    fragment) to float32 and then emits an invalid ``bitcast float to i8``."""
    byte_tiles, originals = {}, []

    def on_bind(stmt):
        var = alloc_of(stmt)
        if var is None or str(var.ty.dtype) not in _FP8:
            return stmt
        ty = var.ty
        new = ir.Var(var.name, _T.Tensor(tuple(ty.shape), "uint8", scope=str(ty.scope)))
        byte_tiles[var.__chandle__()] = (new, str(ty.dtype))
        originals.append(var)
        return make_alloc(new)

    source = body
    body = tvm_ffi.structural_map(body, [(ir.Bind, on_bind)])
    if not byte_tiles:
        return body

    def on_load(x):
        hit = byte_tiles.get(x.source.__chandle__())
        if hit is None:
            return x
        return _tirx.reinterpret(ir.TensorLoad(hit[0], list(x.indices)), ty=hit[1])

    def on_store(st):
        hit = byte_tiles.get(st.dest.__chandle__())
        if hit is None:
            return st
        value = st.value
        if str(value.ty) != hit[1]:  # an implicit conversion (a float constant, say)
            value = _rewrite(P.Cast(hit[1], value))
        return ir.TensorStore(hit[0], list(st.indices), _as_bytes(value), st.loc)

    body = tvm_ffi.structural_map(body, [(ir.TensorLoad, on_load), (ir.TensorStore, on_store)])
    body = tvm_ffi.structural_map(body, [(ir.Call, _fold_reinterprets)])
    # a tile used other than by element loads and stores (a view of it, an address) keeps
    # its fp8 type: then nothing is changed
    return source if uses_any(body, originals) else body


def legalize_fp8_casts(body):
    """Rewrite every cast to or from an fp8 type in ``body`` into :func:`encode_fp8` /
    :func:`decode_fp8` (the next stage, :func:`store_fp8_tiles_as_bytes`, stores the
    kernel's fp8 tiles as bytes); every fp8 constant becomes its code as well."""
    body = tvm_ffi.structural_map(body, [(ir.FloatImm, _rewrite_const)])
    return tvm_ffi.structural_map(body, [(P.Cast, _rewrite)])


def _rewrite_const(imm):
    """An fp8 constant as its code computed by :func:`encode_fp8` (TIRx's own lowering of fp8
    constants turned inf into 1.0, NaN into 1.5 and flushed e4m3fn subnormals to 0)."""
    target = str(imm.ty)
    if target not in _FP8:
        return imm
    return encode_fp8(_tirx.const(float(imm.value), "float64"), target)


__all__ = ["decode_fp8", "encode_fp8", "legalize_fp8_casts", "store_fp8_tiles_as_bytes"]
