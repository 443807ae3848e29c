"""CUDA's rounding-mode arithmetic (``T.ieee_add(x, y, "rz")``, ``T.fma``, ``T.fast_rcp``...)
on targets that have no such instructions.

The frontend (``tilelang/language/math_ext.py``) traces these operations as calls of CUDA's
device functions (``__fadd_rz``, ``__fmaf_rn``, ``__dmul_rn``...), which the CUDA backend
prints as they are. On the CPU, ROCm and Metal backends this pass rewrites each call to the
ordinary operation when its rounding mode is round-to-nearest (``x + y``, C's ``fmaf``/``fma``
for ``x * y + z`` with one rounding, ``1 / x``, ``sqrt``), and raises a
:class:`tilelang.errors.CompileError` naming the call for a directed mode (``rz``, ``ru``,
``rd``): those targets have no per-instruction rounding mode, and a wrong last bit would be a
silent wrong answer.

Assumes: tile ops are lowered (scalar expressions only). Guarantees: no call of a name in
:data:`CUDA_FUNCTIONS` remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors

_F32 = {"add": "__fadd", "sub": "__fsub", "mul": "__fmul", "fmaf": "__fmaf", "fdiv": "__fdiv",
        "frcp": "__frcp", "fsqrt": "__fsqrt"}  # fmt: skip
_F64 = {"add": "__dadd", "sub": "__dsub", "mul": "__dmul", "fmaf": "__fma", "fdiv": "__ddiv",
        "frcp": "__drcp", "fsqrt": "__dsqrt"}  # fmt: skip
_MODES = ("rn", "rz", "ru", "rd")


def cuda_function(op: str, dtype: str, mode: str) -> str:
    """CUDA's device function of ``T.ieee_<op>`` on ``dtype`` operands in ``mode``."""
    if op == "frsqrt":
        return "__frsqrt_rn" if dtype == "float32" else "rsqrt"
    table = _F32 if dtype == "float32" else _F64
    return f"{table[op]}_{mode}"


#: every CUDA function name the frontend emits -> (op, rounding mode)
CUDA_FUNCTIONS = {
    f"{table[op]}_{mode}": (op, mode) for table in (_F32, _F64) for op in table for mode in _MODES
}
CUDA_FUNCTIONS["__frsqrt_rn"] = ("frsqrt", "rn")
#: ``T.fast_rcp`` on CUDA: ``__fdividef(1, x)`` (float32), an ordinary division elsewhere
FAST_RCP = "__fdividef"


def _portable(op: str, args, dtype: str, backend: str):
    one = ir.const(1.0, dtype)
    if op == "add":
        return args[0] + args[1]
    if op == "sub":
        return args[0] - args[1]
    if op == "mul":
        return args[0] * args[1]
    if op == "fdiv":
        return args[0] / args[1]
    if op == "frcp":
        return one / args[0]
    if op == "fsqrt":
        return _tirx.sqrt(args[0])
    if op == "frsqrt":
        return one / _tirx.sqrt(args[0])
    if op == "fmaf":  # C's fma: one rounding (libm on the CPU, the device library elsewhere)
        name = "fmaf" if dtype == "float32" and backend != "metal" else "fma"
        return _tirx.call_pure_extern(name, *args, ty=dtype)
    raise AssertionError(op)


def portable_ieee_calls(body, backend: str):
    """``body`` with CUDA's round-to-nearest device functions as ordinary arithmetic; a
    directed rounding mode is a :class:`~tilelang.errors.CompileError` on ``backend``."""

    def rewrite(call):
        op = getattr(call, "op", None)
        if getattr(op, "name", None) != "tirx.call_pure_extern" or not call.args:
            return call
        name = getattr(call.args[0], "value", None)
        if name == FAST_RCP and len(call.args) == 3:
            return call.args[1] / call.args[2]
        if name not in CUDA_FUNCTIONS:
            return call
        which, mode = CUDA_FUNCTIONS[name]
        if mode != "rn":
            raise errors.compile_error(
                f"T.ieee_{which}(..., rounding_mode={mode!r}) is CUDA's directed-rounding "
                f"instruction ({name}); the {backend} backend has no per-operation rounding "
                f"mode. Use rounding_mode='rn' there, or compile for CUDA.",
                call.loc,
            )
        return _portable(which, list(call.args[1:]), str(call.ty), backend)

    return tvm_ffi.structural_map(body, [(ir.Call, rewrite)])
