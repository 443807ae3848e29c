"""Upstream's explicit-width loads and stores: ``T.ldg32/64/128/256`` (global),
``T.lds32/64/128`` (shared) return the bits of consecutive elements; ``T.stg32/64/128/256``
and ``T.sts32/64/128`` store such bits.

``val = T.ldg128(X[i : i + 4])`` reads the 128 bits starting at ``X[i]`` (a tensor, a slice
or an element; a slice must hold exactly those bits) into ``128 / 32`` ``uint32`` lanes kept
in the thread's registers; ``T.stg128(Y[j : j + 4], val)`` writes them back element by element.
A 32-bit load returns a ``uint32`` expression, which ``T.stg32`` / ``T.sts32`` also take
(e.g. ``T.reinterpret(X[i], T.uint32)``). ``pred=`` skips the access where it is false (a
skipped load gives zeros). Wider values are :class:`WideBits`; index one with ``val[k]``.

Upstream emits single PTX vector instructions; here the element accesses are ordinary code
on every target (the CUDA compiler merges adjacent ones), so the bits moved are the same.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import dtypes, errors
from ..lowering.region import is_tensor
from . import builder
from .allocate import alloc_local


class WideBits:
    """``lanes`` ``uint32`` words loaded by a ``T.ldg*`` / ``T.lds*`` wider than 32 bits."""

    def __init__(self, cell, lanes: int):
        self.cell, self.lanes = cell, lanes

    def __getitem__(self, k):
        return self.cell[k]

    def __repr__(self):
        return f"WideBits({self.lanes} x uint32 in {self.cell.name})"


def _start(src, name: str, bits: int, scope: str):
    """(tensor, start indices, element bits, element count) of the ``bits`` at ``src``."""
    value = builder.unwrap(src)
    if isinstance(value, ir.TensorLoad):
        tensor, begins, extent = value.source, list(value.indices), None
    elif isinstance(value, ir.TensorRegion):
        tensor, begins = value.source, [r.begin for r in value.region]
        extent = 1
        for r in value.region:
            e = builder.static_value(r.extent)
            extent = None if e is None or extent is None else extent * e
        if extent is None:
            raise errors.TraceError(f"T.{name}: the slice must have a static extent, got {src}")
    elif is_tensor(value):
        tensor, begins = value, [ir.const(0, "int32")] * len(value.ty.shape)
        extent = 1
        for e in value.ty.shape:
            extent = None if builder.static_value(e) is None else extent * builder.static_value(e)
    else:
        raise errors.TraceError(
            f"T.{name} takes a tensor, a slice or an element such as X[i]; got {src!r}"
        )
    tensor_scope = str(tensor.ty.scope) or "global"
    if not tensor_scope.startswith(scope):
        raise errors.TraceError(f"T.{name}: {tensor.name} is in {tensor_scope} memory, not {scope}")
    dtype = str(tensor.ty.dtype)
    width = dtypes.bits(dtype)
    if dtypes.lanes(dtype) != 1 or width not in (8, 16, 32, 64) or bits % width:
        raise errors.TraceError(f"T.{name}: {dtype} elements cannot make up {bits} bits")
    count = bits // width
    if extent is not None and extent != count:
        raise errors.TraceError(
            f"T.{name}: {tensor.name}{'' if extent == 1 else ' slice'} holds {extent} {dtype} "
            f"elements; {bits} bits are {count} of them"
        )
    return tensor, begins, width, count


def _element(tensor, begins, k):
    return [*begins[:-1], begins[-1] + k if k else begins[-1]]


def _u(bits, value):
    """The bits of ``value`` as ``uint<bits>``. bfloat16 goes through float32 (exact both
    ways), as a target may hold bfloat16 values in float registers."""
    if str(value.ty) == "bfloat16":
        word = _tirx.reinterpret(_tirx.Cast("float32", value), ty="uint32")
        return _tirx.Cast("uint16", word >> ir.const(16, "uint32"))
    return _tirx.reinterpret(value, ty=f"uint{bits}")


def _from_bits(raw, dtype: str):
    """The ``dtype`` element whose bits are ``raw`` (an unsigned integer of its width)."""
    if dtype == "bfloat16":
        word = _tirx.Cast("uint32", raw) << ir.const(16, "uint32")
        return _tirx.Cast("bfloat16", _tirx.reinterpret(word, ty="float32"))
    return _tirx.reinterpret(raw, ty=dtype)


def _lanes_of(tensor, begins, width, count, pred):
    """The uint32 words of ``count`` elements of ``width`` bits (zeros where ``pred`` fails)."""
    words = []
    for k in range(count):
        raw = _u(width, ir.TensorLoad(tensor, _element(tensor, begins, k)))
        if width == 64:
            words += [
                _tirx.Cast("uint32", raw),
                _tirx.Cast("uint32", raw >> ir.const(32, "uint64")),
            ]
            continue
        part = _tirx.Cast("uint32", raw)
        shift = (k * width) % 32
        if shift:
            part = part << ir.const(shift, "uint32")
        if shift == 0:
            words.append(part)
        else:
            words[-1] = words[-1] | part
    if pred is not None:
        zero = ir.const(0, "uint32")
        words = [_tirx.if_then_else(pred, w, zero) for w in words]
    return words


def _load(name, src, bits, scope, pred=None):
    builder.state()
    tensor, begins, width, count = _start(src, name, bits, scope)
    pred = None if pred is None else builder.unwrap(pred)
    words = _lanes_of(tensor, begins, width, count, pred)
    if len(words) == 1:
        return words[0]
    cell = alloc_local((len(words),), "uint32")
    for k, word in enumerate(words):
        builder.store(cell, [k], word)
    return WideBits(cell, len(words))


def _words(value, lanes: int, name: str):
    if isinstance(value, WideBits):
        if value.lanes != lanes:
            raise errors.TraceError(
                f"T.{name}: the value holds {value.lanes * 32} bits, not {lanes * 32}"
            )
        return [value[k] for k in range(lanes)]
    value = builder.unwrap(value)
    if lanes == 1:
        if isinstance(value, int) and not isinstance(value, bool):
            return [ir.const(value & 0xFFFFFFFF, "uint32")]
        if builder.is_expr(value) and dtypes.bits(str(value.ty)) == 32:
            return [_u(32, value)]
    raise errors.TraceError(
        f"T.{name} stores {lanes * 32} bits: give it "
        + (
            "a 32-bit value"
            if lanes == 1
            else f"the value of a T.ldg{lanes * 32}/T.lds{lanes * 32}"
        )
        + f", got {value!r}"
    )


def _store(name, dst, value, bits, scope, pred=None):
    builder.state()
    tensor, begins, width, count = _start(dst, name, bits, scope)
    words = _words(value, bits // 32, name)
    dtype = str(tensor.ty.dtype)
    stores = []
    for k in range(count):
        if width == 64:
            lo, hi = words[2 * k], words[2 * k + 1]
            raw = _tirx.Cast("uint64", lo) | (_tirx.Cast("uint64", hi) << ir.const(32, "uint64"))
        else:
            word, shift = words[(k * width) // 32], (k * width) % 32
            raw = word >> ir.const(shift, "uint32") if shift else word
            raw = _tirx.Cast(f"uint{width}", raw)
        stores.append((_element(tensor, begins, k), _from_bits(raw, dtype)))
    with builder.if_(True if pred is None else pred) as frame, frame.then() as taken:
        if taken:
            for idx, elem in stores:
                builder.store(tensor, idx, elem)


def ldg32(src, pred=None):
    """32 bits of global memory at ``src`` as a ``uint32``."""
    return _load("ldg32", src, 32, "global", pred)


def ldg64(src, pred=None):
    """64 bits of global memory at ``src`` (two uint32 words)."""
    return _load("ldg64", src, 64, "global", pred)


def ldg128(src, pred=None):
    """128 bits of global memory at ``src`` (four uint32 words)."""
    return _load("ldg128", src, 128, "global", pred)


def ldg256(src, pred=None):
    """256 bits of global memory at ``src`` (eight uint32 words)."""
    return _load("ldg256", src, 256, "global", pred)


def lds32(src):
    """32 bits of shared memory at ``src`` as a ``uint32``."""
    return _load("lds32", src, 32, "shared")


def lds64(src):
    """64 bits of shared memory at ``src`` (two uint32 words)."""
    return _load("lds64", src, 64, "shared")


def lds128(src):
    """128 bits of shared memory at ``src`` (four uint32 words)."""
    return _load("lds128", src, 128, "shared")


def stg32(dst, value, pred=None):
    """Store 32 bits to global memory at ``dst``."""
    _store("stg32", dst, value, 32, "global", pred)


def stg64(dst, value, pred=None):
    """Store 64 bits to global memory at ``dst``."""
    _store("stg64", dst, value, 64, "global", pred)


def stg128(dst, value, pred=None):
    """Store 128 bits to global memory at ``dst``."""
    _store("stg128", dst, value, 128, "global", pred)


def stg256(dst, value, pred=None):
    """Store 256 bits to global memory at ``dst``."""
    _store("stg256", dst, value, 256, "global", pred)


def sts32(dst, value):
    """Store 32 bits to shared memory at ``dst``."""
    _store("sts32", dst, value, 32, "shared")


def sts64(dst, value):
    """Store 64 bits to shared memory at ``dst``."""
    _store("sts64", dst, value, 64, "shared")


def sts128(dst, value):
    """Store 128 bits to shared memory at ``dst``."""
    _store("sts128", dst, value, 128, "shared")
