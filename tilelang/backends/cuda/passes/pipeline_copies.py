"""Software pipelining of the copies that do not start a ``T.Pipelined`` body.

Helpers of :mod:`tilelang.backends.cuda.passes.pipeline_planning` (pass config ``tl.pipeline_copy_schedule``). A *later copy*
is a top-level ``T.copy(global -> shared)`` of the body, after the leading copies, that
can be issued as cp.async and moved earlier: nothing in the body before it touches its
tile, nothing else in the body touches its source tensor, its source offsets depend only
on the loop variable and values fixed before the loop, and its tile is used only inside
the loop (and is no other copy's destination).

``"hoist"`` treats later copies as leading ones (pipeline_planning's schedule, one group
per iteration, one barrier). ``"split"`` (:func:`_plan_split_copies`) gives each later
copy its own stage buffers and cp.async group, waited for where the copy stood; with
``G = 1 + number of later copies`` groups per iteration and ``S`` stages::

    prologue: for s < S-1: for each group g: issue g(begin + s) -> stage s; commit
    loop k:   cp.async.wait_group (S-1) G - 1; [fence.proxy.async]; __syncthreads()
              issue leading(k + S-1) -> stage (k-begin+S-1) % S (guarded); commit
              ... at later copy g's place:
              cp.async.wait_group (S-1) G - 1; [fence.proxy.async]; __syncthreads()
              issue g(k + S-1) -> stage (k-begin+S-1) % S (guarded); commit
              ...
    after:    cp.async.wait_group 0

Each wait retires exactly the group whose tile the following statements read (the groups
committed after it are the other ``(S-1) G - 1`` in flight). The stage refilled after a
barrier was last read, in iteration k-1, after the same copy's barrier there, so every
thread finished those reads before this barrier. ``S == 1``: every group is issued at
the top of the iteration, the leading group waited for (``wait_group G-1``) before the
body, later group g (1-based) with ``wait_group G-1-g`` at its place, and a barrier ends
the iteration (the next iteration's copies overwrite the tiles).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ....lowering.stmt import alloc_of, bound_vars, substitute
from ....ops import tile_op_of
from ....ops.copy.op import COPY


def _has_load(node) -> bool:
    return bool(_loads_of(node))


def _later_copies(rest, loop, ctx, taken, root) -> list:
    """``[(index in rest, AsyncCopy)]`` of the later copies of a loop body (module doc)."""
    from .pipeline_planning import AsyncCopy, _count_uses, _uses

    bound = bound_vars(loop.body)
    taken = list(taken)
    out = []
    for i, s in enumerate(rest):
        found = tile_op_of(s)
        if found is None or found[0].name != "copy":
            continue
        ac = AsyncCopy(COPY.view(found[1]), ctx)
        if not ac.ok:
            continue
        t, src = ac.dst.tensor, ac.src.tensor
        if any(t.same_as(x) for x in taken) or any(_uses(x, t) for x in rest[:i]):
            continue
        if any(_uses(x, src) for j, x in enumerate(rest) if j != i):
            continue
        begins = list(ac.src.begins)
        if any(_has_load(b) for b in begins):
            continue
        if any(_uses(b, v) for b in begins for v in bound):
            continue
        if _count_uses(root, t) != _count_uses(loop, t) + 1:  # only its allocation outside
            continue
        taken.append(t)
        out.append((i, ac))
    return out


def _plan_split_copies(loop, ctx, stages, rest, leading, later, mapping, issue, fence):
    """The ``"split"`` schedule (module doc): one cp.async group per copy, each waited for
    where the copy stood."""
    from .pipeline_planning import (
        _restage,
        _with_loop,
        cp_async_commit,
        cp_async_wait,
        sync_threads,
    )

    k, begin, end = loop.var, loop.begin, loop.end
    rel = k - begin
    groups = [leading] + [[c] for _, c in later]
    at = {i: g for g, (i, _) in enumerate(later, 1)}
    n_groups = len(groups)

    def guarded(cond, stmts):
        if ctx.prove(cond):
            return stmts
        return [ir.If(cond, ir.SeqStmt(stmts) if len(stmts) > 1 else stmts[0], None)]

    def restaged(s):
        return _restage(s, mapping, rel % stages)

    zero = ir.const(0, "int32")
    if stages == 1:
        body = []
        for g in groups:
            body += [*issue(k, zero, group=g), cp_async_commit()]
        body += [cp_async_wait(n_groups - 1), *fence, sync_threads()]
        for i, s in enumerate(rest):
            if i in at:
                body += [cp_async_wait(n_groups - 1 - at[i]), *fence, sync_threads()]
            else:
                body.append(restaged(s))
        body.append(sync_threads())
        return _with_loop(loop, body)
    ahead = stages - 1
    pending = ahead * n_groups - 1
    prologue = []
    for s in range(ahead):
        for g in groups:
            prologue += guarded(begin + s < end, issue(begin + s, ir.const(s, "int32"), group=g))
            prologue.append(cp_async_commit())
    inner = ctx.with_range(k, begin, end - begin - ahead)

    def refill(g):
        stmts = issue(k + ahead, (rel + ahead) % stages, inner, group=g)
        return (
            [cp_async_wait(pending), *fence, sync_threads()]
            + guarded(k + ahead < end, stmts)
            + [cp_async_commit()]
        )

    body = refill(groups[0])
    for i, s in enumerate(rest):
        body += refill(groups[at[i]]) if i in at else [restaged(s)]
    return ir.SeqStmt([*prologue, _with_loop(loop, body), cp_async_wait(0)])


def _loads_of(node) -> list:
    out = []
    tvm_ffi.structural_walk(node, [(ir.TensorLoad, out.append)])
    return out


def read_only(root, tensor) -> bool:
    """Whether every mention of ``tensor`` in ``root`` is an element load (nothing in the
    kernel writes it: a page table, sequence lengths)."""
    from .pipeline_planning import _count_uses

    loads = sum(1 for x in _loads_of(root) if x.source.same_as(tensor))
    return loads > 0 and loads == _count_uses(root, tensor)


def inline_address_binds(loop, root):
    """``loop`` with the scalar binds that open its body substituted into the rest, when
    each value reads only loop-invariant scalars, the loop variable, earlier such binds
    and elements of tensors nothing in the kernel writes; else ``loop`` itself.

    Paged attention computes each tile's source row from a page table
    (``row = block_table[b, pos // page] * page + pos % page``) before the copies: inlined,
    the copies lead the body and are pipelined, and a later iteration's row is the same
    expression at ``k + ahead``, read from a table no thread writes. Loops whose
    ``T.Pipelined(order=, stage=, group=)`` index the body's statements are left alone."""
    ann = loop.annotations or {}
    if any(key in ann for key in ("tl_pipeline_order", "tl_pipeline_stage", "tl_pipeline_group")):
        return loop
    body = loop.body
    stmts = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
    mapping = {}
    n = 0
    for st in stmts:
        if not isinstance(st, ir.Bind) or alloc_of(st) is not None or not _scalar(st.var):
            break
        value = substitute(st.value, mapping) if mapping else st.value
        if not all(read_only(root, x.source) for x in _loads_of(value)):
            break
        mapping[st.var] = value
        n += 1
    if not n or n == len(stmts):
        return loop
    rest = [substitute(x, mapping) for x in stmts[n:]]
    new_body = rest[0] if len(rest) == 1 else ir.SeqStmt(rest)
    return ir.For(
        loop.var, loop.begin, loop.end, loop.step, loop.kind, new_body, loop.annotations, loop.loc
    )


def _scalar(var) -> bool:
    return not hasattr(var.ty, "shape")


__all__ = ["_later_copies", "_plan_split_copies", "inline_address_binds", "read_only"]
