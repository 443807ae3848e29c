"""Run the ROCm backend's thread-level IR on numpy arrays (no AMD GPU needed).

The ROCm pipeline produces the same kind of thread-level TIRx as the CUDA one, with two
vendor calls of its own; this emulator is the CUDA emulator
(``tilelang.testing.cuda_emulator``) plus:

* ``__shfl_xor(value, lane_mask, width)``: HIP's shuffle; lanes exchange within groups of
  ``width`` (64: a CDNA wavefront);
* ``tl::load_vec<N>(regs, global)`` / ``tl::stage_copy<N>(lds, regs)``: a ``tl::copy_vec<N>``
  (software pipelining's loads and stores; offsets are vector multiples, base alignment free);
* ``tl::mfma_*(c, a, b)`` (``tilelang/backends/rocm/include/tl_hip.h``): one 16x16xK MFMA
  per 64-lane wavefront. Lane ``l`` holds ``A[l % 16, kpl (l // 16) + v]``,
  ``B[kpl (l // 16) + v, l % 16]`` and ``C[4 (l // 16) + r, l % 16]`` (the layouts of
  ``tilelang.layout.mfma_layouts``); products are summed in float64 and rounded to the
  accumulator type once per instruction. Every lane of a wavefront must reach the call.

So a kernel's ROCm lowering is compared with float64 references on the CPU, as the
CUDA examples are (``testing/python/backends/rocm/test_rocm_emulated.py``).
"""

from __future__ import annotations

import numpy as np

from . import cuda_emulator as _cuda
from .cuda_emulator import EmulationError, _Machine
from .shared_races import RaceTracker, RaceTracking

try:  # the FNUZ fp8 formats of gfx94x, for global and shared tensors of fp8 gemms
    import ml_dtypes as _ml

    _cuda._NP.setdefault("float8_e4m3fnuz", _ml.float8_e4m3fnuz)
    _cuda._NP.setdefault("float8_e5m2fnuz", _ml.float8_e5m2fnuz)
except (ImportError, AttributeError):  # pragma: no cover - ml_dtypes is a dependency
    pass

WAVE = 64
#: wrapper -> (k per lane, operand dtype, accumulator dtype)
MFMA = {
    "tl::mfma_f32_16x16x16_f16": (4, np.float16, np.float32),
    "tl::mfma_f32_16x16x16_bf16": (4, "bfloat16", np.float32),
    "tl::mfma_i32_16x16x16_i8": (4, np.int8, np.int32),
    "tl::mfma_i32_16x16x32_i8": (8, np.int8, np.int32),
    "tl::mfma_f32_16x16x32_fp8": (8, "float8_e4m3fnuz", np.float32),
    "tl::mfma_f32_16x16x32_bf8": (8, "float8_e5m2fnuz", np.float32),
}


def _np(dtype):
    if isinstance(dtype, str):
        import ml_dtypes

        return getattr(ml_dtypes, dtype)
    return dtype


class _RocmMachine(RaceTracking, _Machine):
    # ---------------------------------------------------------------------- vendor calls
    def _call(self, e, mask):
        if getattr(e.op, "name", "") == "tirx.reinterpret":  # fp8 bytes <-> fp8 values
            src, dst = _cuda.np_dtype(str(e.args[0].ty)), _cuda.np_dtype(str(e.ty))
            value = np.asarray(self.eval(e.args[0], mask)).astype(src)
            return value.view(dst)
        return super()._call(e, mask)

    def _extern(self, fname, args, e, mask):
        if fname == "__shfl_xor":
            value = np.broadcast_to(self.eval(args[0], mask), (self.lanes,))
            k = int(self.scalar(args[1]))
            width = int(self.scalar(args[2])) if len(args) > 2 else WAVE
            if k >= width:
                raise EmulationError(f"__shfl_xor: lane mask {k} crosses the width {width}")
            return value[np.arange(self.lanes) ^ k]
        if fname in MFMA:
            return self._mfma(fname, args, mask)
        if fname.startswith(("tl::stage_copy<", "tl::load_vec<")):  # copy_vecs (pipelining)
            return self._copy_vec("tl::copy_vec<" + fname.split("<", 1)[1], args, mask)
        if fname in ("__shfl_xor_sync", "__shfl_sync", "__shfl_down_sync") or fname.startswith(
            ("tl::mma_", "tl::ptx_ldmatrix", "tl::cp_async", "tl::wgmma")
        ):
            raise EmulationError(f"{fname} is a CUDA call: the ROCm lowering must not emit it")
        return super()._extern(fname, args, e, mask)

    def _copy_vec(self, fname, args, mask):
        """``tl::copy_vec`` moves bytes: between tensors of different element types of one
        size (fp8 tile -> byte registers) the bits are kept, not the values."""
        if not fname.startswith("tl::zero_vec"):
            dst, _ = self._pointer(args[0], mask)
            src, _ = self._pointer(args[1], mask)
            same_size = dst.data.dtype.itemsize == src.data.dtype.itemsize
            if dst.data.dtype != src.data.dtype and same_size:
                original = dst.data
                dst.data = original.view(src.data.dtype)
                try:
                    return super()._copy_vec(fname, args, mask)
                finally:
                    dst.data = original
        return super()._copy_vec(fname, args, mask)

    def _waves(self, fname, mask):
        active = np.broadcast_to(mask, (self.lanes,))
        if self.lanes % WAVE:
            raise EmulationError(f"{fname}: the block is not a whole number of wavefronts")
        per_wave = active.reshape(-1, WAVE)
        partial = per_wave.any(axis=1) & ~per_wave.all(axis=1)
        if partial.any():
            raise EmulationError(f"{fname}: reached by part of wavefront {int(np.argmax(partial))}")
        return np.arange(self.lanes).reshape(-1, WAVE)[per_wave.all(axis=1)]

    def _mfma(self, fname, args, mask):
        kpl, dt, ct = MFMA[fname]
        dt = _np(dt)
        isz, csz = np.dtype(dt).itemsize, np.dtype(ct).itemsize
        c_raw, c_off = self._local_bytes(args[0], mask, 4 * csz, fname)
        a_raw, a_off = self._local_bytes(args[1], mask, kpl * isz, fname)
        b_raw, b_off = self._local_bytes(args[2], mask, kpl * isz, fname)

        def regs(raw, off, t, n, size, dtype):
            o = int(off[t])
            return raw[t, o : o + n * size].copy().view(dtype).astype(np.float64)

        k = 4 * kpl
        for lanes in self._waves(fname, mask):
            a, b, c = np.zeros((16, k)), np.zeros((k, 16)), np.zeros((16, 16))
            for lane, t in enumerate(lanes):
                row, grp = lane % 16, lane // 16
                a[row, kpl * grp : kpl * (grp + 1)] = regs(a_raw, a_off, t, kpl, isz, dt)
                b[kpl * grp : kpl * (grp + 1), row] = regs(b_raw, b_off, t, kpl, isz, dt)
                c[4 * grp : 4 * grp + 4, row] = regs(c_raw, c_off, t, 4, csz, ct)
            d = a @ b + c
            for lane, t in enumerate(lanes):
                out = d[4 * (lane // 16) : 4 * (lane // 16) + 4, lane % 16]
                o = int(c_off[t])
                c_raw[t, o : o + 4 * csz] = out.astype(ct).view(np.uint8)
        return None


def emulate(func, *arrays, blocks=None, aligned=True, write_once=False, check_races=False):
    """Run the lowered ROCm ``func`` on numpy ``arrays`` (modified in place; also returned).

    Arguments as :func:`tilelang.testing.cuda_emulator.emulate`; ``check_races``: also
    raise EmulationError when two threads touch an LDS byte between two barriers and one
    of them writes it (``tilelang.testing.shared_races``: the barriers lockstep hides).
    """
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if len(arrays) != len(func.params):
        raise EmulationError(f"{len(func.params)} arguments expected, got {len(arrays)}")
    machine = _RocmMachine(func, arrays, blocks, aligned, write_once)
    if check_races:
        machine.races = RaceTracker(EmulationError)
    machine.run(func.body, True)
    return arrays


__all__ = ["MFMA", "emulate"]
