"""Upstream's v1 reducer: ``T.alloc_reducer(..., replication="all" | "none")``.

Filled by the user (``T.clear`` / ``T.fill`` with the identity), updated in ``T.Parallel``
loops as ``acc[i] += v`` / ``acc[i] = T.max(acc[i], v)`` / ``T.min``, finalized in place
with ``T.finalize_reducer(acc)`` and read afterwards. Was a TraceError. Checked against
float64 numpy on the CPU backend, in the CUDA emulator (sm_80, sm_90a, race check), with
nvcc and on the GPU.
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


def row_reduce(M, N, bM, op, replication, threads=128):
    """Blocks of bM rows: O[r] = reduce_op(A[r, :]) / sqrt(sum of the block's squares);
    S[bx] = that sum (a scalar reducer read in serial code)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        O: T.Tensor((M,), "float32"),
        S: T.Tensor((T.ceildiv(M, bM),), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            a = T.alloc_fragment((bM, N), "float32")
            T.copy(A[bx * bM, 0], a)
            acc = T.alloc_reducer((bM,), "float32", op=op, replication=replication)
            tot = T.alloc_reducer((1,), "float32", op="sum", replication=replication)
            if op == "sum":
                T.clear(acc)
            elif op == "max":
                T.fill(acc, -T.infinity("float32"))
            else:
                T.fill(acc, T.infinity("float32"))
            T.clear(tot)
            for i, j in T.Parallel(bM, N):
                if bx * bM + i < M:
                    if op == "sum":
                        acc[i] += a[i, j]
                    elif op == "max":
                        acc[i] = T.max(acc[i], a[i, j])
                    else:
                        acc[i] = T.min(a[i, j], acc[i])
                    tot[0] += a[i, j] * a[i, j]
            T.finalize_reducer(acc)
            T.finalize_reducer(tot)
            for i in T.Parallel(bM):
                O[bx * bM + i] = acc[i] / T.sqrt(tot[0])
            S[bx] = tot[0]

    return main


def reference(a, bM, op):
    a = a.astype(np.float64)
    M = a.shape[0]
    blocks = -(-M // bM)
    red = {"sum": a.sum(1), "max": a.max(1), "min": a.min(1)}[op]
    sums = np.array([(a[b * bM : (b + 1) * bM] ** 2).sum() for b in range(blocks)])
    return red / np.sqrt(sums[np.arange(M) // bM]), sums


CASES = [(45, 70, 16, "sum", "all"), (45, 70, 16, "max", "none"), (30, 33, 32, "min", "all")]


def _inputs(rng, M, N, bM):
    a = rng.standard_normal((M, N)).astype(np.float32)
    return a, np.zeros(M, np.float32), np.zeros(-(-M // bM), np.float32)


@pytest.mark.parametrize("M,N,bM,op,rep", CASES)
def test_v1_reducer_cpu(rng, M, N, bM, op, rep):
    a, o, s = (torch.from_numpy(x) for x in _inputs(rng, M, N, bM))
    tilelang.compile(row_reduce(M, N, bM, op, rep), target="cpu")(a, o, s)
    want_o, want_s = reference(a.numpy(), bM, op)
    np.testing.assert_allclose(o.numpy(), want_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,bM,op,rep", CASES)
def test_v1_reducer_emulated(rng, target, M, N, bM, op, rep):
    a, o, s = _inputs(rng, M, N, bM)
    lowered = pipeline.lower(row_reduce(M, N, bM, op, rep), target)
    _, o, s = emulate(lowered, a, o, s, race_check=True)
    want_o, want_s = reference(a, bM, op)
    np.testing.assert_allclose(o, want_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, want_s, rtol=1e-5)


def test_v1_reducer_with_dst_emulated(rng):
    """``T.finalize_reducer(acc, dst)`` on a v1 reducer copies the result into ``dst``."""
    M, N = 24, 50

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            acc = T.alloc_reducer((M,), "float32", op="sum", replication="all")
            out = T.alloc_fragment((M,), "float32")
            T.clear(acc)
            for i, j in T.Parallel(M, N):
                acc[i] += A[i, j] * 2.0
            T.finalize_reducer(acc, out)
            T.copy(out, O)

    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(pipeline.lower(main, TARGETS[1]), a, np.zeros(M, np.float32), race_check=True)
    np.testing.assert_allclose(got[1], 2 * a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_v1_reducer_errors():
    with pytest.raises(errors.TileLangError, match="replication must be 'all' or 'none'"):

        @T.prim_func
        def bad_replication(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer((4,), "float32", op="sum", replication="some")

    with pytest.raises(errors.TileLangError, match=r"op 'bitor' is not supported"):

        @T.prim_func
        def bitwise(A: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer((4,), "int32", op="bitor", replication="all")

    with pytest.raises(errors.TileLangError, match=r"a max reducer is updated as"):

        @T.prim_func
        def wrong_update(A: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=32):
                acc = T.alloc_reducer((4,), "float32", op="max", replication="all")
                T.clear(acc)
                for i, j in T.Parallel(4, 8):
                    acc[i] += A[i, j]
                T.finalize_reducer(acc)

    with pytest.raises(errors.TileLangError, match=r"must be\s+an update of the same element"):

        @T.prim_func
        def other_element(A: T.Tensor((4, 8), "float32")):
            with T.Kernel(1, threads=32):
                acc = T.alloc_reducer((4,), "float32", op="sum", replication="all")
                T.clear(acc)
                for i, j in T.Parallel(4, 8):
                    acc[i] = acc[3 - i] + A[i, j]
                T.finalize_reducer(acc)


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_nvcc_compiles(target):
    for case in CASES:
        assert pipeline.build(row_reduce(*case), {**target, "compiler": "nvcc"}).device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,bM,op,rep", CASES)
def test_v1_reducer_gpu(M, N, bM, op, rep):
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    a = torch.randn(M, N)
    o = torch.zeros(M, device="cuda")
    s = torch.zeros(-(-M // bM), device="cuda")
    load_kernel(pipeline.build(row_reduce(M, N, bM, op, rep), {"kind": "cuda"}))(a.cuda(), o, s)
    torch.cuda.synchronize()
    want_o, want_s = reference(a.numpy(), bM, op)
    np.testing.assert_allclose(o.cpu().numpy(), want_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.cpu().numpy(), want_s, rtol=1e-5)
