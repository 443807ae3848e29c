"""Compute half-precision math in float32 on the CPU.

The LLVM codegen has no float16 lowering for some intrinsics (``erf``, ``log1p``:
"unknown intrinsic") and expands others in the element type (``exp10`` as
``exp(x * ln 10)`` rounds the product to float16, losing about 3 digits). x86 has
no half-precision arithmetic anyway, so every float16/bfloat16 math call is
rewritten to ``cast(half, f(cast(float32, x)))``: one rounding of a float32 result.

Assumes: tile ops are lowered (only scalar expressions remain). Guarantees: no
``prim.<math>`` call in the body has a float16/bfloat16 operand or result.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

_HALF = ("float16", "bfloat16")
_MATH = ("exp exp2 exp10 log log2 log10 log1p sqrt rsqrt tanh sin cos tan erf sigmoid pow").split()
_OPS = {f"prim.{name}": getattr(_tirx, name) for name in _MATH}


def _upcast(call):
    op = getattr(call, "op", None)
    fn = _OPS.get(getattr(op, "name", None))
    if fn is None or str(call.ty) not in _HALF:
        return call
    args = [a.astype("float32") for a in call.args]
    return fn(*args).astype(str(call.ty))


def legalize_half_math(body):
    """Rewrite float16/bfloat16 math intrinsic calls in ``body`` to compute in float32."""
    return tvm_ffi.structural_map(body, [(ir.Call, _upcast)])
