"""``T.atomic_load`` / ``T.atomic_store`` for each backend.

The frontend (``tilelang/language/atomic_ext.py``) records ``tl.atomic_load(&A[i], order)``
(an expression of A's element type) and ``tl.atomic_store(&A[i], value, order)`` (a
statement) as ``call_extern``s; ``order`` is the C++ ``std::memory_order`` number.

* CPU (:func:`lower_cpu`): a block's threads run one after another, so a plain load / store
  has the same meaning;
* CUDA (:func:`lower_cuda`): ``__nv_atomic_load_n`` / ``__nv_atomic_store_n`` (CUDA 12.8+)
  at device scope; float32 / float64 go through their same-width integer bit pattern
  (``__int_as_float`` / ``__float_as_int`` and the 64-bit pair), since these built-ins take
  integral types only.

Assumes: run on the backend's thread-level code (CPU: before ``lower_threads`` is fine).
Guarantees: no ``tl.atomic_load`` / ``tl.atomic_store`` remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .stmt import contains

ATOMIC_LOAD = "tl.atomic_load"
ATOMIC_STORE = "tl.atomic_store"
NAMES = {ATOMIC_LOAD: "atomic_load", ATOMIC_STORE: "atomic_store"}
_DEVICE_SCOPE = 3  # __NV_THREAD_SCOPE_DEVICE
#: float type -> (integer type, bits-to-float, float-to-bits)
_BITS = {
    "float32": ("int", "__int_as_float", "__float_as_int"),
    "float64": ("long long", "__longlong_as_double", "__double_as_longlong"),
}
_INT_OF = {"float32": "int32", "float64": "int64"}


def _name(x):
    if isinstance(x, ir.Call) and getattr(x.op, "name", "") == "tirx.call_extern":
        return str(x.args[0].value)
    return None


def _uses(body) -> bool:
    return contains(body, lambda x: _name(x) in NAMES)


def lower_cpu(body):
    """Plain loads and stores (module docstring)."""
    if not _uses(body):
        return body

    def on_eval(stmt):
        call = stmt.value
        if _name(call) != ATOMIC_STORE:
            return stmt
        load = call.args[1].args[0]  # address_of(A[i])
        return ir.TensorStore(load.source, list(load.indices), call.args[2], loc=stmt.loc)

    def on_call(call):
        return call.args[1].args[0] if _name(call) == ATOMIC_LOAD else call

    body = tvm_ffi.structural_map(body, [(ir.Evaluate, on_eval)])
    return tvm_ffi.structural_map(body, [(ir.Call, on_call)])


def _as_int_pointer(address, dtype):
    if dtype not in _BITS:
        return address
    return _tirx.call_extern(f"({_BITS[dtype][0]}*)", address, ty="uint64")  # printed as is


def lower_cuda(body):
    """``__nv_atomic_load_n`` / ``__nv_atomic_store_n`` (module docstring)."""
    if not _uses(body):
        return body
    scope = ir.const(_DEVICE_SCOPE, "int32")

    def on_call(call):
        name = _name(call)
        if name == ATOMIC_LOAD:
            address, order = call.args[1], call.args[2]
            dtype = str(call.ty)
            if dtype in _BITS:
                bits = _tirx.call_extern(
                    "__nv_atomic_load_n", _as_int_pointer(address, dtype), order, scope,
                    ty=_INT_OF[dtype],
                )  # fmt: skip
                return _tirx.call_extern(_BITS[dtype][1], bits, ty=dtype)
            return _tirx.call_extern("__nv_atomic_load_n", address, order, scope, ty=dtype)
        if name == ATOMIC_STORE:
            address, value, order = call.args[1], call.args[2], call.args[3]
            dtype = str(value.ty)
            if dtype in _BITS:
                value = _tirx.call_extern(_BITS[dtype][2], value, ty=_INT_OF[dtype])
            return _tirx.call_extern(
                "__nv_atomic_store_n", _as_int_pointer(address, dtype), value, order, scope,
                ty="void",
            )  # fmt: skip
        return call

    return tvm_ffi.structural_map(body, [(ir.Call, on_call)])


def stage_cuda(func, state):
    """Pipeline stage: :func:`lower_cuda` on the function body."""
    return func.with_body(lower_cuda(func.body))
