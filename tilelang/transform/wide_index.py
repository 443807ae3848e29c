"""64-bit index arithmetic for tensors that can hold 2**31 elements or more.

Indices are traced in int32 (upstream's default), so ``A[by * 16 + i, bx * 256 + j]`` on a
65536 x 32769 tensor, or ``A[bx * 1024 + i]`` with a ``T.dynamic("n", "int64")`` extent,
would overflow once flattened. :func:`widen_indices` rebuilds every index of an access to
such a tensor in int64, from the leaves up (variables and constants are cast before any
arithmetic), so no intermediate wraps. :func:`wide_shape` gives a tensor parameter with
2**31 or more elements int64 extents, so that its strides and flattened offsets are int64.
"""

from __future__ import annotations

import operator

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

INT32_MAX = 2**31 - 1


def _numel(shape):
    total = 1
    for extent in shape:
        value = extent.value if isinstance(extent, ir.IntImm) else extent
        if not isinstance(value, int):
            return None
        total *= value
    return total


def wide_shape(shape) -> tuple:
    """``shape`` with int64 extents when it has more than INT32_MAX elements."""
    total = _numel(shape)
    if total is None or total <= INT32_MAX:
        return tuple(shape)
    return tuple(
        ir.const(e.value if isinstance(e, ir.IntImm) else e, "int64")
        if isinstance(e, int | ir.IntImm)
        else e
        for e in shape
    )


def needs_wide(tensor) -> bool:
    """Whether offsets into ``tensor`` may exceed int32."""
    shape = list(getattr(tensor.ty, "shape", []) or [])
    if any(str(getattr(e, "ty", "int32")) == "int64" for e in shape):
        return True
    total = _numel(shape)
    return total is not None and total > INT32_MAX


_BINARY = {}


def _binary():
    if not _BINARY:
        from tvm_tirx.ir import prim as P

        _BINARY.update(
            {
                P.Add: operator.add,
                P.Sub: operator.sub,
                P.Mul: operator.mul,
                P.FloorDiv: _tirx.floordiv,
                P.FloorMod: _tirx.floormod,
                P.Min: _tirx.min,
                P.Max: _tirx.max,
            }
        )
    return _BINARY


def widen(expr):
    """``expr`` computed in int64 from its leaves up (non-integer expressions unchanged)."""
    if isinstance(expr, int):
        return ir.const(expr, "int64")
    ty = str(getattr(expr, "ty", ""))
    if not ty.startswith(("int", "uint")) or "x" in ty:  # vector lanes: left as they are
        return expr
    if isinstance(expr, ir.IntImm):
        return ir.const(expr.value, "int64")
    op = _binary().get(type(expr))
    if op is not None:
        return op(widen(expr.a), widen(expr.b))
    return expr if ty == "int64" else expr.astype("int64")


def widen_indices(body):
    """Every index of an access to a tensor that :func:`needs_wide`, rebuilt in int64."""

    def load(node):
        if not needs_wide(node.source):
            return node
        return ir.TensorLoad(node.source, [widen(i) for i in node.indices])

    def store(node):
        if not needs_wide(node.dest):
            return node
        return ir.TensorStore(node.dest, [widen(i) for i in node.indices], node.value, node.loc)

    return tvm_ffi.structural_map(body, [(ir.TensorLoad, load), (ir.TensorStore, store)])
