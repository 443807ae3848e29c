"""``T.atomic_addx2/x4(dst, value, return_prev=True)``: the group's previous values.

Upstream returns them as one vector value (``float32x2``...) and its tests store it with
``Prev[0:2] = T.atomic_addx2(Dst[0:2], Val[0:2], return_prev=True)``; here that form (and
``prev[k]`` for one lane) works. The group is one atomic where the hardware has one (CUDA
sm_90+ ``float2``/``float4`` ``atomicAdd`` on aligned global memory, ``half2``/``bfloat162``
pairs), lane by lane elsewhere (each lane atomic; documented in ``ops/atomic/prev.py``).
Checked against float64 numpy on the CPU, in the CUDA emulator (sm_80, sm_90a), with nvcc
and on the GPU. Many threads hit the same groups, so the old values are checked as one
serial order of the updates.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ROWS, THREADS = 3, 96  # 96 threads over 3 rows of groups: 32 updates per group


def addx_kernel(n, dtype="float32", cols=12, per="thread"):
    """Updater u (a thread, or with ``per="block"`` a block whose threads all run the
    thread-independent code: once per block) adds V[u, :] to group (u % ROWS) of D and keeps
    the old values in P[u]."""
    blocks, threads = (1, THREADS) if per == "thread" else (THREADS, 32)

    @T.prim_func
    def main(
        D: T.Tensor((ROWS, cols), dtype),
        V: T.Tensor((THREADS, cols), dtype),
        P: T.Tensor((THREADS, cols), dtype),
    ):
        with T.Kernel(blocks, threads=threads) as b:
            t = T.get_thread_binding()
            u = t if per == "thread" else b
            for g in T.serial(cols // n):
                if n == 2:
                    P[u, g * 2 : g * 2 + 2] = T.atomic_addx2(
                        D[u % ROWS, g * 2], V[u, g * 2], return_prev=True
                    )
                else:
                    prev = T.atomic_addx4(
                        D[u % ROWS, g * 4 : g * 4 + 4], V[u, g * 4 : g * 4 + 4], return_prev=True
                    )
                    for k in T.serial(4):
                        P[u, g * 4 + k] = prev[k]

    return main


def _check(d0, v, d, p, rtol):
    """Final sums, and per element: the old values are the partial sums of one order."""
    d64, v64 = d0.astype(np.float64), v.astype(np.float64)
    want = d64.copy()
    for t in range(THREADS):
        want[t % ROWS] += v64[t]
    np.testing.assert_allclose(d, want, rtol=rtol, atol=rtol * np.abs(want).max())
    for r in range(ROWS):
        ts = np.arange(r, THREADS, ROWS)
        for c in range(d.shape[1]):
            olds = p[ts, c].astype(np.float64)
            order = np.argsort(olds, kind="stable") if (v64[ts, c] > 0).all() else None
            if order is None:  # positive increments only give a sortable order
                continue
            partial = d64[r, c] + np.concatenate([[0], np.cumsum(v64[ts, c][order])[:-1]])
            np.testing.assert_allclose(olds[order], partial, rtol=rtol, atol=rtol * 64)


def _inputs(rng, dtype, cols=12):
    d0 = rng.uniform(-1, 1, (ROWS, cols)).astype(dtype)
    v = rng.uniform(0.25, 1, (THREADS, cols)).astype(dtype)  # positive: ordered partial sums
    return d0, v


@pytest.mark.parametrize("n", [2, 4])
def test_cpu(rng, n):
    d0, v = _inputs(rng, np.float32)
    d, p = torch.from_numpy(d0.copy()), torch.zeros(THREADS, 12)
    tilelang.compile(addx_kernel(n, per="block"), target="cpu")(d, torch.from_numpy(v), p)
    _check(d0, v, d.numpy(), p.numpy(), 1e-5)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "n,dtype", [(2, "float32"), (4, "float32"), (2, "float16"), (4, "float16")]
)
@pytest.mark.parametrize("per", ["thread", "block"])
def test_emulated(rng, target, n, dtype, per):
    np_dtype = np.float16 if dtype == "float16" else np.float32
    d0, v = _inputs(rng, np_dtype)
    low = pipeline.lower(addx_kernel(n, dtype, per=per), target)
    assert f"tl::AtomicAddx{n}Ret" in str(low)
    d, _, p = emulate(low, d0.copy(), v, np.zeros_like(v), race_check=True)
    _check(d0, v, d, p, 2e-2 if dtype == "float16" else 1e-5)


def test_tail_group_outside_the_tensor(rng):
    """A group reaching past its tensor: the lanes inside are updated, the others left
    alone with old value 0 (per-lane atomics, each guarded)."""

    @T.prim_func
    def main(D: T.Tensor((5,), "float32"), P: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            for g in T.serial(2):  # thread-independent: once per block
                P[g * 4 : g * 4 + 4] = T.atomic_addx4(
                    D[g * 4 : g * 4 + 4], D[0:4], return_prev=True
                )

    d0 = rng.uniform(1, 2, 5).astype(np.float32)
    for run in ("cpu", "emu"):
        if run == "cpu":
            d, p = torch.from_numpy(d0.copy()), torch.full((8,), 7.0)
            tilelang.compile(main, target="cpu")(d, p)
            d, p = d.numpy(), p.numpy()
        else:
            _, d, p = [
                None,
                *emulate(pipeline.lower(main, TARGETS[1]), d0.copy(), np.full(8, 7.0, np.float32)),
            ]
        first = d0.astype(np.float64)
        after = first.copy()
        after[0:4] += first[0:4]
        np.testing.assert_allclose(p[0:4], first[0:4], rtol=1e-6)
        np.testing.assert_allclose(p[4], after[4], rtol=1e-6)
        np.testing.assert_array_equal(p[5:8], 0)
        want = after.copy()
        want[4] += after[0]
        np.testing.assert_allclose(d, want, rtol=1e-6)


def test_bad_target_slice():
    from tilelang import errors

    with pytest.raises(errors.TraceError, match="must hold 2 consecutive"):

        @T.prim_func
        def main(D: T.Tensor((4,), "float32"), P: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                P[0:3] = T.atomic_addx2(D[0:2], D[2:4], return_prev=True)


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for n, dtype in [(2, "float32"), (4, "float32"), (2, "float16"), (4, "bfloat16")]:
        build = pipeline.build(addx_kernel(n, dtype), {**target, "compiler": "nvcc"})
        assert build.device_binary


@pytest.mark.cuda
@pytest.mark.parametrize(
    "n,dtype", [(2, "float32"), (4, "float32"), (2, "float16"), (4, "bfloat16")]
)
def test_gpu(rng, n, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    tdtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    d0, v = _inputs(rng, np.float32)
    d = torch.from_numpy(d0).to(tdtype).cuda()
    vt = torch.from_numpy(v).to(tdtype).cuda()
    p = torch.zeros(THREADS, 12, dtype=tdtype, device="cuda")
    start = d.clone()
    load_kernel(pipeline.build(addx_kernel(n, dtype), {"kind": "cuda"}))(d, vt, p)
    torch.cuda.synchronize()
    rtol = 1e-5 if dtype == "float32" else 5e-2
    _check(
        start.float().cpu().numpy(),
        vt.float().cpu().numpy(),
        d.float().cpu().numpy(),
        p.float().cpu().numpy(),
        rtol,
    )
