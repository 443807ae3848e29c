"""``T.reduce_*`` of a 1-d fragment with fewer elements than threads (CUDA, emulated).

A fragment of 100 elements on 128 threads puts element ``i`` on thread ``i``: the threads
sharing the row (0..99) are no xor group, and the reduce was a CompileError ("do not form
a xor group"). Threads 100..127 hold no element, so they now complete the group with the
reduction's identity. With a block size that is no multiple of the cross-warp group
(64 elements on 96 threads), the idle threads past the last group read the shared
workspace past its end (the emulator reported it); the workspace now covers them.
"""

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.layout import Fragment
from tilelang.ops.reduce.cuda import xor_group
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]


def vector_reduce(N, threads, kind, clear):
    fn = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}
    fn = fn[kind]

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), O: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((N,), "float32")
            r = T.alloc_fragment((1,), "float32")
            T.copy(X, f)
            T.fill(r, 0.25)
            fn(f, r, dim=0, clear=clear)
            T.copy(r, O[0:1])  # r's layout is the reduce's (a T.Parallel loop would fix it)

    return main


def _reference(x, kind, clear):
    x = x.astype(np.float64)
    val = {"sum": x.sum(), "max": x.max(), "min": x.min(), "absmax": np.abs(x).max()}[kind]
    if not clear:
        val = {"sum": val + 0.25, "max": max(val, 0.25), "min": min(val, 0.25)}.get(
            kind, max(val, 0.25)
        )
    return val


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "N,threads", [(100, 128), (60, 64), (31, 32), (3, 128), (40, 96), (70, 128), (64, 96)]
)
@pytest.mark.parametrize(
    "kind,clear", [("sum", True), ("max", True), ("min", False), ("absmax", False)]
)
def test_vector_reduce_with_idle_threads(target, N, threads, kind, clear):
    x = np.random.default_rng(N + threads).standard_normal(N).astype(np.float32)
    out = emulate(
        pipeline.lower(vector_reduce(N, threads, kind, clear), target), x, np.zeros(1, np.float32)
    )[1]
    want = _reference(x, kind, clear)
    np.testing.assert_allclose(out, [want], rtol=1e-5, atol=1e-5)


def test_idle_threads_complete_only_idle_slots():
    """A row completed with threads that hold other rows' elements is refused."""
    # rows of 3 threads (0,1,2), (3,4,5): completing (0,1,2) to 0..3 would take thread 3
    frag = Fragment((2, 3), forward_thread_fn=lambda i, j: i * 3 + j)
    assert xor_group(frag, 1) is None
    assert xor_group(frag, 1, idle_from=6, threads=8) is None
    # one row on threads 0..4 of 8: completed by the idle 5..7
    frag = Fragment((5,), forward_thread_fn=lambda i: i)
    assert xor_group(frag, 0, idle_from=5, threads=8) == [1, 2, 4]
    assert xor_group(frag, 0, idle_from=5, threads=6) is None  # 6, 7 do not exist
