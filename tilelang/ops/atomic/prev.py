"""``T.atomic_add/atomic_max/atomic_min(dst, value, return_prev=True)``: the value before.

IR: ``tl.atomic_prev(dst_element, value, prev_cell)`` with ``kind`` in add/max/min: the
atomic update of one element, whose previous value is written to ``prev_cell[0]`` (a
per-thread ``local`` cell the frontend allocates and reads back as the call's value).
Upstream supports ``return_prev`` only for one element and a scalar value (its
tile-region atomics raise), and so does this op -- plus ``T.atomic_addx2/x4``: ``lanes``
(2 or 4) consecutive elements along the last axis, ``value`` the first of as many value
elements, ``prev`` a cell of ``lanes`` (:func:`lane_operands`). CUDA runs such a group as
one atomic where the hardware has one (sm_90+ ``float2``/``float4`` ``atomicAdd`` on an
aligned global group, ``half2``/``bfloat162`` pairs: ``tl::AtomicAddx<N>Ret``), lane by lane
otherwise: then each lane's update and old value are atomic but the group is not (another
thread may update the group between two lanes), as upstream's fallbacks.

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
- ROCm: the CUDA form (HIP's ``atomicAdd/Max/Min`` return the old value, ``tl_hip.h``;
  ``__threadfence`` exists); ``x2``/``x4`` groups lane by lane. Metal: the same through
  ``atomic_fetch_add/max/min_explicit`` (``tl_metal.h``, relaxed, device memory); an
  ordered ``memory_order`` is a CompileError (no fence is emitted there).
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
    {"kind": "add", "memory_order": "", "lanes": 1},
    spelling="T.atomic_add/atomic_max/atomic_min(..., return_prev=True)",
)


def lane_operands(v):
    """``(dst loads, value expressions, prev cells)`` of each lane of ``v`` (``lanes``
    consecutive elements along the last axis for ``T.atomic_addx2/x4``; one otherwise)."""
    dst, prev = RegionView.of(v.dst), RegionView.of(v.prev)
    n = int(v.lanes)

    def at(view, k):
        return [*view.begins[:-1], view.begins[-1] + k] if k else list(view.begins)

    if n == 1:
        values = [v.value.astype(str(dst.dtype))]
    else:
        val = RegionView.of(v.value)
        values = [ir.TensorLoad(val.tensor, at(val, k)).astype(str(dst.dtype)) for k in range(n)]
    return [at(dst, k) for k in range(n)], values, [at(prev, k) for k in range(n)]


def _prev_store(v, value, loc=ir.UNKNOWN_LOC):
    prev = RegionView.of(v.prev)
    return store(prev.tensor, prev.begins, value, loc=loc)


@lower_rule("atomic_prev", "cpu")
def lower_atomic_prev_cpu(v, ctx):
    """``prev = dst; dst = op(dst, value)`` per lane, skipped (prev = 0) outside the tensor."""
    dst, prev = RegionView.of(v.dst), RegionView.of(v.prev)
    out = []
    for idx, value, cell in zip(*lane_operands(v)):
        old = ir.TensorLoad(dst.tensor, idx)
        update = store(dst.tensor, idx, apply(v.kind, old, value))
        body = seq([store(prev.tensor, cell, old, loc=v.loc), update])
        pred = in_bounds(dst.tensor, idx, ctx, {})
        if pred is not None:
            zero = store(prev.tensor, cell, ir.const(0, str(dst.dtype)))
            body = ir.If(pred, body, zero, loc=v.loc)
        out.append(body)
    return seq(out)


def _fenced(call_stmt, memory_order, ctx=None, loc=None):
    if memory_order in ("", "relaxed"):
        return call_stmt
    if ctx is not None and str(getattr(ctx, "arch", "")) == "metal":
        from ... import errors

        raise errors.compile_error(
            f"memory_order={memory_order!r} on an atomic with return_prev=True: the metal "
            "target's atomics are relaxed and it has no device-wide fence here; use "
            "memory_order='relaxed' (or none)",
            loc,
        )
    fence = extern_stmt("__threadfence")
    before = [fence] if memory_order in ("release", "acq_rel", "seq_cst") else []
    after = [fence] if memory_order in ("acquire", "acq_rel", "seq_cst") else []
    return seq([*before, call_stmt, *after])


@lower_rule("atomic_prev", "cuda")
def lower_atomic_prev_cuda(v, ctx):
    """The module docstring's CUDA form."""
    dst = RegionView.of(v.dst)
    _check_dst(dst, v.loc, v.kind)
    if int(v.lanes) > 1:
        return lower_addx_prev_cuda(v, ctx)
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
        stmt = _fenced(_prev_store(v, call, v.loc), v.memory_order, ctx, v.loc)
        return stmt if pred is None else ir.If(pred, stmt, _prev_store(v, zero))
    cell = new_tensor(f"{dst.name}_prev", [1], dtype, "shared.dyn")
    ctx.extra_allocs.append(alloc(cell))
    stmt = _fenced(store(cell, [0], call, loc=v.loc), v.memory_order, ctx, v.loc)
    if pred is not None:
        stmt = ir.If(pred, stmt, store(cell, [0], zero))
    return seq([ir.If(t == 0, stmt, None), _prev_store(v, ir.TensorLoad(cell, [0]))])


def _per_thread(v, ctx) -> bool:
    """Whether every thread reaching ``v`` performs it (see the module docstring)."""
    t = ctx.thread_var
    dst = RegionView.of(v.dst)
    return (
        uses_any(v.value, [t])
        or any(uses_any(b, [t]) for b in dst.begins)
        or getattr(ctx, "thread_guarded", False)
    )


def lower_addx_prev_cuda(v, ctx):
    """``T.atomic_addx2/x4(..., return_prev=True)``: ``tl::AtomicAddx<N>Ret(&dst, lanes...,
    &prev)`` (atomic.h: one float2/float4 ``atomicAdd`` returning the old vector on sm_90+
    for an aligned global float group, one half2/bfloat162 ``atomicAdd`` for 16-bit pairs;
    per-lane atomics otherwise -- each lane's add and old value are atomic, the group is
    not). A group not provably inside its tensor takes per-lane atomics, each guarded."""
    dst, prev = RegionView.of(v.dst), RegionView.of(v.prev)
    dtype, n = str(dst.dtype), int(v.lanes)
    idxs, values, cells = lane_operands(v)
    idxs = [physical(dst.tensor, i, ctx) for i in idxs]

    def address(tensor, idx):
        return _tirx.address_of(ir.TensorLoad(tensor, list(idx)))

    def vector(target, target_idx):
        helper = f"tl::AtomicAddx{n}Ret"
        call = _tirx.call_extern(
            helper, address(dst.tensor, idxs[0]), *values, address(target, target_idx), ty="void"
        )
        return _fenced(ir.Evaluate(call), v.memory_order, ctx, v.loc)

    def lanes(target, target_cells):
        out = []
        for idx, value, cell in zip(idxs, values, target_cells):
            call = _tirx.call_extern(HELPERS["add"], address(dst.tensor, idx), value, ty=dtype)
            body = store(target, cell, call, loc=v.loc)
            pred = in_bounds(dst.tensor, idx, ctx, {})
            if pred is not None:
                body = ir.If(pred, body, store(target, cell, ir.const(0, dtype)))
            out.append(body)
        return _fenced(seq(out), v.memory_order, ctx, v.loc)

    whole = [in_bounds(dst.tensor, idxs[k], ctx, {}) for k in (0, n - 1)]
    whole = [p for p in whole if p is not None]

    def update(target, target_cells):
        if not str(getattr(ctx, "arch", "")).startswith("sm_"):  # HIP/MSL: lane by lane
            return lanes(target, target_cells)
        fast = vector(target, target_cells[0])
        if not whole:
            return fast
        return ir.If(
            _tirx.all(*whole) if len(whole) > 1 else whole[0], fast, lanes(target, target_cells)
        )

    if _per_thread(v, ctx):
        return update(prev.tensor, cells)
    cell = new_tensor(f"{dst.name}_prev", [n], dtype, "shared.dyn")
    ctx.extra_allocs.append(alloc(cell))
    shared_cells = [[ir.const(k, "int32")] for k in range(n)]
    reads = [store(prev.tensor, c, ir.TensorLoad(cell, s)) for c, s in zip(cells, shared_cells)]
    return seq([ir.If(ctx.thread_var == 0, update(cell, shared_cells), None), *reads])
