"""The CUDA emulator's shared-memory race checker (``tilelang.testing.cuda_emulator_race``).

Two gaps compute-sanitizer racecheck on the H200 exposed (session 10): two warps writing one
byte with no barrier between (write after write) went unreported, and a named barrier of
part of the block (``bar.sync id, n`` under an ``if`` on the thread index, the consumers'
barrier of a warp-specialized kernel) ordered every warp's accesses, also those of warps
that never reached it.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate
from tilelang.testing.cuda_emulator_race import RaceChecker, SharedRaceError


class _Buf:
    def __init__(self, n):
        self.data = np.zeros(n, np.float32)
        self.name = "s"


def _touch(rc, buf, kind, thread, element=0):
    rc.access(buf, [4 * element], 4, [thread], kind, "test")


def _checker():
    rc = RaceChecker()
    rc.new_block({"blockIdx.x": 0})
    return rc


def test_write_after_write_between_warps():
    buf, rc = _Buf(8), _checker()
    _touch(rc, buf, "write", 0)
    _touch(rc, buf, "write", 1)  # the same warp: its lanes run together
    with pytest.raises(SharedRaceError, match="write after write.*warp 1"):
        _touch(rc, buf, "write", 40)
    rc = _checker()
    _touch(rc, buf, "write", 0)
    rc.barrier()
    _touch(rc, buf, "write", 40)


def test_partial_barrier_orders_its_warps_only():
    buf, rc = _Buf(8), _checker()
    _touch(rc, buf, "write", 64)  # warp 2
    rc.barrier(threads=np.arange(64, 128), block_threads=256)  # warps 2, 3
    _touch(rc, buf, "read", 96)  # warp 3: ordered
    _touch(rc, buf, "write", 0, element=1)  # warp 0
    rc.barrier(threads=np.arange(64, 128), block_threads=256)  # warp 0 is not in it
    with pytest.raises(SharedRaceError, match="read after write"):
        _touch(rc, buf, "read", 96, element=1)


def test_readers_are_tracked_per_warp():
    buf, rc = _Buf(8), _checker()
    _touch(rc, buf, "read", 0)  # warp 0
    _touch(rc, buf, "read", 32)  # warp 1
    rc.barrier(threads=np.arange(0, 64), block_threads=256)  # both readers
    _touch(rc, buf, "write", 0)
    rc = _checker()
    _touch(rc, buf, "read", 0)
    _touch(rc, buf, "read", 200)  # warp 6, outside the barrier below
    rc.barrier(threads=np.arange(0, 64), block_threads=256)
    with pytest.raises(SharedRaceError, match="write after read.*warp 6"):
        _touch(rc, buf, "write", 0)


def test_both_arms_writing_one_tile_is_a_race():
    """The arms of an ``if``/``else`` on the thread index run at once (different warps)."""
    N = 52

    @T.prim_func
    def main(B: T.Tensor((N,), "float32"), D: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            r = T.alloc_shared((N,), "float32")
            if tx < 96:
                T.fill(r, 1.0)
            else:
                T.copy(B, r)
            T.copy(r, D)

    b = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    low = pipeline.lower(main, {"kind": "cuda", "arch": "sm_90a"})
    with pytest.raises(Exception, match=r"race \(write after write\) on r"):
        emulate(low, b, np.zeros_like(b), race_check=True)
