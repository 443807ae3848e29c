"""Barrier races on shared memory (LDS / threadgroup memory), for the vendor emulators.

The emulators run a block's threads in lockstep, which hides a missing ``__syncthreads``:
every read already sees every earlier write. :class:`RaceTracker` records, for each byte of
each shared allocation, the thread that last wrote it and the thread(s) that read it since
the last barrier (an *epoch*), and raises when two threads touch a byte in one epoch and
one of them writes it:

* a read of a byte another thread wrote in this epoch (read after write);
* a write of a byte another thread read or wrote in this epoch (write after read/write).

So it finds the barriers a real GPU needs, whatever order the lockstep run hides. The
accesses it sees are element loads and stores and the ``tl::copy_vec``-family vector copies
(an emulator reports them through :meth:`read` / :meth:`write`); atomics are not tracked
(they may race by design). Threads of one wavefront are distinct threads here, as the CUDA
and HIP memory models make them.
"""

from __future__ import annotations

import numpy as np
from tvm_tirx import ir

_NONE, _MANY = -1, -2


class _Bytes:
    """Per-byte state of one shared allocation."""

    def __init__(self, base: int, size: int, name: str):
        self.base, self.size, self.name = base, size, name
        self.writer = np.full(size, _NONE, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.reader = np.full(size, _NONE, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)


class RaceTracker:
    """Shared-memory accesses per barrier epoch; ``error`` is the exception class raised."""

    def __init__(self, error):
        self.error = error
        self.epoch = 0
        self.allocations: list[_Bytes] = []

    def allocate(self, data: np.ndarray, name: str) -> None:
        """Track the bytes of a new shared allocation (``data``, a numpy array)."""
        base = data.__array_interface__["data"][0]
        self.allocations = [
            a for a in self.allocations if a.base + a.size <= base or base + data.nbytes <= a.base
        ]
        self.allocations.append(_Bytes(base, data.nbytes, name))

    def barrier(self) -> None:
        """Every thread reached ``__syncthreads``: a new epoch."""
        self.epoch += 1

    def _locate(self, data, flat, threads, nbytes):
        """(allocation, byte offsets, their threads) of elements ``flat`` of ``data``."""
        if not len(threads):
            return None
        start = data.__array_interface__["data"][0]
        addr = start + np.asarray(flat, np.int64) * data.itemsize
        for alloc in self.allocations:
            if alloc.base <= addr.min() and addr.max() + nbytes <= alloc.base + alloc.size:
                offsets = (addr - alloc.base)[:, None] + np.arange(nbytes)[None, :]
                return alloc, offsets.reshape(-1), np.repeat(np.asarray(threads, np.int64), nbytes)
        return None

    def read(self, data, flat, threads, nbytes=None, what="") -> None:
        """``threads[i]`` reads the element ``flat[i]`` of ``data`` (``nbytes`` each)."""
        hit = self._locate(data, flat, threads, nbytes or data.itemsize)
        if hit is None:
            return
        a, b, who = hit
        e = self.epoch
        self._check_writes(a, b, who, "reads", what)
        # readers this epoch: one thread, or _MANY
        order = np.argsort(b, kind="stable")
        bs, ws = b[order], who[order]
        first = np.r_[True, bs[1:] != bs[:-1]]
        starts = np.nonzero(first)[0]
        ub = bs[starts]
        lo = np.minimum.reduceat(ws, starts)
        hi = np.maximum.reduceat(ws, starts)
        fresh = a.r_epoch[ub] != e
        prev = np.where(fresh, lo, a.reader[ub])
        many = (lo != hi) | (~fresh & (prev != lo))
        a.reader[ub] = np.where(many, _MANY, lo)
        a.r_epoch[ub] = e

    def write(self, data, flat, threads, nbytes=None, what="") -> None:
        """``threads[i]`` writes the element ``flat[i]`` of ``data`` (``nbytes`` each)."""
        hit = self._locate(data, flat, threads, nbytes or data.itemsize)
        if hit is None:
            return
        a, b, who = hit
        e = self.epoch
        self._check_writes(a, b, who, "writes", what)
        war = (a.r_epoch[b] == e) & (a.reader[b] != who)
        if war.any():
            k = int(np.argmax(war))
            r = int(a.reader[b[k]])
            by = "several threads" if r == _MANY else f"thread {r}"
            self._race("writes", a, b[k], who[k], f"read by {by}", what)
        a.writer[b] = who
        a.w_epoch[b] = e

    def _check_writes(self, a, b, who, verb, what):
        """Raise when a byte of ``b`` was written in this epoch by another thread."""
        bad = (a.w_epoch[b] == self.epoch) & (a.writer[b] != who)
        if bad.any():
            k = int(np.argmax(bad))
            self._race(verb, a, b[k], who[k], f"written by thread {a.writer[b[k]]}", what)

    def _race(self, verb, a, byte, thread, other, what):
        raise self.error(
            f"shared-memory race: thread {int(thread)} {verb} byte {int(byte)} of {a.name}"
            f"{' (' + what + ')' if what else ''}, {other} since the last __syncthreads"
        )


class RaceTracking:
    """Mixin for an emulator machine (``cuda_emulator._Machine``) reporting its shared
    accesses to ``self.races`` (a :class:`RaceTracker`; None: no tracking): element loads
    and stores, ``tl::copy_vec``/``tl::zero_vec``, and ``__syncthreads*`` as barriers."""

    races: RaceTracker | None = None

    def _fresh(self, var):
        super()._fresh(var)
        if self.races is not None and str(var.ty.scope).startswith("shared"):
            self.races.allocate(self.buf(var).data, var.name)

    def _track_shared(self, kind, tensor, indices, mask):
        if self.races is None or not str(tensor.ty.scope).startswith("shared"):
            return
        b = self.buf(tensor)
        flat, active = self.flat(b, indices, mask, "access to")
        rows = np.nonzero(active)[0]
        getattr(self.races, kind)(b.data, flat[rows], rows, what=tensor.name)

    def eval(self, e, mask):
        if self.races is not None and isinstance(e, ir.TensorLoad):
            self._track_shared("read", e.source, e.indices, mask)
        return super().eval(e, mask)

    def _run_TensorStore(self, stmt, mask):
        self._track_shared("write", stmt.dest, stmt.indices, mask)
        super()._run_TensorStore(stmt, mask)

    def _run_Evaluate(self, stmt, mask):
        v = stmt.value
        if self.races is not None and isinstance(v, ir.Call) and v.op.name == "tirx.call_extern":
            if str(v.args[0].value).startswith("__syncthreads") and np.all(mask):
                self.races.barrier()
        super()._run_Evaluate(stmt, mask)

    def _copy_vec(self, fname, args, mask):
        if self.races is not None:
            nbytes = int(fname[fname.index("<") + 1 : fname.index(">")])
            rows = np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0]
            if not fname.startswith("tl::zero_vec"):
                src, sflat = self._pointer(args[1], mask)
                if not src.local:
                    self.races.read(src.data, sflat[rows], rows, nbytes, src.name)
            dst, dflat = self._pointer(args[0], mask)
            if not dst.local:
                self.races.write(dst.data, dflat[rows], rows, nbytes, dst.name)
        return super()._copy_vec(fname, args, mask)


__all__ = ["RaceTracker", "RaceTracking"]
