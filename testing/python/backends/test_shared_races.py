"""The barrier-race check of the ROCm and Metal emulators (``tilelang.testing.shared_races``):
lockstep emulation hides a missing ``__syncthreads``; the tracker must not.

Each backend's gemm is run with ``check_races=True`` as lowered (no race: the answer
matches float64) and with every ``__syncthreads`` taken out (a race, reported)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import tvm_ffi
from tvm_tirx import ir

from tilelang.backends.metal import pipeline as metal_pipeline
from tilelang.backends.rocm import pipeline as rocm_pipeline
from tilelang.testing import metal_emulator, rocm_emulator
from tilelang.testing.cuda_emulator import EmulationError
from tilelang.testing.shared_races import RaceTracker

sys.path.insert(0, str(Path(__file__).resolve().parent / "rocm"))
from vendor_kernels import check_matmul, matmul  # noqa: E402

TARGETS = {
    "rocm": (rocm_pipeline, {"kind": "rocm", "arch": "gfx90a"}, rocm_emulator.emulate),
    "metal": (metal_pipeline, {"kind": "metal"}, metal_emulator.emulate),
}


def _without_barriers(func):
    """``func`` with every ``__syncthreads()`` replaced by a no-op."""

    def drop(node):
        v = node.value
        if isinstance(v, ir.Call) and getattr(v.op, "name", "") == "tirx.call_extern":
            if str(v.args[0].value) == "__syncthreads":
                return ir.Evaluate(ir.const(0, "int32"))
        return node

    return func.with_body(tvm_ffi.structural_map(func.body, [(ir.Evaluate, drop)]))


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("stages", [0, 2])
def test_gemm_barriers(target, stages, rng):
    pipeline, spec, emulate = TARGETS[target]
    m, n, k = 70, 72, 96
    lowered = pipeline.lower(matmul.get_tir(m, n, k, num_stages=stages), spec)

    def run(a, b, c):
        return emulate(lowered, a, b, c, check_races=True)[2]

    check_matmul(run, rng, m, n, k, False, False, "float16", "float32")
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    with pytest.raises(EmulationError, match="shared-memory race: thread"):
        emulate(_without_barriers(lowered), a, b, np.zeros((m, n), np.float32), check_races=True)
    # without the check, lockstep emulation still computes the product
    c = emulate(_without_barriers(lowered), a, b, np.zeros((m, n), np.float32))[2]
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), atol=1e-3)


def test_tracker_rules():
    data = np.zeros(16, np.float32)
    races = RaceTracker(EmulationError)
    races.allocate(data, "tile")
    races.write(data, np.array([0, 1]), np.array([0, 1]))
    races.read(data, np.array([0, 1]), np.array([0, 1]))  # each thread its own element
    with pytest.raises(EmulationError, match="thread 2 reads byte 4 of tile.*written by thread 1"):
        races.read(data, np.array([1]), np.array([2]))
    races.barrier()
    races.read(data, np.array([1, 1]), np.array([2, 3]))  # visible after the barrier
    with pytest.raises(EmulationError, match="thread 2 writes byte 4 .*read by several threads"):
        races.write(data, np.array([1]), np.array([2]))
    races.barrier()
    races.write(data, np.array([2]), np.array([5]))
    with pytest.raises(EmulationError, match="thread 6 writes byte 8 .*written by thread 5"):
        races.write(data, np.array([2]), np.array([6]))
    races.barrier()
    races.write(data, np.array([2]), np.array([6]))
    races.read(np.zeros(4, np.float32), np.array([0]), np.array([1]))  # untracked: ignored
