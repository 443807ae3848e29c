"""Helpers shared by the CUDA passes: scopes, fresh allocations, fragment inversion.

Nothing here rewrites a whole function; each helper is small and pure.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.tirx.tensor import TensorType

from .. import errors
from ..layout import expr as E

ALLOC_OP = "tirx.alloc_tensor"


# Loops with at most this many iterations are emitted unrolled.
UNROLL_LIMIT = 256


def scope_of(var) -> str:
    return str(getattr(var.ty, "scope", ""))


def is_fragment(var) -> bool:
    return isinstance(var, ir.Var) and scope_of(var) == "local.fragment"


def is_shared(var) -> bool:
    return isinstance(var, ir.Var) and scope_of(var).startswith("shared")


def is_global(var) -> bool:
    return isinstance(var, ir.Var) and scope_of(var) == "global"


def alloc(var) -> ir.Bind:
    """``var = alloc_tensor()`` (with the empty attrs the CUDA codegen expects)."""
    return ir.Bind(var, ir.Call(ALLOC_OP, [], attrs={}, ty_args=[var.ty], ty=var.ty))


def new_tensor(name: str, shape, dtype: str, scope: str) -> ir.Var:
    return ir.Var(name, TensorType(list(shape), dtype, scope=scope))


def decl_view(var, base, byte_offset: int) -> ir.Bind:
    """``var = decl_tensor(base.data + byte_offset)``: a typed view into ``base``'s storage."""
    dtype, scope = str(var.ty.dtype), scope_of(base)
    ptr = _tirx.ptr_byte_offset(base.data, byte_offset, ty=ir.PtrType(dtype, scope))
    ty = TensorType(list(var.ty.shape), dtype, scope=scope)
    return ir.Bind(var, ir.Call("tirx.decl_tensor", [ptr], ty_args=[ty], ty=ty))


def i32(x):
    return ir.const(int(x), "int32") if isinstance(x, int) else x


def for_(var, extent, body, kind=None, loc=ir.UNKNOWN_LOC, annotations=None):
    kind = ir.ForKind.DEFAULT if kind is None else kind
    return ir.For(var, i32(0), i32(extent), i32(1), kind, body, annotations, loc)


def extern_stmt(name: str, *args, ty="void") -> ir.Evaluate:
    """The statement ``name(args...);``: an extern (C/CUDA) call whose result is dropped."""
    return ir.Evaluate(_tirx.call_extern(name, *args, ty=ty))


def extern_name(node):
    """The callee of ``call_extern(name, ...)`` (or of a statement evaluating one), else None."""
    if isinstance(node, ir.Evaluate):
        node = node.value
    if not (isinstance(node, ir.Call) and getattr(node.op, "name", "") == "tirx.call_extern"):
        return None
    head = node.args[0] if node.args else None
    return str(head.value) if isinstance(head, ir.StringImm) else None


def extern_calls(node, prefix: str = "") -> list:
    """Every ``call_extern`` inside ``node`` whose callee starts with ``prefix``."""
    found = []

    def visit(call):
        name = extern_name(call)
        if name is not None and name.startswith(prefix):
            found.append(call)

    tvm_ffi.structural_walk(node, [(ir.Call, visit)])
    return found


def sync_threads() -> ir.Evaluate:
    return extern_stmt("__syncthreads")


def is_sync(stmt) -> bool:
    if not isinstance(stmt, ir.Evaluate) or not isinstance(stmt.value, ir.Call):
        return False
    call = stmt.value
    if getattr(call.op, "name", "") == "tirx.call_extern":
        return str(call.args[0].value) == "__syncthreads"
    return getattr(call.op, "name", "") == "tl.sync_threads"


def collect_vars(node, pred) -> list:
    """Distinct Vars in ``node`` satisfying ``pred`` (tensor Vars included)."""
    seen, out = set(), []

    def visit(v):
        h = v.__chandle__()
        if h not in seen and pred(v):
            seen.add(h)
            out.append(v)

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return out


def tensor_handles(node, skip=()) -> set:
    """Handles (``__chandle__()``) of the tensor Vars named anywhere in ``node``, less the
    handles in ``skip``."""
    found = set()

    def visit(v):
        if isinstance(v.ty, TensorType):
            found.add(v.__chandle__())

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return found.difference(skip)


def fragment_points(frag, local_var, thread_var):
    """Logical indices (and replica) of local slot ``local_var`` in thread ``thread_var``.

    Returns the list of expressions ``(*logical, rep)`` from the fragment's inverse.
    """
    try:
        inv = frag.inverse()
    except Exception as err:  # noqa: BLE001 - ValueError, or TIRx's check on a non-bijection
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        error = errors.CompileError(
            f"the fragment layout {frag!r} has no inverse this lowering can compute "
            f"({detail[:160]}): each thread runs over its registers through it; use a "
            "layout whose thread and register expressions are sums of splits of the index"
        )
        error.needs_loc = True  # LowerTileOps / lower_parallel add the op and the user's line
        raise error from None
    mapping = {E.key(v): x for v, x in zip(inv.get_forward_vars(), [local_var, thread_var])}
    return [E.substitute(e, mapping) for e in inv.index]


def _bits(var) -> int:
    """Bits per element of a tensor Var."""
    return tvm_ffi.dtype(str(var.ty.dtype)).bits


def physical(var, indices, ctx):
    """Indices of ``var[indices]`` after its shared-memory Layout (a swizzle), if it has one.

    A Layout's output space may have another rank than the tensor (the gemm swizzles map
    ``[rows, cols]`` to ``[1, rows // 8, 512]``), so the output coordinates are flattened
    row-major over the layout's output shape and split again over the tensor's own
    shape: the element lands at the same storage offset the gemm lowering computes.
    A padded layout (``T.annotate_layout``, rows of ``cols + 8``) reaches offsets past the
    tile's element count: the leading index then exceeds the tile's first extent, and
    ``plan_shared_memory`` gives the tile a storage shape whose first extent covers them.
    """
    layout = ctx.get_layout(var) if is_shared(var) else None
    if layout is None:
        return list(indices)
    return layout_indices(var, layout, indices, ctx.simplify)


def layout_indices(var, layout, indices, simplify):
    """``var``'s own indices of the storage place ``layout`` gives ``var[indices]`` (see
    :func:`physical`; also used for laid-out global tensors)."""
    coords = [simplify(e) for e in layout.map_forward_index(list(indices))]
    out_shape = [E.as_const_int(d) for d in layout.get_output_shape()]
    shape = [E.as_const_int(d) for d in var.ty.shape]
    if out_shape == shape:
        return coords
    if None in out_shape or None in shape or E.prod(out_shape) < E.prod(shape):
        raise ValueError(
            f"the layout of {var.name} maps {list(var.ty.shape)} to {out_shape}, which is "
            "smaller than the tensor"
        )
    flat = None
    for coord, extent in zip(coords, out_shape):
        flat = coord if flat is None else flat * extent + coord
    out = []
    for extent in reversed(shape[1:]):
        out.append(simplify(flat % extent))
        flat = flat // extent
    out.append(simplify(flat))
    return list(reversed(out))
