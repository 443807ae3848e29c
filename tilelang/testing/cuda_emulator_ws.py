"""Concurrent branches in the CUDA emulator (:mod:`tilelang.testing.cuda_emulator`).

The emulator runs a block's threads in lockstep, so an ``if``/``else`` normally runs its
``then`` lanes to the end before its ``else`` lanes start. Warp-specialized kernels
(``backends/cuda/passes/warp_specialize_auto.py``, and ``T.ws`` programs) split the block
into branches that hand stages to each other through mbarriers while both run: the
consumer's first ``mbarrier_wait`` would wait for a producer that has not started.

An if/else chain whose branches both use mbarriers therefore runs its branches as
cooperative tasks (Python threads of which exactly one runs at a time): a task whose
``mbarrier_wait`` cannot return yet hands the turn to the next unfinished branch and
resumes when it gets the turn back and its phase has completed. A wait that no other
branch can complete — every other branch finished, or a full round of turns changed no
mbarrier — is the deadlock a GPU would hang in, and raises :class:`EmulationError` naming
the barrier. Lanes inside one task still run in lockstep.
"""

from __future__ import annotations

import threading

import tvm_ffi
from tvm_tirx import ir


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


class Tasks:
    """One set of concurrently running branches of a block (module doc)."""

    def __init__(self, machine, error):
        self.machine, self.error = machine, error
        self.cv = threading.Condition()
        self.turn = 0
        self.done: list[bool] = []
        self.failure: BaseException | None = None

    def run(self, parts):
        """Run every ``(stmt, mask)`` of ``parts`` to completion, interleaved at waits."""
        self.done = [False] * len(parts)
        workers = [
            threading.Thread(target=self._worker, args=(i, stmt, mask), daemon=True)
            for i, (stmt, mask) in enumerate(parts)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if self.failure is not None:
            raise self.failure

    def _worker(self, i, stmt, mask):
        with self.cv:
            while self.turn != i and self.failure is None:
                self.cv.wait()
        self.machine.task.current = (self, i)
        try:
            if self.failure is None:
                self.machine.run(stmt, mask)
        except BaseException as err:  # noqa: BLE001 - handed to the launching thread
            with self.cv:
                if self.failure is None:
                    self.failure = err
        finally:
            self.machine.task.current = None
            with self.cv:
                self.done[i] = True
                self._pass_turn(i)
                self.cv.notify_all()

    def _pass_turn(self, i):
        n = len(self.done)
        for d in range(1, n + 1):
            j = (i + d) % n
            if not self.done[j]:
                self.turn = j
                return
        self.turn = None

    def block(self, i, ready, describe):
        """Called by task ``i`` whose wait is not ``ready()``: let the other branches run
        until it is, or raise the deadlock (module doc)."""
        barriers = self.machine.barriers
        while not ready():
            with self.cv:
                if not any(not d for j, d in enumerate(self.done) if j != i):
                    raise self.error(f"{describe()}: no other branch is left to complete it")
                seen = barriers.version
                self._pass_turn(i)
                self.cv.notify_all()
                while self.turn != i and self.failure is None:
                    self.cv.wait()
                if self.failure is not None:
                    raise self.error(f"{describe()}: another branch failed")
                if barriers.version == seen and not ready():
                    raise self.error(f"{describe()}: every branch waits (deadlock)")


def branches(machine, stmt, mask):
    """The ``(stmt, mask)`` branches of the if/else chain ``stmt`` under ``mask`` when they
    should run concurrently (at least two non-empty branches, each using mbarriers), else
    None."""
    import numpy as np

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


__all__ = ["Tasks", "branches", "uses_mbarriers"]
