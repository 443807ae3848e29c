"""Shared-memory race detection for the CUDA emulator (``emulate(..., race_check=True)``).

The emulator runs the threads of a block in lockstep, so a missing ``__syncthreads`` never
changes its results. This checker records, per shared-memory byte, which warp last wrote
it and which warp(s) read it since the last barrier (an *epoch*), and raises when a warp
reads a byte another warp wrote in the same epoch (read after write), writes a byte
another warp read in the same epoch (write after read) or wrote in it (write after write):
on a GPU the two accesses may run in either order. Accesses of one warp are not compared
with each other (its lanes run together; warp-level code orders them with ``__syncwarp``).

Epochs end at ``__syncthreads``, ``tl::named_barrier_sync`` reached by the whole block and,
conservatively, at every mbarrier wait (TMA and warp-specialized pipelines order their
stages with mbarriers, not block barriers). A named barrier of part of the block (the
consumers' barrier in a warp-specialized kernel, ``bar.sync id, n`` under an ``if`` on the
thread index) orders only the participating warps' accesses. TMA
writes are asynchronous-proxy writes ordered by those mbarriers: they are not recorded.

Cross-proxy hazards: every generic access (ordinary loads and stores, ``ldmatrix``) also
marks its bytes as *unfenced* for its warp until the warp runs ``fence.proxy.async``
(``tl::fence_proxy_async*``); a TMA load writing a byte still unfenced for some warp raises
(:meth:`RaceChecker.async_write`): mbarriers and ``__syncthreads`` order the generic proxy
only, so on a GPU the TMA write may land before that warp's read returned (the H200 lost the
rows of an mma.sync GEMM's last ldmatrix calls this way, benchmark/RESULTS.md session 5).
Likewise an async-proxy read reported by a wgmma harness (``generic=False``) of a byte some
warp wrote through the generic proxy with no fence since raises (read after write).
Not modelled: loads whose values feed a wgmma, released after the wgmma's wait without a
fence (``backends/cuda/passes/ws_stage_reads.py``: the wgmma is issued only once they
returned); the wgmma harnesses of the tests run without ``race_check``.
"""

from __future__ import annotations

import numpy as np

WARP = 32

try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - numpy 1.x
    _byte_bounds = np.byte_bounds


class SharedRaceError(RuntimeError):
    """Two warps touched the same shared byte without a barrier between them."""


class RaceChecker:
    """Per-block shadow state of shared memory (see the module docstring)."""

    def __init__(self, error=SharedRaceError):
        self.error = error
        self.shadows: dict = {}
        self.epoch = 0
        self.block = None

    def new_block(self, block_index):
        """A new block starts: its shared memory is fresh."""
        self.shadows.clear()
        self.epoch = 0
        self.block = dict(block_index)

    def barrier(self, threads=None, block_threads=None):
        """``__syncthreads`` (or an mbarrier wait): earlier accesses are ordered. With
        ``threads`` (a named barrier ``bar.sync id, n`` reached by those threads of a block of
        ``block_threads``) only the accesses of the participating warps become ordered: a
        byte last written by a participant leaves the epoch, and the participants' reads of
        the others do; accesses of the warps outside stay unordered with everyone."""
        threads = None if threads is None else np.asarray(threads, np.int64)
        if threads is None or block_threads is None or threads.size >= block_threads:
            self.epoch += 1
            return
        warps = np.unique(threads // WARP)
        bits = np.bitwise_or.reduce(_warp_bits(warps))
        for sh in self.shadows.values():
            done = (sh["wepoch"] == self.epoch) & np.isin(sh["writer"], warps)
            sh["wepoch"][done] = -1
            sh["readers"][sh["repoch"] == self.epoch] &= ~bits

    def _shadow(self, root):
        key = id(root)
        entry = self.shadows.get(key)
        if entry is None:
            n = root.nbytes
            entry = {
                "root": root,  # keeps id(root) from being reused while the block runs
                "writer": np.full(n, -1, np.int32),
                "wepoch": np.full(n, -1, np.int64),
                "readers": np.zeros(n, np.uint64),  # warps that read it this epoch, a bit each
                "repoch": np.full(n, -1, np.int64),
                "unfenced": np.zeros(n, np.uint64),  # warps' generic accesses, one bit each
                "unfenced_w": np.zeros(n, np.uint64),  # warps' generic writes, one bit each
            }
            self.shadows[key] = entry
        return entry

    def access(self, buf, byte_starts, nbytes, threads, kind, what, generic=True):
        """Record ``kind`` ("read"/"write") of ``nbytes`` bytes at ``byte_starts`` (offsets
        into ``buf``'s storage, one per thread of ``threads``) and raise on a hazard.
        ``generic=False``: an async-proxy access (a wgmma operand read), which needs no
        ``fence.proxy.async`` before a later TMA write."""
        threads = np.asarray(threads, np.int64)
        if threads.size == 0:
            return
        root, base = storage_of(buf.data)
        sh = self._shadow(root)
        addr = (base + np.asarray(byte_starts, np.int64)[:, None] + np.arange(nbytes)).ravel()
        warp = np.repeat(threads // WARP, nbytes)
        bits = _warp_bits(warp)
        if generic:
            np.bitwise_or.at(sh["unfenced"], addr, bits)
            if kind == "write":
                np.bitwise_or.at(sh["unfenced_w"], addr, bits)
        elif kind == "read":
            self._unfenced_writes(sh, addr, buf, what)
        writer = sh["writer"][addr]
        other_writer = (sh["wepoch"][addr] == self.epoch) & (writer >= 0) & (writer != warp)
        if kind == "read":
            self._raise(other_writer, addr, warp, writer, buf, what, "read after write")
            # per byte: the warps that read it in this epoch, one bit each
            stale = sh["repoch"][addr] != self.epoch
            sh["readers"][addr[stale]] = 0
            np.bitwise_or.at(sh["readers"], addr, bits)
            sh["repoch"][addr] = self.epoch
        else:
            others = sh["readers"][addr] & ~bits
            hit = (sh["repoch"][addr] == self.epoch) & (others != 0)
            self._raise(hit, addr, warp, _lowest_bit(others), buf, what, "write after read")
            self._raise(other_writer, addr, warp, writer, buf, what, "write after write")
            sh["writer"][addr] = warp
            sh["wepoch"][addr] = self.epoch

    def proxy_fence(self, threads):
        """``fence.proxy.async`` by ``threads``: their warps' generic accesses so far are
        ordered before later async-proxy ones."""
        warps = np.unique(np.asarray(threads, np.int64) // WARP)
        if warps.size == 0:
            return
        bits = np.bitwise_or.reduce(_warp_bits(warps))
        for sh in self.shadows.values():
            sh["unfenced"] &= ~bits
            sh["unfenced_w"] &= ~bits

    def _unfenced_writes(self, sh, addr, buf, what):
        """An async-proxy read (a wgmma operand) of bytes a warp wrote through the generic
        proxy with no ``fence.proxy.async`` since: the wgmma may read the old bytes."""
        pending = sh["unfenced_w"][addr]
        if not pending.any():
            return
        k = int(np.argmax(pending != 0))
        warps = [w for w in range(64) if int(pending[k]) >> w & 1]
        raise self.error(
            f"cross-proxy race (read after write) on {buf.name}: {what} reads byte "
            f"{int(addr[k])} that warp(s) {warps} wrote through the generic proxy with no "
            f"fence.proxy.async since (block {self.block}); the async proxy may read the "
            "old value"
        )

    def async_write(self, buf, elements, what):
        """A TMA write of ``buf``'s ``elements`` (flat indices): raise when a warp accessed
        one of their bytes through the generic proxy with no proxy fence since."""
        root, base = storage_of(buf.data)
        sh = self._shadow(root)
        size = buf.data.dtype.itemsize
        addr = (base + np.asarray(elements, np.int64).ravel()[:, None] * size).ravel()
        addr = (addr[:, None] + np.arange(size)).ravel()
        pending = sh["unfenced"][addr]
        if not pending.any():
            return
        k = int(np.argmax(pending != 0))
        bits = int(pending[k])
        warps = [w for w in range(64) if bits >> w & 1]
        raise self.error(
            f"cross-proxy race (write after read) on {buf.name}: {what} writes byte "
            f"{int(addr[k])} that warp(s) {warps} accessed through the generic proxy with no "
            f"fence.proxy.async since (block {self.block}); the TMA write may land before "
            "those accesses complete"
        )

    def _raise(self, hit, addr, warp, other, buf, what, hazard):
        """Raise for the first ``hit``; ``other``: the other warp, per element of ``addr``."""
        if not hit.any():
            return
        k = int(np.argmax(hit))
        raise self.error(
            f"shared-memory race ({hazard}) on {buf.name}: {what} by warp {int(warp[k])} "
            f"touches byte {int(addr[k])} that warp {int(other[k])} accessed since the last "
            f"barrier (block {self.block}); a __syncthreads is missing"
        )


def _warp_bits(warps):
    """One bit per warp index (uint64: up to 64 warps)."""
    return np.left_shift(np.uint64(1), np.asarray(warps).astype(np.uint64))


def _lowest_bit(bits):
    """Index of the lowest set bit of each uint64 (-1 where none is set)."""
    bits = np.asarray(bits, np.uint64)
    low = bits & (~bits + np.uint64(1))
    index = np.log2(np.where(low == 0, 1, low).astype(np.float64)).astype(np.int64)
    return np.where(low == 0, -1, index)


def storage_of(array):
    """(the array owning ``array``'s memory, byte offset of ``array`` inside it)."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = _byte_bounds(array)[0] - _byte_bounds(root)[0]
    return root, offset


__all__ = ["RaceChecker", "SharedRaceError", "storage_of"]
