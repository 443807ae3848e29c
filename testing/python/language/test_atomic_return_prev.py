"""``T.atomic_add/atomic_max/atomic_min(..., return_prev=True)``: the element's old value.

Was a TraceError ("not supported yet"). Checked on the CPU backend, in the CUDA emulator
(sm_80, sm_90a; lanes hitting one address are serialized there, each seeing the value the
ones before left), with nvcc, and on the GPU. Also: a thread-independent atomic under an
``if`` on the thread index runs in the threads the ``if`` picks (it was wrapped in
``if tx == 0`` as serial code is, and ``if tx == 5`` then never updated: a silent wrong
count).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def tickets(blocks, N, threads=128):
    """Every (block, i) draws a ticket from one counter: O[bx, i] = C[0]++."""

    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), O: T.Tensor((blocks, N), "int32")):
        with T.Kernel(blocks, threads=threads) as bx:
            for i in T.Parallel(N):
                O[bx, i] = T.atomic_add(C[0], 1, return_prev=True)

    return main


def exchange(N, kind, dtype="float32"):
    """Distinct addresses: O[i] = old M[i]; M[i] = op(M[i], A[i])."""
    fn = {"add": T.atomic_add, "max": T.atomic_max, "min": T.atomic_min}[kind]

    @T.prim_func
    def main(M: T.Tensor((N,), dtype), A: T.Tensor((N,), dtype), O: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    O[bx * 64 + i] = fn(M[bx * 64 + i], A[bx * 64 + i], return_prev=True)

    return main


def block_steps(blocks, steps, threads=64):
    """Serial code: each block adds bx + 1 to C[0] ``steps`` times (once per block per
    step) and every thread records the old value."""

    @T.prim_func
    def main(C: T.Tensor((1,), "float32"), O: T.Tensor((blocks, steps, threads), "float32")):
        with T.Kernel(blocks, threads=threads) as bx:
            for s in T.serial(steps):
                old = T.atomic_add(C[0], T.float32(bx + 1), return_prev=True)
                for i in T.Parallel(threads):
                    O[bx, s, i] = old

    return main


def warp_leaders(blocks, threads=128):
    """Lane 0 of each warp draws a ticket (an ``if`` on the thread index)."""

    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), O: T.Tensor((blocks, threads // 32), "int32")):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            if tx % 32 == 0:
                O[bx, tx // 32] = T.atomic_add(C[0], 1, return_prev=True)

    return main


def _run(func, target, *arrays, race_check=False):
    if target == "cpu":
        tensors = [torch.from_numpy(a) for a in arrays]
        tilelang.compile(func, target="cpu")(*tensors)
        return [t.numpy() for t in tensors]
    return emulate(pipeline.lower(func, target), *arrays, race_check=race_check)


RUNS = ["cpu", *TARGETS]
IDS = ["cpu", "sm_80", "sm_90a"]


@pytest.mark.parametrize("target", RUNS, ids=IDS)
@pytest.mark.parametrize("blocks,N", [(3, 100), (2, 130), (1, 7)])
def test_tickets_are_a_permutation(rng, target, blocks, N):
    start = int(rng.integers(-50, 50))
    c, o = _run(
        tickets(blocks, N), target, np.array([start], np.int32), np.zeros((blocks, N), np.int32)
    )
    assert c[0] == start + blocks * N
    np.testing.assert_array_equal(np.sort(o.ravel()), start + np.arange(blocks * N))


@pytest.mark.parametrize("target", RUNS, ids=IDS)
@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_distinct_addresses_return_the_old_value(rng, target, kind):
    N = 150
    m = rng.standard_normal(N).astype(np.float32)
    a = rng.standard_normal(N).astype(np.float32)
    got_m, _, got_o = _run(exchange(N, kind), target, m.copy(), a, np.zeros(N, np.float32))
    np.testing.assert_array_equal(got_o, m)
    m64, a64 = m.astype(np.float64), a.astype(np.float64)
    want = {"add": m64 + a64, "max": np.maximum(m64, a64), "min": np.minimum(m64, a64)}[kind]
    np.testing.assert_allclose(got_m, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", RUNS, ids=IDS)
def test_int_max_min_return_prev(rng, target):
    N = 70
    for kind, op in (("max", np.maximum), ("min", np.minimum)):
        m = rng.integers(-100, 100, N).astype(np.int32)
        a = rng.integers(-100, 100, N).astype(np.int32)
        got_m, _, got_o = _run(
            exchange(N, kind, "int32"), target, m.copy(), a, np.zeros(N, np.int32)
        )
        np.testing.assert_array_equal(got_o, m)
        np.testing.assert_array_equal(got_m, op(m, a))


@pytest.mark.parametrize("target", RUNS, ids=IDS)
def test_serial_code_updates_once_per_block_and_every_thread_sees_it(rng, target):
    blocks, steps, threads = 3, 4, 64
    start = float(rng.integers(0, 10))
    c, o = _run(
        block_steps(blocks, steps, threads),
        target,
        np.array([start], np.float32),
        np.zeros((blocks, steps, threads), np.float32),
        race_check=True,
    )
    assert c[0] == start + steps * sum(b + 1 for b in range(blocks))
    assert np.all(o == o[:, :, :1])  # one value per block and step, seen by every thread
    olds = o[:, :, 0]
    for b in range(blocks):  # each step's old value is at least bx + 1 above the last one
        assert np.all(np.diff(olds[b]) >= b + 1)
    # the old values are exactly the partial sums of one serial order of the updates
    incs = np.concatenate([[b + 1] * steps for b in range(blocks)])
    order = np.argsort(olds.ravel(), kind="stable")
    np.testing.assert_array_equal(
        olds.ravel()[order], start + np.concatenate([[0], np.cumsum(incs[order])[:-1]])
    )


@pytest.mark.parametrize("target", RUNS, ids=IDS)
def test_thread_guarded_tickets(target):
    """Under an ``if`` on the thread index (not a contiguous range: lane 0 of each warp) the
    atomic is per-thread code; the CPU backend used to refuse it."""
    blocks = 3
    c, o = _run(
        warp_leaders(blocks), target, np.zeros(1, np.int32), np.zeros((blocks, 4), np.int32)
    )
    assert c[0] == blocks * 4
    np.testing.assert_array_equal(np.sort(o.ravel()), np.arange(blocks * 4))


@pytest.mark.parametrize("target", TARGETS, ids=IDS[1:])
def test_thread_guarded_atomic_without_return_prev_runs(target):
    """``if tx == 5: T.atomic_add(C[0], 1)``: thread 5 adds, once per block (was never)."""

    @T.prim_func
    def main(C: T.Tensor((1,), "int32")):
        with T.Kernel(3, threads=128):
            tx = T.get_thread_binding()
            if tx == 5:
                T.atomic_add(C[0], 1)
            T.atomic_add(C[0], 10)  # serial code: once per block

    c = emulate(pipeline.lower(main, target), np.zeros(1, np.int32))[0]
    assert c[0] == 3 * 11


def test_memory_order_fences():
    @T.prim_func
    def main(C: T.Tensor((1,), "int32"), O: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                O[i] = T.atomic_add(C[0], 1, memory_order="acq_rel", return_prev=True)

    text = pipeline.lower(main, TARGETS[0]).script()
    assert text.count("__threadfence") == 2


def test_return_prev_errors():
    with pytest.raises(errors.TileLangError, match=r"return_prev=True\) needs one element"):

        @T.prim_func
        def tile(C: T.Tensor((4,), "float32"), A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_add(C, A, return_prev=True)

    with pytest.raises(errors.TileLangError, match=r"memory_order must be one of"):

        @T.prim_func
        def order(C: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_max(C[0], 1.0, memory_order="strong", return_prev=True)

    with pytest.raises(errors.CompileError, match=r"thread-local"):

        @T.prim_func
        def local(O: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                cell = T.alloc_local((1,), "float32")
                O[0] = T.atomic_add(cell[0], 1.0, return_prev=True)

        pipeline.lower(local, TARGETS[0])


def test_return_prev_in_a_replicated_loop_is_an_error():
    """A loop writing a replicated fragment runs each iteration on several threads; only
    one applies the atomic, so the others would get no old value: refused."""

    @T.prim_func
    def main(C: T.Tensor((16,), "int32"), O: T.Tensor((16, 8), "int32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((16, 8), "int32")
            r = T.alloc_fragment((16,), "int32")
            T.copy(O, f)
            T.reduce_sum(f, r, dim=1)
            for i in T.Parallel(16):
                r[i] = T.atomic_add(C[i], r[i], return_prev=True)  # the refused line
            for i, j in T.Parallel(16, 8):
                f[i, j] = r[i]
            T.copy(f, O)

    with pytest.raises(errors.CompileError, match=r"replicated") as info:
        pipeline.lower(main, TARGETS[0])
    assert "test_atomic_return_prev.py:" in str(info.value)


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=IDS[1:])
def test_nvcc_compiles(target):
    for func in (tickets(2, 100), exchange(100, "max"), exchange(50, "min", "int32"),
                 block_steps(2, 3), warp_leaders(2)):  # fmt: skip
        assert pipeline.build(func, {**target, "compiler": "nvcc"}).device_binary


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
def test_tickets_gpu():
    load = _gpu()
    blocks, N = 7, 300
    c = torch.full((1,), 5, dtype=torch.int32, device="cuda")
    o = torch.zeros(blocks, N, dtype=torch.int32, device="cuda")
    load(tickets(blocks, N))(c, o)
    torch.cuda.synchronize()
    assert int(c[0]) == 5 + blocks * N
    assert torch.equal(
        o.flatten().sort().values.cpu(), 5 + torch.arange(blocks * N, dtype=torch.int32)
    )


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_distinct_addresses_gpu(kind):
    load = _gpu()
    N = 1000
    m, a = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    m0 = m.clone()
    o = torch.zeros(N, device="cuda")
    load(exchange(N, kind))(m, a, o)
    torch.cuda.synchronize()
    assert torch.equal(o, m0)
    want = {"add": m0.double() + a.double(), "max": torch.maximum(m0, a).double(),
            "min": torch.minimum(m0, a).double()}[kind]  # fmt: skip
    torch.testing.assert_close(m.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
def test_serial_and_guarded_gpu():
    load = _gpu()
    blocks, steps, threads = 5, 4, 64
    c = torch.zeros(1, device="cuda")
    o = torch.zeros(blocks, steps, threads, device="cuda")
    load(block_steps(blocks, steps, threads))(c, o)
    torch.cuda.synchronize()
    assert float(c[0]) == steps * sum(b + 1 for b in range(blocks))
    assert torch.all(o == o[:, :, :1])
    ci = torch.zeros(1, dtype=torch.int32, device="cuda")
    oi = torch.zeros(blocks, 4, dtype=torch.int32, device="cuda")
    load(warp_leaders(blocks))(ci, oi)
    torch.cuda.synchronize()
    assert torch.equal(
        oi.flatten().sort().values.cpu(), torch.arange(blocks * 4, dtype=torch.int32)
    )
