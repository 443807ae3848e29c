"""TMA reductions (CUDA sm_90+): ``T.atomic_add(global region, shared tile, use_tma=True)``
as bulk tensor reductions (upstream TileLang's ``use_tma``).

Runs in the ``tma_store`` stage, at tile level after ``apply_shared_layouts``: the layouts
are known (``ops/atomic/cuda.py``'s layout rule swizzles a ``use_tma`` source that nothing
else laid out), the warp-specialized split exists. Every such atomic becomes what a TMA
store is (``passes/tma_store.py``, :func:`~.tma_store.tma_store_stmts`), with the reduce::

    fence.proxy.async.shared::cta        every thread: its writes of the tile -> async proxy
    __syncthreads()                      (bar.sync 1, T in a warp-specialized consumer)
    if tx == 0:
        tl::tma_store_add_<R>d(&map, box, coords...)   per box:
                 cp.reduce.async.bulk.tensor.<R>d.global.shared::cta.add.tile.bulk_group
        tl::tma_store_commit()                         cp.async.bulk.commit_group
        tl::tma_store_wait_read<0>()                   the tile is read: free to reuse / exit

The tensor map is the global tensor's, encoded on the host like the loads' (its element type
is the reduction's type, its swizzle the tile's); parts of a box outside the tensor are not
touched, so tail tiles need no predicate. ``insert_sync`` counts the elected thread's
``tl::tma_store_add_*`` as a read of the tile (a later write of it by other threads gets a
barrier, after the wait) and ``drop_proxy_fences`` as an async-proxy read (the fence stays).

With ``tl.tma_reduce_defer_wait``, a reduce that is a top-level statement of a loop body
that accesses the tile earlier in the body (``T.copy(dq, dq_shared)``) and not after the
reduce: the elected thread's wait moves to just before that first access (next iteration)
and after the loop, as ``tl::tma_store_wait_read<0>(&tile)``. Its operand makes
``insert_sync`` see the tile read up to the wait, so the barrier before the next writes
comes after it (a barrier between the reduce and the wait would otherwise let the other
threads overwrite the tile while the reduce still reads it).

Decisions (``tl.tma``, one line each, in ``tilelang.lower``'s output like the stores'):

* TMA: ``atomic_add S -> G: TMA reduce, n box(es) of RxC, swizzle M, B bytes``;
* ordinary atomics, same result, where TMA cannot express it: the source is a fragment or a
  global region, a part of the shared tile, a layout no box reproduces, global strides that
  are no 16-byte multiples, different element types, ``tl.disable_tma_lower=True``;
* compile errors, as upstream: an element type ``cp.reduce`` cannot add (anything but
  float16, bfloat16, float32, int32, uint32, uint64), and (in the atomic's CUDA rule, which
  sees the ``use_tma`` this pass leaves alone) any target before sm_90.
"""

from __future__ import annotations

from types import SimpleNamespace

import tvm_ffi
from tvm_tirx import ir, tirx

from ....lowering.region import RegionView
from ....lowering.stmt import StmtMutator, flatten_seq
from ....lowering.thread_utils import (
    extern_name,
    extern_stmt,
    is_fragment,
    is_global,
    is_shared,
    tensor_handles,
)
from ....ops import tile_op_of
from ....ops.atomic.cuda import tma_capable
from ....ops.atomic.op import ATOMIC
from ..tensor_map import TmaCopy, plan_tma_copy
from .tma_lowering import shared_map
from .tma_store import WAIT_READ, tma_store_stmts

#: Element types ``cp.reduce.async.bulk.tensor .add`` takes (the tensor map's type).
REDUCE_ADD_DTYPES = ("float16", "bfloat16", "float32", "int32", "uint32", "uint64")
#: The device helper prefix (``tma.h``): ``tl::tma_store_add_<R>d``.
REDUCE_ADD = "tl::tma_store_add"


def check_reduce_dtype(view) -> None:
    """A CompileError (upstream's) when ``T.atomic_add(use_tma=True)`` adds elements of a type
    the bulk tensor reduction cannot add."""
    from .... import errors

    dtype = str(RegionView.of(view.dst).dtype)
    if dtype not in REDUCE_ADD_DTYPES:
        raise errors.compile_error(
            f"T.atomic_add(use_tma=True): TMA atomic add does not support dtype {dtype}; "
            "supported scalar dtypes are float16, bfloat16, float32, int32, uint32, and "
            "uint64 (drop use_tma=True for ordinary atomics)",
            view.loc,
        )


def plan_tma_reduce(view, ctx) -> TmaCopy | str:
    """``view`` (a ``use_tma`` atomic) as a :class:`TmaCopy` whose ``src`` is the global
    region and ``dst`` the shared tile, or why it stays on ordinary atomics."""
    if not view.value_is_region or view.kind != "add":
        return "not a tile atomic_add"
    src, dst = RegionView.of(view.value), RegionView.of(view.dst)
    if is_fragment(src.tensor):
        return "the source is a fragment (TMA reads shared memory)"
    if not is_shared(src.tensor):
        return f"the source {src.name} is not a shared tile"
    if not is_global(dst.tensor):
        return f"the destination {dst.name} is not global memory"
    if ctx.options.get("disable_tma") is True:
        return "tl.disable_tma_lower=True"
    swapped = SimpleNamespace(src=view.dst, dst=view.value, loc=view.loc)
    return plan_tma_copy(swapped, ctx, ctx)


class _ReduceLowering(StmtMutator):
    def __init__(self, ctx, tx):
        super().__init__("cuda")
        self.lctx, self.tx = ctx, tx

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None or found[0].name != "atomic":
            return stmt
        view = ATOMIC.view(found[1])
        if not view.use_tma:
            return stmt
        check_reduce_dtype(view)
        src, dst = RegionView.of(view.value), RegionView.of(view.dst)
        what = f"atomic_add {src.name} -> {dst.name}"
        plan = plan_tma_reduce(view, self.lctx)
        if isinstance(plan, str):
            self.lctx.tma_notes.append(f"{what}: ordinary atomics ({plan})")
            attrs = {k: getattr(view, k) for k in ATOMIC.options}
            attrs["use_tma"] = False
            return ir.Evaluate(ATOMIC.make(view.dst, view.value, loc=view.loc, **attrs))
        plan.spec = shared_map(self.lctx, plan.spec)
        p = plan.plan
        self.lctx.tma_notes.append(
            f"{what}: TMA reduce, {len(p.boxes)} box(es) of {p.box_rows}x{p.box_cols}, "
            f"swizzle {p.mode.name}, {plan.bytes} bytes"
        )
        return ir.SeqStmt(tma_store_stmts(plan, self.tx, op=REDUCE_ADD))


def _reduce_group(stmt):
    """The shared tile of ``stmt`` when it is the elected thread's ``If`` of a TMA reduce
    ending with its wait (:func:`~.tma_store.tma_store_stmts`), else None."""
    if not isinstance(stmt, ir.If) or stmt.else_case is not None:
        return None
    inner = flatten_seq(stmt.then_case)
    if not inner or extern_name(inner[-1]) != WAIT_READ or inner[-1].value.args[1:]:
        return None
    calls = [s for s in inner if (extern_name(s) or "").startswith(REDUCE_ADD)]
    if not calls:
        return None
    ptr = calls[0].value.args[2]
    while isinstance(ptr, ir.Call) and ptr.op.name == "tirx.ptr_byte_offset":
        ptr = ptr.args[0]
    if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.address_of":
        return ptr.args[0].source
    return None


def _tile_wait(tile, tx):
    return ir.If(tx == 0, extern_stmt(WAIT_READ, tirx.address_of(tile)), None)


def defer_waits(body, tx):
    """``body`` with the waits of the reduces in loops deferred (module doc)."""

    def visit_for(loop):
        stmts = flatten_seq(loop.body)
        waits_before: dict[int, list] = {}  # statement index -> waits placed before it
        after = []
        for r, stmt in enumerate(stmts):  # decide on the original list, rebuild below
            tile = _reduce_group(stmt)
            if tile is None:
                continue
            h = tile.__chandle__()
            if any(h in tensor_handles(s) for s in stmts[r + 1 :]):
                continue  # read again in the same iteration: keep the wait
            first = next((i for i in range(r) if h in tensor_handles(stmts[i])), None)
            if first is None:
                continue
            inner = flatten_seq(stmt.then_case)[:-1]
            stmts[r] = ir.If(stmt.condition, ir.SeqStmt(inner), None, stmt.loc)
            waits_before.setdefault(first, []).append(_tile_wait(tile, tx))
            after.append(_tile_wait(tile, tx))
        if not after:
            return loop
        rebuilt = [w for i, s in enumerate(stmts) for w in [*waits_before.get(i, []), s]]
        new = ir.For(loop.var, loop.begin, loop.end, loop.step, loop.kind, ir.SeqStmt(rebuilt),
                     loop.annotations, loop.loc)  # fmt: skip
        return ir.SeqStmt([new, *after])

    return tvm_ffi.structural_map(body, [(ir.For, visit_for)])


def lower_tma_reduces(body, ctx):
    """Every ``T.atomic_add(..., use_tma=True)`` of ``body`` as a TMA reduction, or as a plain
    tile atomic (``use_tma`` cleared, the reason noted) where TMA cannot express it. Before
    sm_90 nothing changes (the atomic's CUDA rule refuses ``use_tma`` there, as upstream)."""
    if not tma_capable(ctx.arch):
        return body
    body = _ReduceLowering(ctx, ctx.thread_var)(body)
    if ctx.options.get("tma_reduce_defer_wait", False):
        body = defer_waits(body, ctx.thread_var)
    return body


__all__ = [
    "REDUCE_ADD_DTYPES",
    "check_reduce_dtype",
    "defer_waits",
    "lower_tma_reduces",
    "plan_tma_reduce",
]
