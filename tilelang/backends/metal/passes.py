"""Metal-only rewrites of the thread-level IR the shared CUDA stages produce."""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ...lowering.thread_utils import alloc, decl_view, new_tensor, scope_of

DYNAMIC, STATIC = "shared.dyn", "shared"


def static_threadgroup_memory(body):
    """Every ``shared.dyn`` tensor becomes a ``shared`` one (a fixed-size ``threadgroup``
    array in MSL; TIRx's Metal printer has no dynamic shared memory). ``plan_shared_memory``
    has already packed the tiles into one byte buffer with typed views at fixed offsets;
    the views keep their offsets."""
    found = {}

    def collect(node):
        var = node.var
        if hasattr(var.ty, "scope") and scope_of(var) == DYNAMIC:
            found[var.__chandle__()] = new_tensor(
                var.name, list(var.ty.shape), str(var.ty.dtype), STATIC
            )
        return node

    tvm_ffi.structural_map(body, [(ir.Bind, collect)])
    if not found:
        return body

    def rebind(node):
        var = found.get(node.var.__chandle__())
        if var is None:
            return node
        value = node.value
        if isinstance(value, ir.Call) and value.op.name == "tirx.decl_tensor":
            base_data, offset = value.args[0].args[0], value.args[0].args[1]
            base = _base_of(base_data, found)
            if base is None:
                return node
            return decl_view(var, base, int(offset))
        return alloc(var)

    body = tvm_ffi.structural_map(body, [(ir.Bind, rebind)])
    return substitute_by_handle(body, found)


def substitute_by_handle(body, mapping: dict):
    """``body`` with every Var whose handle is a key of ``mapping`` replaced by its value."""

    def repl(v):
        return mapping.get(v.__chandle__(), v)

    return tvm_ffi.structural_map(body, [(ir.Var, repl)])


def _base_of(data_expr, found):
    """The new tensor whose old tensor's ``.data`` ``data_expr`` is."""
    args = getattr(data_expr, "args", None)
    if args and isinstance(args[0], ir.Var):
        return found.get(args[0].__chandle__())
    return None
