"""``T.atomic_add/atomic_max/atomic_min(dst, value, return_prev=True)``: the value before.

IR: ``tl.atomic_prev(dst_element, value, prev_cell)`` with ``kind`` in add/max/min: the
atomic update of one element, whose previous value is written to ``prev_cell[0]`` (a
per-thread ``local`` cell the frontend allocates and reads back as the call's value).
Upstream supports ``return_prev`` only for one element and a scalar value (its
tile-region atomics raise), and so does this op.

- CPU: ``prev = dst; dst = op(dst, value)`` (the blocks of a kernel with atomics run one
  after another, a block's threads in turn).
- CUDA: ``prev = tl::Atomic<Kind>(&dst, value)`` (CUDA's ``atomic*`` return the old
  value) by every thread that reaches it when the address or the value depends on the
  thread, or under an ``if`` on the thread index. A thread-independent update in code
  every thread runs is done once per block, as ``T.atomic_add`` without ``return_prev``:
  thread 0 performs it and every thread reads the old value from a shared cell (the
  barrier between comes from ``insert_sync``).
- ``memory_order`` ``release`` puts ``__threadfence()`` before the atomic, ``acquire``
  after, ``acq_rel``/``seq_cst`` both (``atomic*`` are relaxed).
- A ``dst`` element outside its global tensor is left alone and ``prev`` reads 0.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ...lowering.bounds import in_bounds
from ...lowering.irb import seq, store
from ...lowering.region import RegionView
from ...lowering.stmt import uses_any
from ...lowering.thread_utils import alloc, extern_stmt, new_tensor, physical
from ..registry import TileOpDef, lower_rule
from .cuda import HELPERS, _check_dst
from .op import apply

ATOMIC_PREV = TileOpDef(
    "atomic_prev",
    ("dst", "value", "prev"),
    {"kind": "add", "memory_order": ""},
    spelling="T.atomic_add/atomic_max/atomic_min(..., return_prev=True)",
)


def _prev_store(v, value, loc=ir.UNKNOWN_LOC):
    prev = RegionView.of(v.prev)
    return store(prev.tensor, prev.begins, value, loc=loc)


@lower_rule("atomic_prev", "cpu")
def lower_atomic_prev_cpu(v, ctx):
    """``prev = dst; dst = op(dst, value)``, both skipped (prev = 0) outside the tensor."""
    dst = RegionView.of(v.dst)
    old = ir.TensorLoad(dst.tensor, dst.begins)
    update = store(dst.tensor, dst.begins, apply(v.kind, old, v.value.astype(dst.dtype)))
    body = seq([_prev_store(v, old), update])
    pred = in_bounds(dst.tensor, dst.begins, ctx, {})
    if pred is None:
        return body
    return ir.If(pred, body, _prev_store(v, ir.const(0, str(dst.dtype))), loc=v.loc)


def _fenced(call_stmt, memory_order):
    fence = extern_stmt("__threadfence")
    before = [fence] if memory_order in ("release", "acq_rel", "seq_cst") else []
    after = [fence] if memory_order in ("acquire", "acq_rel", "seq_cst") else []
    return seq([*before, call_stmt, *after])


@lower_rule("atomic_prev", "cuda")
def lower_atomic_prev_cuda(v, ctx):
    """The module docstring's CUDA form."""
    dst = RegionView.of(v.dst)
    _check_dst(dst, v.loc, v.kind)
    dtype = str(dst.dtype)
    idx = physical(dst.tensor, dst.begins, ctx)
    address = _tirx.address_of(ir.TensorLoad(dst.tensor, list(idx)))
    call = _tirx.call_extern(HELPERS[v.kind], address, v.value.astype(dtype), ty=dtype)
    zero = ir.const(0, dtype)
    pred = in_bounds(dst.tensor, idx, ctx, {})
    t = ctx.thread_var
    per_thread = (
        uses_any(v.value, [t])
        or any(uses_any(b, [t]) for b in dst.begins)
        or getattr(ctx, "thread_guarded", False)
    )
    if per_thread:
        stmt = _fenced(_prev_store(v, call, v.loc), v.memory_order)
        return stmt if pred is None else ir.If(pred, stmt, _prev_store(v, zero))
    cell = new_tensor(f"{dst.name}_prev", [1], dtype, "shared.dyn")
    ctx.extra_allocs.append(alloc(cell))
    stmt = _fenced(store(cell, [0], call, loc=v.loc), v.memory_order)
    if pred is not None:
        stmt = ir.If(pred, stmt, store(cell, [0], zero))
    return seq([ir.If(t == 0, stmt, None), _prev_store(v, ir.TensorLoad(cell, [0]))])
