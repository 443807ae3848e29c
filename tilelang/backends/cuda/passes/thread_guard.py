"""Tile ops and ``T.Parallel`` loops under an ``if`` on the thread index (layout inference).

Upstream TileLang re-plans a block-wide tile op under ``if tx < 128:`` (``tx >= 128``,
``lo <= tx < hi``, a warp-specialization style branch, an ``else`` of one) over the
threads the condition keeps. Here: when the kept threads are provably one contiguous range
``[lo, hi)`` (``lowering.thread_range.guarded_range``), a ``T.copy``/``T.fill``/
``T.clear``/``T.Parallel``/``T.gemm``/``T.reduce_*`` under it (or in a ``T.ws`` scope, such
an ``if``) is planned over those ``hi - lo`` threads:

* a loop's free layout and the default layout of a fragment used only there are laid
  over ``[lo, hi)`` (``default_fragment`` on ``hi - lo`` threads, shifted by ``lo``);
* the lowering rules partition shared/global tiles over ``t - lo`` (``ctx.thread_range``,
  set by ``transform/lower_tile_ops.py``); fragments keep their own threads;
* gemm and reduce rules see a block of ``hi - lo`` threads (:func:`run_in_range` here,
  ``lowering.thread_range.lower_over_range`` when lowering): the gemm's warp partition,
  warp/warpgroup indices of ``t - lo``, fragments laid on ``[lo, hi)``, the reduce's
  cross-warp workspace indexed by ``t - lo``; barriers inside the branch are
  ``bar.sync id, hi - lo`` (``insert_sync``). ``T.gemm`` needs whole warps (mma.sync) or
  whole warpgroups (wgmma): ``ops/gemm/mma_cuda.check_range_alignment``;
* :func:`check_guarded` refuses, naming the buffer and both lines, a fragment (or a loop
  layout taken from one) with elements on threads the ``if`` leaves out: those threads
  would skip their part.

Everything else under such an ``if`` is a CompileError at the user's line saying what
to write instead: a condition keeping a non-contiguous or run-time set of threads, a
block with several thread dimensions, and tile ops whose lowering involves every thread
of the block (cumsum, region atomics, run-time-extent ``T.Parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....lowering.fragments import owner_span
from ....lowering.thread_range import absolute_layouts, guarded_range, relative_layouts
from ....lowering.thread_utils import is_fragment
from ....ops.registry import tile_op_of

#: Tile ops re-planned over the guarded threads (``T.clear`` is a ``fill``).
PLANNED_OPS = ("copy", "fill", "gemm", "reduce")


@dataclass
class ThreadGuard:
    """The outermost ``if`` on the thread index and every condition down to a statement."""

    stmt: ir.If
    conds: list = field(default_factory=list)

    def within(self, cond) -> ThreadGuard:
        return ThreadGuard(self.stmt, self.conds + [cond])

    def text(self) -> str:
        where = errors.where(self.stmt.loc) if errors.where(self.stmt.loc) else ""
        return f"`if {self.stmt.condition}`{f' ({where})' if where else ''}"


@dataclass
class Planned:
    """A statement planned over threads ``[lo, hi)`` and the fragments it touches."""

    lo: int
    hi: int
    guard: ThreadGuard
    what: str
    loc: object
    fragments: list


def plan_under_guard(stmt, nest, guard, thread_vars, threads):
    """The :class:`Planned` range of ``stmt`` (a ``T.Parallel`` nest or block-wide tile op)
    under ``guard``, None when the guard keeps every thread; a CompileError when it cannot
    be re-planned."""
    if nest is not None:
        what, loc = "a T.Parallel loop", nest.loc
    else:
        found = tile_op_of(stmt)
        if found is None:  # a run-time-extent T.Parallel (strided over every thread)
            what, loc = "a T.Parallel loop with a run-time extent", stmt.loc
        else:
            what, loc = f"T.{found[0].name}", found[1].loc
    if nest is None and (found is None or found[0].name not in PLANNED_OPS):
        raise errors.compile_error(
            f"{what} under {guard.text()}: its lowering involves every thread of the block, "
            "so it cannot run on the threads the `if` keeps; move it out of the `if` (only "
            "T.copy, T.fill, T.clear, T.gemm, T.reduce_* and static T.Parallel loops are "
            "re-planned over the threads of an `if tx < n` / `if tx >= n` / "
            "`if lo <= tx < hi` branch or a T.ws scope)",
            loc,
        )
    if len(thread_vars) != 1:
        raise errors.compile_error(
            f"{what} under {guard.text()}: re-planning over part of the block needs a "
            "one-dimensional thread block (T.Kernel(..., threads=n)); move it out of the "
            "`if` or use one thread dimension",
            loc,
        )
    span = guarded_range(guard.conds, thread_vars[0], threads)
    if span is None:
        raise errors.compile_error(
            f"{what} under {guard.text()}: the threads it keeps are not one contiguous "
            f"range of the block's {threads} threads known at compile time, so the work "
            "cannot be split over them; write the condition as `tx < n`, `tx >= n` or "
            "`lo <= tx < hi` with constants, or move the op out of the `if`",
            loc,
        )
    lo, hi = span
    if (lo, hi) == (0, threads):
        return None
    return Planned(lo, hi, guard, what, loc, fragments_of(nest.body if nest else stmt))


def fragments_of(node) -> list:
    """The fragment tensors ``node`` names, once each, in order."""
    found, seen = [], set()

    def visit(v):
        if is_fragment(v) and v.__chandle__() not in seen:
            seen.add(v.__chandle__())
            found.append(v)

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return found


def check_guarded(planned, loop_layout, get, origin) -> None:
    """A CompileError when a fragment ``planned`` touches (or its loop layout) has
    elements on threads outside its range."""
    items = [(None, loop_layout)] if loop_layout is not None else []
    items += [(var, get(var)) for var in planned.fragments]
    _check_owners(planned, items, origin)


def _check_owners(planned, items, origin) -> None:
    """``check_guarded`` over ``(fragment Var or None for the loop, layout)`` pairs."""
    for var, layout in items:
        span = owner_span(layout) if layout is not None else None
        if span is None or (planned.lo <= span[0] and span[1] <= planned.hi):
            continue
        name = f"fragment {var.name}" if var is not None else "its loop layout"
        by = f" ({origin(var)})" if var is not None and origin(var) else ""
        raise errors.compile_error(
            f"{planned.what} under {planned.guard.text()}: {name} has elements on threads "
            f"{span[0]}..{span[1] - 1}{by}, but the `if` keeps threads {planned.lo}.."
            f"{planned.hi - 1}, so the others would skip their part; move the op out of the "
            "`if`, or use a fragment that lives only on those threads (one first written "
            "under this `if`)",
            planned.loc,
        )


#: Planned tile ops whose layout rule sees a block of the range's threads (``T.gemm``'s warp
#: partition and fragments over ``hi - lo`` threads, ``T.reduce``'s projection of them).
RANGE_RELATIVE_OPS = ("gemm", "reduce")


def run_in_range(planned, rule, view, ctx) -> dict:
    """The layouts ``rule`` (a gemm/reduce layout rule) chooses for an op planned over
    ``[planned.lo, planned.hi)``: run on a block of ``hi - lo`` threads (fragments known so
    far moved down by ``lo``), its fragments moved back up onto ``[lo, hi)``."""
    import dataclasses

    lo, hi = planned.lo, planned.hi
    known = [(var, ctx.get_layout(var)) for var in planned.fragments]
    _check_owners(planned, known, getattr(ctx, "origin_of", lambda var: ""))
    inner = dataclasses.replace(
        ctx, threads=hi - lo, layout_map=relative_layouts(ctx.layout_map, lo)
    )
    for name in ("prefer_mma", "origin_of"):
        if hasattr(ctx, name):
            setattr(inner, name, getattr(ctx, name))
    inner.range_offset = lo
    return absolute_layouts(rule(view, inner) or {}, lo)
