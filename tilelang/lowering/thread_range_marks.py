"""Markers for branches whose tile work was re-planned over threads ``[lo, hi)``.

``lower_parallel`` marks each ``T.Parallel`` nest it lowers under an ``if`` on the thread
index (:data:`WORK`); ``LowerTileOps`` turns a branch holding such work, or tile ops it
lowered with a thread range, into ``SeqStmt([RANGE(lo, hi), ...])`` and drops the work
markers; ``insert_sync`` synchronises that branch on its own with ``bar.sync id, hi - lo``
(the branch's threads only) and removes the range marker. Between those passes the
markers are ordinary extern-call statements (no code of their own).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .thread_utils import extern_name, extern_stmt

WORK = "tl::thread_range_work"
RANGE = "tl::thread_range_branch"


def work_marker(loc=None) -> ir.Evaluate:
    """The :data:`WORK` marker, carrying the user's line of the work (``loc``)."""
    stmt = extern_stmt(WORK)
    return ir.Evaluate(stmt.value, loc) if loc is not None else stmt


def work_loc(stmt):
    """The source location of the first :data:`WORK` marker in ``stmt`` that has one."""
    from ..errors import where

    found = []

    def visit(x):
        if not found and extern_name(x) == WORK and where(x.loc):
            found.append(x.loc)

    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, visit)])
    return found[0] if found else None


def has_work(stmt) -> bool:
    """Whether ``stmt`` holds a :data:`WORK` marker."""
    found = []
    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, lambda x: found.append(extern_name(x) == WORK))])
    return any(found)


def drop_work(stmt):
    """``stmt`` without its :data:`WORK` markers."""
    return _without(stmt, WORK)


def mark_range(stmt, lo: int, hi: int, loc=None):
    """``stmt`` headed by the range marker of ``[lo, hi)`` (``loc``: the user's line of its
    first tile op, for errors)."""
    marker = extern_stmt(RANGE, ir.const(lo, "int32"), ir.const(hi, "int32"))
    if loc is not None:
        marker = ir.Evaluate(marker.value, loc)
    rest = list(stmt.seq) if isinstance(stmt, ir.SeqStmt) else [stmt]
    return ir.SeqStmt([marker] + rest)


def range_of(stmt):
    """``(lo, hi, rest, loc)`` when ``stmt`` is headed by a range marker, else None."""
    seq = list(stmt.seq) if isinstance(stmt, ir.SeqStmt) else [stmt]
    if not seq or extern_name(seq[0]) != RANGE:
        return None
    call = seq[0].value
    lo, hi = int(call.args[1].value), int(call.args[2].value)
    rest = seq[1:]
    if not rest:
        rest_stmt = ir.SeqStmt([])
    else:
        rest_stmt = rest[0] if len(rest) == 1 else ir.SeqStmt(rest)
    return lo, hi, rest_stmt, seq[0].loc


def _without(stmt, name):
    def seq(x):
        kept = [s for s in x.seq if extern_name(s) != name]
        if len(kept) == len(x.seq):
            return x
        return ir.SeqStmt(kept) if kept else ir.Evaluate(ir.const(0, "int32"))

    return tvm_ffi.structural_map(stmt, [(ir.SeqStmt, seq)])
