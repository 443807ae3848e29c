"""Barriers a CUDA compiler would place between per-thread shared-memory accesses.

On CUDA, ``insert_sync`` puts a ``__syncthreads()`` between a thread's write of a shared tile
and another thread's later read of it (and before a write that could overtake earlier
reads), so a kernel may write ``sh[tx, j] = ...`` and then read ``sh[perm(tx), j]`` without
writing the barrier itself (upstream's ThreadSync does the same). On the CPU ``lower_threads``
runs consecutive per-thread statements in one loop over the threads, so without a barrier
thread 0 would read slots that later threads have not written yet.

This pass, run before ``lower_threads``, inserts ``T.sync_threads()`` where such a hazard
exists: walking each block's statements in order it keeps the shared tensors that per-thread
statements wrote / read since the last point where all threads are known to have finished (a
barrier, a tile op or ``T.Parallel`` nest, a block-level statement), and puts a barrier
before a per-thread statement that reads a pending write or writes a pending read or write.
Loops and ``if``s whose bounds / condition do not depend on the thread index are entered
(a loop's body is checked against the accesses of its previous iteration too); a statement
whose control flow depends on the thread index is taken as a whole.

Assumes: tile ops are not lowered yet. Guarantees: the meaning of race-free CUDA programs;
barriers only (a barrier costs the CPU a split thread loop, nothing else).
"""

from __future__ import annotations

from tvm_tirx import ir

from ...lowering.shared_access import shared_accesses
from ...lowering.stmt import alloc_of, launch_of, uses_any
from ...ops import tile_op_of
from ...ops.sync.op import SYNC


def _block_wide(stmt) -> bool:
    """A tile op (barriers included) or a ``T.Parallel`` nest: run once per block."""
    if isinstance(stmt, ir.Evaluate):
        return tile_op_of(stmt) is not None
    return (
        isinstance(stmt, ir.For)
        and stmt.annotations is not None
        and "tl.parallel" in stmt.annotations
    )


def _walk_calls(role, call, reads, writes) -> bool:
    return False  # helper calls: their plain loads / stores are what count


class _Pending:
    """Shared tensors (handles) that per-thread statements read / wrote since the last
    point where every thread had finished."""

    def __init__(self, reads=(), writes=()):
        self.reads, self.writes = set(reads), set(writes)

    def copy(self):
        return _Pending(self.reads, self.writes)

    def union(self, other):
        return _Pending(self.reads | other.reads, self.writes | other.writes)

    def conflicts(self, reads, writes) -> bool:
        return bool(reads & self.writes or writes & (self.writes | self.reads))

    def add(self, reads, writes):
        self.reads |= reads
        self.writes |= writes


class _Inserter:
    def __init__(self, thread_vars):
        self.dependent = list(thread_vars)
        self.inserted = 0

    def barrier(self, loc):
        self.inserted += 1
        return ir.Evaluate(SYNC.make(loc=loc))

    def seq(self, stmts, pending):
        out = []
        for child in stmts:
            if isinstance(child, ir.Bind) and alloc_of(child) is None:
                if uses_any(child.value, self.dependent):
                    self.dependent.append(child.var)
            out.extend(self.stmt(child, pending))
        return out

    def stmt(self, stmt, pending) -> list:
        """``stmt`` (with barriers inside where needed), preceded by one if needed;
        ``pending`` is updated in place."""
        if isinstance(stmt, ir.SeqStmt):
            return [ir.SeqStmt(self.seq(list(stmt.seq), pending))]
        if alloc_of(stmt) is not None:
            return [stmt]
        if _block_wide(stmt) or not uses_any(stmt, self.dependent):
            pending.__init__()  # every thread has finished before block-level work
            return [stmt]
        if _is_control(stmt) and not uses_any(_header(stmt), self.dependent):
            return self.control(stmt, pending)
        reads, writes = shared_accesses(stmt, _walk_calls)
        out = []
        if pending.conflicts(reads, writes):
            out.append(self.barrier(getattr(stmt, "loc", None)))
            pending.__init__()
        pending.add(reads, writes)
        out.append(stmt)
        return out

    def control(self, stmt, pending) -> list:
        """A loop / ``if`` with a thread-uniform header: its body is checked inside."""
        out = []
        reads, writes = shared_accesses(stmt, _walk_calls)
        if pending.conflicts(reads, writes):
            out.append(self.barrier(stmt.loc))
            pending.__init__()
        if isinstance(stmt, ir.If):
            then_state = pending.copy()
            then = _body(self.stmt(stmt.then_case, then_state))
            other, other_state = None, pending.copy()
            if stmt.else_case is not None:
                other = _body(self.stmt(stmt.else_case, other_state))
            merged = then_state.union(other_state)
            pending.__init__(merged.reads, merged.writes)
            out.append(ir.If(stmt.condition, then, other, stmt.loc))
            return out
        # a loop: the body also follows its own previous iteration
        dependent, inserted = list(self.dependent), self.inserted
        first = pending.copy()
        self.stmt(stmt.body, first)
        self.dependent, self.inserted = dependent, inserted
        entry = pending.union(first)
        body = _body(self.stmt(stmt.body, entry))
        pending.__init__(entry.reads, entry.writes)
        if isinstance(stmt, ir.While):
            out.append(ir.While(stmt.condition, body, stmt.loc))
        else:
            out.append(
                ir.For(
                    stmt.var,
                    stmt.begin,
                    stmt.end,
                    stmt.step,
                    stmt.kind,
                    body,
                    stmt.annotations,
                    stmt.loc,
                )  # fmt: skip
            )
        return out


def _is_control(stmt) -> bool:
    return isinstance(stmt, ir.For | ir.While | ir.If) and not _block_wide(stmt)


def _header(stmt):
    if isinstance(stmt, ir.For):
        return [stmt.begin, stmt.end, stmt.step]
    return [stmt.condition]


def _body(stmts):
    return stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)


def insert_implicit_syncs(body):
    """``body`` with a barrier before each per-thread statement that would otherwise read
    another thread's unfinished shared-memory write (see the module docstring)."""
    launch = launch_of(body)
    if launch is not None:
        tag, _, var = launch
        if tag.startswith("threadIdx"):
            tvars, inner = [var], body.body
            while (nested := launch_of(inner)) is not None and nested[0].startswith("threadIdx"):
                tvars.append(nested[2])
                inner = inner.body
            inserter = _Inserter(tvars)
            new_inner = _body(inserter.stmt(inner, _Pending()))
            if not inserter.inserted:
                return body
            return _rebuild(body, new_inner)
        inner = insert_implicit_syncs(body.body)
        if inner.same_as(body.body):
            return body
        return ir.RegionStmt(
            body.op, body.args, body.body_params, body.attrs, inner, body.result_vars, body.loc
        )
    if isinstance(body, ir.SeqStmt):
        return ir.SeqStmt([insert_implicit_syncs(s) for s in body.seq])
    return body


def _rebuild(region, new_inner):
    """``region`` (a chain of thread launches) with its innermost body replaced."""
    nested = launch_of(region.body)
    if nested is not None and nested[0].startswith("threadIdx"):
        new_inner = _rebuild(region.body, new_inner)
    return ir.RegionStmt(
        region.op, region.args, region.body_params, region.attrs, new_inner,
        region.result_vars, region.loc,
    )  # fmt: skip
