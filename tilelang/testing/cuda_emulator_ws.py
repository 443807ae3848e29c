"""Concurrent branches in the CUDA emulator (:mod:`tilelang.testing.cuda_emulator`).

The emulator runs a block's threads in lockstep, so an ``if``/``else`` normally runs its
``then`` lanes to the end before its ``else`` lanes start. Warp-specialized kernels
(``backends/cuda/passes/warp_specialize_auto.py``, and ``T.ws`` programs) split the block
into branches that hand stages to each other through mbarriers while both run: the
consumer's first ``mbarrier_wait`` would wait for a producer that has not started.

An if/else chain whose branches both use mbarriers therefore runs its branches as
cooperative tasks (Python threads of which exactly one runs at a time, the
``Scheduler`` of ``cuda_emulator_cluster``, which also runs a cluster's blocks): a task
whose ``mbarrier_wait`` cannot return yet hands the turn to the next unfinished task and
resumes when it gets the turn back and its phase has completed. A wait that no other
task can complete — every other task finished, or a full round of turns changed no
mbarrier — is the deadlock a GPU would hang in, and raises :class:`EmulationError` naming
the barrier and what the other tasks wait for. Lanes inside one task still run in lockstep.
"""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm_tirx import ir

from .cuda_emulator_cluster import Scheduler


def uses_mbarriers(stmt, cache=None) -> bool:
    """Whether ``stmt`` calls any ``tl::mbarrier_*`` helper (``cache``: a dict kept by the
    caller for one emulation, keyed by the statement's handle)."""
    key = stmt.__chandle__()
    if cache is not None and key in cache:
        return cache[key][1]
    found = []

    def visit(call):
        if getattr(call.op, "name", "") == "tirx.call_extern" and call.args:
            head = call.args[0]
            if isinstance(head, ir.StringImm) and str(head.value).startswith("tl::mbarrier_"):
                found.append(call)

    tvm_ffi.structural_walk(stmt, [(ir.Call, visit)])
    if cache is not None:
        cache[key] = (stmt, bool(found))  # the statement kept alive: handles are reused
    return bool(found)


def run_branches(machine, parts):
    """Run every ``(stmt, mask)`` of ``parts`` to completion, interleaved at waits: as tasks
    of the running task's scheduler (a cluster member, an enclosing branch), else of a new
    :class:`~tilelang.testing.cuda_emulator_cluster.Scheduler` whose progress is the block's
    mbarrier changes."""
    jobs = [
        (lambda s=s, m=m: machine.run(s, m), machine, f"branch {k} ({_threads(m)})")
        for k, (s, m) in enumerate(parts)
    ]
    current = getattr(machine.task, "current", None)
    if current is not None:
        sched, me = current
        sched.run_children(me, jobs, "warp-specialized branches")
        return
    barriers = machine.barriers
    Scheduler(machine.error_type, lambda: barriers.version).run(jobs)


def _threads(mask):
    """``threads a..b`` (or the count when not contiguous) of a lane mask."""
    idx = np.nonzero(mask)[0]
    if idx.size and idx[-1] - idx[0] + 1 == idx.size:
        return f"threads {idx[0]}..{idx[-1]}"
    return f"{idx.size} threads"


def branches(machine, stmt, mask):
    """The ``(stmt, mask)`` branches of the if/else chain ``stmt`` under ``mask`` when they
    should run concurrently (at least two non-empty branches, each using mbarriers), else
    None."""
    parts = []
    rest = mask
    node = stmt
    while True:
        c = np.broadcast_to(machine.eval(node.condition, rest), (machine.lanes,))
        then = np.logical_and(rest, c)
        rest = np.logical_and(rest, np.logical_not(c))
        if then.any():
            parts.append((node.then_case, then))
        other = node.else_case
        if isinstance(other, ir.If) and other.else_case is not None:
            node = other
            continue
        if other is not None and rest.any():
            parts.append((other, rest))
        break
    cache = machine.mbarrier_users
    if len(parts) < 2 or not all(uses_mbarriers(s, cache) for s, _ in parts):
        return None
    return parts


__all__ = ["branches", "run_branches", "uses_mbarriers"]
