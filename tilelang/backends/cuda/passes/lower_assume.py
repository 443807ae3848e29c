"""``T.assume(cond)`` for the CUDA code generator, which has no rule for TIRx's ``assume``.

Each ``Evaluate(assume(cond))`` statement becomes ``__builtin_assume(cond)`` (nvcc and NVRTC
take it as an optimisation hint); an ``assume`` elsewhere in an expression is replaced by its
value ``true``. Assumes: runs last, on thread-level code. Guarantees: no ``assume`` remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

_ASSUME = "prim.assume"


def _is_assume(x) -> bool:
    return isinstance(x, ir.Call) and getattr(x.op, "name", "") == _ASSUME


def lower_assume(body):
    """``body`` with every ``assume`` rewritten (module docstring)."""
    found = []
    tvm_ffi.structural_walk(
        body, lambda x: found.append(1) if not found and _is_assume(x) else None
    )
    if not found:
        return body

    def on_eval(stmt):
        if _is_assume(stmt.value):
            call = _tirx.call_extern("__builtin_assume", stmt.value.args[0], ty="void")
            return ir.Evaluate(call, loc=stmt.loc)
        return stmt

    def on_call(call):
        return ir.const(True, "bool") if _is_assume(call) else call

    body = tvm_ffi.structural_map(body, [(ir.Evaluate, on_eval)])
    return tvm_ffi.structural_map(body, [(ir.Call, on_call)])


def stage_lower_assume(func, state):
    """Pipeline stage: :func:`lower_assume` on the function body."""
    return func.with_body(lower_assume(func.body))
