"""``return_prev=True`` atomics on ROCm and Metal (was "not supported on the rocm/metal
target"): HIP's ``atomicAdd/Max/Min`` and MSL's ``atomic_fetch_add/max/min_explicit``
return the old value (``tl_hip.h`` / ``tl_metal.h``), so the CUDA rule applies
(``ops/atomic/prev.py``); ``T.atomic_addx2/x4`` groups go lane by lane there. Checked against
float64 numpy in the ROCm and Metal emulators (per thread, and once per block for
thread-independent code), compiled by hipcc (ROCm) and parsed as C++ with the MSL shim
(Metal) where those tools exist; an ordered ``memory_order`` on Metal is a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilelang.language as T
from tilelang import errors
from tilelang.backends.metal import codegen as metal_codegen
from tilelang.backends.metal import pipeline as metal
from tilelang.backends.rocm import build as rocm_build
from tilelang.backends.rocm import pipeline as rocm
from tilelang.testing.metal_emulator import emulate as emulate_metal
from tilelang.testing.rocm_emulator import emulate as emulate_rocm

ROCM, METAL = {"kind": "rocm", "arch": "gfx90a"}, {"kind": "metal"}
THREADS, CELLS = 64, 5
BACKENDS = [(rocm, ROCM, emulate_rocm), (metal, METAL, emulate_metal)]
IDS = ["rocm", "metal"]


def tickets(kind, dtype):
    """Each thread updates cell t % CELLS with t + 1 and keeps the old value."""
    fn = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[kind]

    @T.prim_func
    def main(C: T.Tensor((CELLS,), dtype), O: T.Tensor((THREADS,), dtype)):
        with T.Kernel(1, threads=THREADS):
            t = T.get_thread_binding()
            O[t] = fn(C[t % CELLS], T.cast(t + 1, dtype), return_prev=True)

    return main


def block_counter(blocks):
    """Thread-independent: once per block (every thread reads the block's old value)."""

    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), O: T.Tensor((blocks, THREADS), "int32")):
        with T.Kernel(blocks, threads=THREADS) as b:
            t = T.get_thread_binding()
            old = T.atomic_add(C[0], b + 1, return_prev=True)
            O[b, t] = old

    return main


def pairs():
    @T.prim_func
    def main(
        D: T.Tensor((2, 4), "float32"),
        V: T.Tensor((THREADS, 4), "float32"),
        P: T.Tensor((THREADS, 4), "float32"),
    ):
        with T.Kernel(1, threads=THREADS):
            t = T.get_thread_binding()
            P[t, 0:4] = T.atomic_addx4(D[t % 2, 0:4], V[t, 0:4], return_prev=True)

    return main


def _check_serial(kind, start, values, old, final):
    """The old values are those of one serial order of the updates of each cell."""
    op = {"add": np.add, "max": np.maximum, "min": np.minimum}[kind]
    for c in range(CELLS):
        ts = np.arange(c, THREADS, CELLS)
        acc = start[c]
        seen = []
        for t in sorted(ts, key=lambda t: old[t]) if kind == "add" else ts:
            seen.append(old[t])
            acc = op(acc, values[t])
        np.testing.assert_allclose(final[c], acc, rtol=1e-6)
        if kind == "add":  # positive increments: sorted old values are the partial sums
            order = sorted(ts, key=lambda t: old[t])
            sums = start[c] + np.concatenate([[0], np.cumsum(values[order])[:-1]])
            np.testing.assert_allclose(np.sort(old[ts]), sums, rtol=1e-6)
        else:  # each old value is the start or some earlier value
            allowed = set(np.append(values[ts], start[c]).tolist())
            assert set(old[ts].tolist()) <= allowed


@pytest.mark.parametrize("backend,target,emulate", BACKENDS, ids=IDS)
@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_tickets_emulated(rng, backend, target, emulate, kind):
    dtype = "int32" if kind != "add" else "float32"
    start = rng.integers(-20, 20, CELLS).astype(np.float64)
    c0 = start.astype(np.int32 if dtype == "int32" else np.float32)
    c, o = emulate(
        backend.lower(tickets(kind, dtype), target), c0.copy(), np.zeros(THREADS, c0.dtype)
    )
    values = np.arange(1, THREADS + 1, dtype=np.float64)
    _check_serial(kind, start, values, o.astype(np.float64), c.astype(np.float64))


@pytest.mark.parametrize("backend,target,emulate", BACKENDS, ids=IDS)
def test_once_per_block_emulated(backend, target, emulate):
    blocks = 3
    c, o = emulate(
        backend.lower(block_counter(blocks), target),
        np.array([10], np.int32),
        np.zeros((blocks, THREADS), np.int32),
        check_races=True,
    )
    assert c[0] == 10 + sum(b + 1 for b in range(blocks))
    assert np.all(o == o[:, :1])  # one old value per block, seen by every thread
    olds = sorted(o[:, 0].tolist())
    assert olds[0] == 10 and len(set(olds)) == blocks


@pytest.mark.parametrize("backend,target,emulate", BACKENDS, ids=IDS)
def test_addx4_lanes_emulated(rng, backend, target, emulate):
    d0 = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
    v = rng.uniform(0.5, 1, (THREADS, 4)).astype(np.float32)
    low = backend.lower(pairs(), target)
    assert "AtomicAddx4Ret" not in str(low)  # lane by lane on HIP/MSL
    d, _, p = emulate(low, d0.copy(), v, np.zeros((THREADS, 4), np.float32))
    for r in range(2):  # per element: the old values are the partial sums of one order
        ts = np.arange(r, THREADS, 2)
        for k in range(4):
            order = ts[np.argsort(p[ts, k], kind="stable")]
            sums = d0[r, k] + np.concatenate([[0], np.cumsum(v[order, k].astype(np.float64))[:-1]])
            np.testing.assert_allclose(p[order, k], sums, rtol=1e-5, atol=1e-5)
        want = d0[r].astype(np.float64) + v[ts].astype(np.float64).sum(0)
        np.testing.assert_allclose(d[r], want, rtol=1e-5)


def test_metal_ordered_memory_order_is_an_error():
    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), O: T.Tensor((THREADS,), "int32")):
        with T.Kernel(1, threads=THREADS):
            t = T.get_thread_binding()
            O[t] = T.atomic_add(C[0], 1, memory_order="acq_rel", return_prev=True)

    with pytest.raises(errors.CompileError, match="test_vendor_return_prev.py:.*metal"):
        metal.lower(main, METAL)
    assert "__threadfence" in str(rocm.lower(main, ROCM))


@pytest.mark.skipif(rocm_build.find_toolchain() is None, reason="no HIP toolchain")
def test_hipcc_compiles():
    for func in (tickets("add", "float32"), tickets("max", "int32"), block_counter(2), pairs()):
        assert rocm.build(func, ROCM).code_object[:4] == b"\x7fELF"


def _has_clang():
    import shutil
    from pathlib import Path

    return shutil.which("clang++") is not None or bool(list(Path("/usr/bin").glob("clang++-*")))


@pytest.mark.skipif(not _has_clang(), reason="no clang for the MSL syntax check")
def test_msl_parses():
    for func in (tickets("add", "float32"), tickets("min", "int32"), block_counter(2), pairs()):
        source = metal.build(func, METAL).kernel_source
        assert "tl::Atomic" in source
        metal_codegen.syntax_check(source)
