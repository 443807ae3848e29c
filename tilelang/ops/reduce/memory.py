"""``T.reduce_*`` whose source is a shared-memory tile (CUDA, ROCm, Metal).

Upstream TileLang reduces shared -> fragment and shared -> shared. The source is visible
to every thread, so no register exchange is needed: each output element is reduced
serially over the reduced axis by the thread(s) that produce it.

- ``dst`` a fragment: every thread folds, for each ``dst`` slot it owns, the slot's row
  of ``src`` (replicas of a replicated ``dst`` each compute the same value, reading the
  row in the same order, so they agree bit for bit).
- ``dst`` shared: the threads share the ``dst`` elements in a strided loop (element
  ``it * threads + t``), one whole row each.

``insert_sync`` places the barriers around the shared accesses as for any other shared
read or write. With ``clear=False`` the result is combined with what ``dst`` holds.
"""

from __future__ import annotations

from tvm_tirx import ir

from ... import errors
from ...lowering.fragments import owner_guard
from ...lowering.irb import seq, store
from ...lowering.region import _const
from ...lowering.thread_utils import (
    alloc,
    for_,
    fragment_points,
    is_fragment,
    is_shared,
    new_tensor,
    physical,
)
from .op import combine, init_value


def reads_memory(src, dst) -> bool:
    """Whether the reduce's source is a shared tile (this module's lowering)."""
    return is_shared(src.tensor) and (is_fragment(dst.tensor) or is_shared(dst.tensor))


def _row(v, src, dim, kept, acc, ctx, nan):
    """``acc[0]`` folded over the row of ``src`` at the kept coordinates ``kept``."""
    extent = src.extents[dim]
    r = ir.Var("rr", "int32")
    inner = ctx.with_range(r, 0, extent) if _const(extent) is not None else ctx
    idx = [inner.simplify(i) for i in src.index({**kept, dim: r})]
    value = ir.TensorLoad(src.tensor, physical(src.tensor, idx, inner)).astype(acc.ty.dtype)
    cur = ir.TensorLoad(acc, [0])
    return for_(r, extent, store(acc, [0], combine(v.reduce_type, cur, value, nan)))


def lower_reduce_from_memory(v, ctx, src, dst, dim, pairs):
    """The lowering of a reduce reading a shared tile (module docstring)."""
    kind, dtype = v.reduce_type, str(dst.dtype)
    merge = {"abssum": "sum", "absmax": "max"}.get(kind, kind)
    nan = bool(v.nan_propagate) and dtype.startswith(("float", "bfloat"))
    t = ctx.thread_var
    acc = new_tensor(f"{dst.name}_acc", [1], dtype, "local")
    stmts = [alloc(acc)]
    if is_fragment(dst.tensor):
        shape = [_const(d) for d in dst.tensor.ty.shape]
        whole = all(_const(b) == 0 for b in dst.begins)
        if not whole or [_const(e) for e in dst.extents] != shape:
            raise errors.compile_error(
                f"T.reduce_{kind}: only a whole fragment dst is supported "
                f"({dst.name}{list(dst.extents)} is a part of {shape}); reduce into a "
                f"fragment of its own and T.copy it",
                v.loc,
            )
        layout, local = ctx.get_layout(dst.tensor), ctx.local_of(dst.tensor)
        n = layout.get_local_size()
        slot = ir.Var("rd", "int32")
        inner = ctx.with_range(slot, 0, n)
        pts = [inner.simplify(p) for p in fragment_points(layout, slot, t)]
        kept = {a: pts[b] for a, b in pairs}
        out = ir.TensorLoad(acc, [0])
        if not v.clear:
            out = combine(merge, ir.TensorLoad(local, [slot]), out, nan)
        body = seq(
            [
                store(acc, [0], init_value(kind, dtype)),
                _row(v, src, dim, kept, acc, inner, nan),
                store(local, [slot], out, loc=v.loc),
            ]
        )
        loop = for_(slot, n, body, loc=v.loc)
        try:
            owners = owner_guard(layout, t, ctx.threads)
        except ValueError as err:
            raise errors.compile_error(f"T.reduce_{kind}({dst.name}): {err}", v.loc) from None
        if owners is not None:  # the other threads hold no dst element
            loop = ir.If(owners, loop, None)
        return seq([*stmts, loop])
    extents = [_const(dst.extents[b]) for _, b in pairs]
    if None in extents:
        raise errors.compile_error(
            f"T.reduce_{kind}: a shared dst needs static extents, got "
            f"{dst.name}{list(dst.extents)}",
            v.loc,
        )
    total = 1
    for e in extents:
        total *= e
    threads = ctx.threads
    it = ir.Var("re", "int32")
    iters = (total + threads - 1) // threads
    inner = ctx.with_range(it, 0, iters)
    flat = it * threads + t
    coords, q = [], flat
    for e in reversed(extents):
        coords.append(inner.simplify(q % e) if e != 1 else ir.const(0, "int32"))
        q = q // e
    coords.reverse()
    kept = {a: c for (a, _), c in zip(pairs, coords)}
    d_idx = [inner.simplify(i) for i in dst.index({b: c for (_, b), c in zip(pairs, coords)})]
    d_phys = physical(dst.tensor, d_idx, inner)
    out = ir.TensorLoad(acc, [0])
    if not v.clear:
        out = combine(merge, ir.TensorLoad(dst.tensor, d_phys), out, nan)
    body = seq(
        [
            store(acc, [0], init_value(kind, dtype)),
            _row(v, src, dim, kept, acc, inner, nan),
            store(dst.tensor, d_phys, out, loc=v.loc),
        ]
    )
    if iters * threads != total:
        body = ir.If(inner.simplify(flat < total), body, None)
    return seq([*stmts, for_(it, iters, body, loc=v.loc)])
