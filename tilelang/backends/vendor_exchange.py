"""Warp exchanges, ``T.assume`` and ``T.__ldg`` on the ROCm and Metal targets.

The frontend (``tilelang/language/warp.py``, ``scalar.py``, ``hints.py``) spells these ops as
CUDA ``call_extern``s (``__shfl_xor_sync``, ``tl::warp_reduce_sum<32, 1>``, ``__ldg``...) and
TIRx's ``assume``. The HIP and MSL printers would copy them into source their compilers
reject. This pass, run last on thread-level code, gives each one a meaning there or refuses it
with ``T.<name> is not supported on the <target> target`` at the user's line:

ROCm (64-lane wavefronts; a T.* warp is 32 consecutive threads, i.e. half a wavefront):

* ``T.shfl_xor/down/up/sync(v, d, width)`` -> HIP's ``__shfl_xor/down/up(v, d, width)`` /
  ``__shfl(v, lane, width)``: with ``width <= 32`` the lane groups are CUDA's (the mask is
  not used: every lane of the warp must take part, as CUDA requires for a full mask);
  16-bit values only through ``__shfl_xor`` (``tl_hip.h``), others refused;
* ``T.warp_reduce_*(v)`` -> a butterfly of ``__shfl_xor(v, 16..1, 32)``;
* ``T.syncthreads_count/and/or`` are HIP built-ins (kept); ``T.sync_warp()`` ->
  ``__builtin_amdgcn_wave_barrier()``; ``T.assume`` -> ``__builtin_assume``;
* refused: ``T.any_sync/all_sync/ballot_sync/activemask/match_any_sync/match_all_sync``
  (their 32-bit masks and results describe a 32-lane warp, not a wavefront).

Metal: ``T.assume`` is dropped (a hint only), ``T.__ldg(A[i])`` becomes ``A[i]``; every warp
exchange and ``T.sync_warp`` is refused.

Assumes: thread-level code (after tile-op lowering). Guarantees: no exchange ``call_extern``
that the target's compiler lacks remains, and no ``assume``.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
from ..lowering.atomic_mem import NAMES as ATOMIC_MEM
from ..lowering.stmt import contains
from ..lowering.warp_intrinsics import (
    EXCHANGES,
    REDUCTION_COMBINE,
    REDUCTIONS,
    SHUFFLES,
    SYNC_WARP,
    VOTES,
)

_ASSUME = "prim.assume"
_LDG = "__ldg"
#: every name this pass looks at -> its T.* name
_NAMES = {**EXCHANGES, SYNC_WARP: "sync_warp", _LDG: "__ldg", **ATOMIC_MEM}
_HIP_SHUFFLES = {
    "__shfl_xor_sync": "__shfl_xor",
    "__shfl_down_sync": "__shfl_down",
    "__shfl_up_sync": "__shfl_up",
    "__shfl_sync": "__shfl",
}


def _extern_name(x):
    if isinstance(x, ir.Call) and getattr(x.op, "name", "") == "tirx.call_extern":
        return str(x.args[0].value)
    return None


def _is_assume(x) -> bool:
    return isinstance(x, ir.Call) and getattr(x.op, "name", "") == _ASSUME


_STMTS = (ir.TensorStore, ir.Bind, ir.Evaluate, ir.For, ir.While, ir.If)


class _Refusal(Exception):
    def __init__(self, name, why):
        super().__init__(name)
        self.name, self.why = name, why


def _loc_of(body, call_name):
    """The ``loc`` of the first statement whose own expressions call ``call_name``."""
    found = []

    def visit(stmt):
        if not found and getattr(stmt, "loc", None) is not None:
            parts = [
                getattr(stmt, f, None) for f in ("value", "cond", "condition", "min", "extent")
            ]
            parts += list(getattr(stmt, "indices", None) or ())
            for part in parts:
                if part is not None and contains(part, lambda x: _extern_name(x) == call_name):
                    found.append(stmt.loc)
                    break
        return stmt

    tvm_ffi.structural_map(body, [(_STMTS, visit)])
    return found[0] if found else None


def _rewrite(body, target, on_call):
    """``body`` with each exchange call replaced by ``on_call(name, call)``; a refusal
    becomes a CompileError at the user's line of the first refused call."""
    refused = []  # raised after the walk: an exception inside a callback loses its type

    def visit(call):
        name = _extern_name(call)
        if name not in _NAMES or refused:
            return call
        try:
            return on_call(name, call)
        except _Refusal as why:
            refused.append((name, why))
            return call

    body = tvm_ffi.structural_map(body, [(ir.Call, visit)])
    if refused:
        name, why = refused[0]
        message = f"T.{why.name} is not supported on the {target} target"
        if why.why:
            message += f" ({why.why})"
        raise errors.compile_error(message, _loc_of(body, name))
    return body


def _rocm_call(name, call):
    args = list(call.args[1:])
    ty = str(call.ty)
    tname = _NAMES[name]
    if name in SHUFFLES:
        value, lane, width = args[1], args[2], args[3]
        if ty in ("float16", "bfloat16") and name != "__shfl_xor_sync":
            raise _Refusal(tname, f"HIP has no 16-bit {_HIP_SHUFFLES[name]}; shuffle a float32")
        if isinstance(width, ir.IntImm) and int(width.value) > 32:
            raise _Refusal(tname, "width must be at most 32")
        return _tirx.call_extern(_HIP_SHUFFLES[name], value, lane, width, ty=ty)
    if name in REDUCTIONS:
        kind = REDUCTIONS[name][len("warp_reduce_") :]
        value = args[0]
        for offset in (16, 8, 4, 2, 1):
            other = _tirx.call_extern(
                "__shfl_xor", value, ir.const(offset, "int32"), ir.const(32, "int32"), ty=ty
            )
            value = REDUCTION_COMBINE[kind](value, other)
        return value
    if name == SYNC_WARP:
        return _tirx.call_extern("__builtin_amdgcn_wave_barrier", ty="void")
    if name in ATOMIC_MEM:
        raise _Refusal(tname, "no ROCm lowering yet")
    if name in VOTES:
        raise _Refusal(tname, "its 32-bit lane mask describes a CUDA warp, not a wavefront")
    return call  # __syncthreads_count/and/or and __ldg: HIP built-ins


def _metal_call(name, call):
    if name == _LDG:
        return call.args[1].args[0]  # __ldg(address_of(A[i])) -> A[i]
    if name in ATOMIC_MEM:
        raise _Refusal(_NAMES[name], "no Metal lowering yet")
    raise _Refusal(_NAMES[name], "no warp exchange lowering for Metal simdgroups yet")


def lower_rocm_exchanges(body):
    """``body`` for the HIP printer (module docstring, ROCm part)."""
    from .cuda.passes.lower_assume import lower_assume

    body = _rewrite(body, "rocm", _rocm_call)
    return lower_assume(body)


def lower_metal_exchanges(body):
    """``body`` for the MSL printer (module docstring, Metal part)."""
    body = _rewrite(body, "metal", _metal_call)
    if not contains(body, _is_assume):
        return body

    def on_eval(stmt):
        if _is_assume(stmt.value):
            return ir.Evaluate(ir.const(0, "int32"), loc=stmt.loc)
        return stmt

    def on_call(call):
        return ir.const(True, "bool") if _is_assume(call) else call

    body = tvm_ffi.structural_map(body, [(ir.Evaluate, on_eval)])
    return tvm_ffi.structural_map(body, [(ir.Call, on_call)])


def stage_rocm_exchanges(func, state):
    """Pipeline stage: :func:`lower_rocm_exchanges` on the function body."""
    return func.with_body(lower_rocm_exchanges(func.body))


def stage_metal_exchanges(func, state):
    """Pipeline stage: :func:`lower_metal_exchanges` on the function body."""
    return func.with_body(lower_metal_exchanges(func.body))
