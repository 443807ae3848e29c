"""Run the Metal backend's thread-level IR on numpy arrays (no Apple GPU needed).

The CUDA emulator (``tilelang.testing.cuda_emulator``) plus the Metal calls the Metal op
rules emit:

* ``simd_shuffle_xor(value, mask)`` within 32-lane SIMD-groups;
* ``simd_sum`` / ``simd_max`` / ``simd_min`` / ``simd_and`` / ``simd_or`` / ``simd_xor``
  over a whole SIMD-group;
* ``tl::simdgroup_gemm_8x8<tm, tn>(c, a, lda, b, ldb, trans_a, trans_b)`` (a SIMD-group's
  tm x tn atoms for one k step)
  (``tilelang/backends/metal/include/tl_metal.h``): per SIMD-group, the 8x8 A and B tiles
  at the (group-uniform) pointers with their row strides, the accumulator spread over the
  lanes as ``tilelang.layout.simdgroup_layouts`` says (lane ``l`` holds row ``row(l)``,
  columns ``col(l)`` and ``col(l) + 1``); products summed in float64, rounded to float32.

``emulate(..., check_races=True)`` also checks the barriers (``tilelang.testing.shared_races``).
"""

from __future__ import annotations

import numpy as np

from .cuda_emulator import EmulationError, _Machine
from .shared_races import RaceTracker, RaceTracking

SIMD = 32
_WHOLE = {
    "simd_sum": np.sum,
    "simd_max": np.max,
    "simd_min": np.min,
    "simd_and": np.bitwise_and.reduce,
    "simd_or": np.bitwise_or.reduce,
    "simd_xor": np.bitwise_xor.reduce,
}


def lane_element(lane: int) -> tuple[int, int]:
    """(row, first column) of the two accumulator elements ``lane`` holds."""
    q = lane // 4
    return (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2


class _MetalMachine(RaceTracking, _Machine):
    def _extern(self, fname, args, e, mask):
        if fname == "simd_shuffle_xor":
            value = np.broadcast_to(self.eval(args[0], mask), (self.lanes,))
            k = int(self.scalar(args[1]))
            if k >= SIMD:
                raise EmulationError(f"simd_shuffle_xor: mask {k} leaves the SIMD-group")
            return value[np.arange(self.lanes) ^ k]
        if fname in _WHOLE:
            value = np.broadcast_to(self.eval(args[0], mask), (self.lanes,)).reshape(-1, SIMD)
            out = _WHOLE[fname](value, axis=1)
            return np.repeat(out, SIMD).astype(value.dtype)
        if fname.startswith("tl::simdgroup_gemm_8x8<"):
            tm, tn = (int(x) for x in fname[fname.index("<") + 1 : fname.index(">")].split(","))
            return self._simdgroup_mma(fname, args, mask, tm, tn)
        if fname.startswith(
            ("__shfl", "tl::mma_", "tl::ptx_", "tl::cp_async", "tl::wgmma", "tl::mfma")
        ):
            raise EmulationError(
                f"{fname} is not a Metal call: the Metal lowering must not emit it"
            )
        return super()._extern(fname, args, e, mask)

    def _groups(self, fname, mask):
        active = np.broadcast_to(mask, (self.lanes,))
        if self.lanes % SIMD:
            raise EmulationError(f"{fname}: the block is not a whole number of SIMD-groups")
        per = active.reshape(-1, SIMD)
        if (per.any(axis=1) & ~per.all(axis=1)).any():
            raise EmulationError(f"{fname}: reached by part of a SIMD-group")
        return np.arange(self.lanes).reshape(-1, SIMD)[per.all(axis=1)]

    def _tile(self, ptr, ld, trans, lanes, mask, fname, shift=0):
        buf, flat = self._pointer(ptr, mask)
        flat = flat + shift
        starts = {int(flat[t]) for t in lanes}
        if len(starts) != 1:
            raise EmulationError(f"{fname}: the lanes of a SIMD-group pass different tiles")
        base = starts.pop()
        rows, cols = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
        offsets = base + (cols * ld + rows if trans else rows * ld + cols)
        if offsets.max() >= buf.data.shape[-1]:
            raise EmulationError(f"{fname}: an 8x8 tile runs past {buf.name}")
        if self.races is not None and not buf.local:  # every lane of the group reads the tile
            flat_all = np.repeat(offsets.reshape(-1), len(lanes))
            self.races.read(buf.data, flat_all, np.tile(lanes, offsets.size), what=buf.name)
        data = buf.data if buf.data.ndim == 1 else buf.data[lanes[0]]
        return data[offsets].astype(np.float64)

    def _simdgroup_mma(self, fname, args, mask, tm, tn):
        """``simdgroup_gemm_8x8<tm, tn>`` (a SIMD-group's tm x tn atoms; atom (i, j) reads A at ``a + 8 i`` rows (columns when transposed) and
        B at ``b + 8 j`` columns (rows when transposed), accumulators at ``c[(i tn + j) 2]``)."""
        c_raw, c_off = self._local_bytes(args[0], mask, 8 * tm * tn, fname)
        lda, ldb = int(self.scalar(args[2])), int(self.scalar(args[4]))
        ta, tb = bool(self.scalar(args[5])), bool(self.scalar(args[6]))
        for lanes in self._groups(fname, mask):
            for i in range(tm):
                a = self._tile(args[1], lda, ta, lanes, mask, fname, i * 8 if ta else i * 8 * lda)
                for j in range(tn):
                    b = self._tile(
                        args[3], ldb, tb, lanes, mask, fname, j * 8 * ldb if tb else j * 8
                    )
                    c = np.zeros((8, 8))
                    at = 8 * (i * tn + j)
                    for lane, t in enumerate(lanes):
                        row, col = lane_element(lane)
                        o = int(c_off[t]) + at
                        c[row, col : col + 2] = c_raw[t, o : o + 8].copy().view(np.float32)
                    d = a @ b + c
                    for lane, t in enumerate(lanes):
                        row, col = lane_element(lane)
                        o = int(c_off[t]) + at
                        c_raw[t, o : o + 8] = (
                            d[row, col : col + 2].astype(np.float32).view(np.uint8)
                        )
        return None


def emulate(func, *arrays, blocks=None, aligned=True, write_once=False, check_races=False):
    """Run the lowered Metal ``func`` on numpy ``arrays`` (modified in place; also returned).

    ``check_races``: raise EmulationError when two threads touch a threadgroup-memory byte
    between two barriers and one of them writes it (``tilelang.testing.shared_races``; a
    simdgroup gemm tile counts as read by every lane of its SIMD-group)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if len(arrays) != len(func.params):
        raise EmulationError(f"{len(func.params)} arguments expected, got {len(arrays)}")
    machine = _MetalMachine(func, arrays, blocks, aligned, write_once)
    if check_races:
        machine.races = RaceTracker(EmulationError)
    machine.run(func.body, True)
    return arrays


__all__ = ["emulate", "lane_element"]
