"""Keep a kernel's own fp8 tensors (shared, fragment, local) as bytes on the CPU.

TIRx's ``FP8ComputeLegalize`` widens every fp8 temporary to float32 storage, but leaves
``reinterpret(As[i], "uint8")`` -- the form ``legalize_fp8_casts`` decodes fp8 values
with -- reading a float32 as a byte, which LLVM rejects ("Invalid bitcast"): an fp8
GEMM staging its operands in ``T.alloc_shared(..., "float8_e4m3fn")`` failed to compile.

Here each such tensor becomes a ``uint8`` tensor holding the fp8 codes: a load becomes
``reinterpret(bytes[i], fp8)``, a store stores the value's code. Codes are taken without
arithmetic where the value is itself a code (an encoded cast, a load, a constant, a
select between those), so ``reinterpret`` pairs cancel and no fp8 arithmetic remains.
Assumes: runs after ``legalize_fp8_casts`` (casts already encoded), scalar code.
Guarantees: no allocated tensor has an fp8 element type; the values are unchanged.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.ir.prim import expr as P

from ...lowering.stmt import alloc_of
from ...lowering.thread_utils import alloc, new_tensor

_FP8_TYPES = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
_REINTERPRET = "tirx.reinterpret"


def _is_call(x, name) -> bool:
    return isinstance(x, ir.Call) and getattr(x.op, "name", "") == name


def _code(value):
    """The uint8 code of the fp8 expression ``value``."""
    if _is_call(value, _REINTERPRET) and str(value.args[0].ty) == "uint8":
        return value.args[0]
    if isinstance(value, ir.FloatImm):
        code = np.array(value.value, dtype=_FP8_TYPES[str(value.ty)]).view(np.uint8)
        return _tirx.const(int(code), "uint8")
    if isinstance(value, P.Select):
        return _tirx.Select(value.condition, _code(value.true_value), _code(value.false_value))
    if _is_call(value, "prim.if_then_else"):
        cond, then, other = value.args
        return _tirx.if_then_else(cond, _code(then), _code(other))
    return _tirx.reinterpret(value, ty="uint8")


def _fold(call):
    """``reinterpret(reinterpret(code, fp8), "uint8")`` is ``code``."""
    if _is_call(call, _REINTERPRET) and str(call.ty) == "uint8":
        inner = call.args[0]
        if _is_call(inner, _REINTERPRET) and str(inner.args[0].ty) == "uint8":
            return inner.args[0]
    return call


def store_fp8_tensors_as_bytes(body):
    """Retype every allocated fp8 tensor of ``body`` to uint8 codes (see module doc)."""
    byte_of = {}

    def find(stmt):
        var = alloc_of(stmt)
        if var is not None and str(var.ty.dtype) in _FP8_TYPES:
            ty = var.ty
            byte_of[var.__chandle__()] = new_tensor(var.name, ty.shape, "uint8", str(ty.scope))

    tvm_ffi.structural_walk(body, find)
    if not byte_of:
        return body

    def on_bind(stmt):
        var = alloc_of(stmt)
        if var is not None and var.__chandle__() in byte_of:
            return alloc(byte_of[var.__chandle__()])
        return stmt

    def on_load(load):
        target = byte_of.get(load.source.__chandle__())
        if target is None:
            return load
        return _tirx.reinterpret(
            ir.TensorLoad(target, list(load.indices)), ty=str(load.source.ty.dtype)
        )

    def on_store(store):
        target = byte_of.get(store.dest.__chandle__())
        if target is None:
            return store
        return ir.TensorStore(target, list(store.indices), _code(store.value), store.loc)

    body = tvm_ffi.structural_map(body, [(ir.Bind, on_bind), (ir.TensorLoad, on_load)])
    body = tvm_ffi.structural_map(body, [(ir.TensorStore, on_store)])
    return tvm_ffi.structural_map(body, [(ir.Call, _fold)])


__all__ = ["store_fp8_tensors_as_bytes"]
