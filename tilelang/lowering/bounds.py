"""Bounds predicates for accesses that may fall outside a global tensor (tails, dynamic shapes)."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx


def in_bounds(tensor, indices, ctx, loop_ranges):
    """The condition under which ``tensor[indices]`` is inside the tensor, or None if always.

    Only global tensors are checked: on-chip tiles are sized by their allocation.
    ``loop_ranges`` gives the (begin, extent) of the lowering's own loop variables.
    """
    if str(tensor.ty.scope) != "global":
        return None
    inner = ctx
    for var, (begin, extent) in loop_ranges.items():
        inner = inner.with_range(var, begin, extent)
    conds = []
    for index, extent in zip(indices, tensor.ty.shape):
        for cond in (index < extent, index >= 0):
            if not inner.prove(cond):
                conds.append(cond)
    if not conds:
        return None
    return _tirx.all(*conds) if len(conds) > 1 else conds[0]


def guarded_load(tensor, indices, ctx, loop_ranges, dtype=None):
    """``tensor[indices]``, or zero where it lies outside the tensor."""
    value = ir.TensorLoad(tensor, list(indices))
    pred = in_bounds(tensor, indices, ctx, loop_ranges)
    if pred is None:
        return value
    return _tirx.if_then_else(pred, value, ir.const(0, str(tensor.ty.dtype)))


def guarded_store(tensor, indices, value, ctx, loop_ranges, loc=ir.UNKNOWN_LOC):
    """``tensor[indices] = value``, skipped where it lies outside the tensor."""
    from .irb import store

    stmt = store(tensor, indices, value, loc=loc)
    pred = in_bounds(tensor, indices, ctx, loop_ranges)
    if pred is None:
        return stmt
    return ir.If(pred, stmt, None)
