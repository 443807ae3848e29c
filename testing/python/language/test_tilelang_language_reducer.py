"""T.alloc_reducer / T.reducer_init / T.reducer_update / T.finalize_reducer: upstream's
reducer epoch. CPU against numpy float64 with non-tile-multiple shapes (row reductions over
k tiles, a scalar reduction fed by two loops, an init value); CUDA: nvcc builds for sm_80
and sm_90a; GPU runs are marked cuda."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
_NP = {"sum": np.sum, "max": np.max, "min": np.min}


def rows_kernel(M, K, op, bK=16, init=None):
    """B[i] = init (+) op over A[i, :], reducing k tiles of bK columns (K padded with the
    identity by a guard)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            acc = T.alloc_reducer((M,), "float32", op=op)
            if init is None:
                T.reducer_init(acc)
            else:
                T.reducer_init(acc, init)
            a_frag = T.alloc_fragment((M, bK), "float32")
            for kt in T.serial(T.ceildiv(K, bK)):
                T.copy(A[0, kt * bK], a_frag)
                for i, k in T.Parallel(M, bK):
                    if kt * bK + k < K:
                        T.reducer_update(acc[i], a_frag[i, k])
            result = T.alloc_fragment((M,), "float32")
            T.finalize_reducer(acc, result)
            T.copy(result, B)

    return main


def two_loops_kernel(n, dtype):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), C: T.Tensor((2 * n,), dtype), Out: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=32):
            acc = T.alloc_reducer((1,), dtype, op="sum")
            T.reducer_init(acc)
            for i in T.Parallel(n):
                T.reducer_update(acc[0], A[i])
            for j in T.Parallel(2 * n):
                T.reducer_update(acc[0], C[j])
            result = T.alloc_fragment((1,), dtype)
            T.finalize_reducer(acc, result)
            if T.get_thread_binding() == 0:
                Out[0] = result[0]

    return main


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("M,K", [(13, 37), (24, 50)])
def test_row_reduction(op, M, K, rng):
    a = rng.standard_normal((M, K))
    B = torch.zeros(M)
    tilelang.compile(rows_kernel(M, K, op), target="cpu")(torch.from_numpy(a).float(), B)
    ref = _NP[op](a.astype(np.float32).astype(np.float64), axis=1)
    np.testing.assert_allclose(B.double().numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,init", [("sum", 2.5), ("max", 10.0), ("min", 0.25)])
def test_init_value_counted_once(op, init, rng):
    M, K = 11, 29
    a = rng.standard_normal((M, K))
    B = torch.zeros(M)
    tilelang.compile(rows_kernel(M, K, op, init=init), target="cpu")(torch.from_numpy(a).float(), B)
    rows = _NP[op](a.astype(np.float32).astype(np.float64), axis=1)
    ref = {"sum": rows + init, "max": np.maximum(rows, init), "min": np.minimum(rows, init)}[op]
    np.testing.assert_allclose(B.double().numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_two_update_loops(dtype, rng):
    n = 45
    if dtype == "int32":
        a, c = rng.integers(-50, 50, n), rng.integers(-50, 50, 2 * n)
    else:
        a, c = rng.standard_normal(n), rng.standard_normal(2 * n)
    tdt = getattr(torch, dtype)
    out = torch.zeros(1, dtype=tdt)
    tilelang.compile(two_loops_kernel(n, dtype), target="cpu")(
        torch.from_numpy(a).to(tdt), torch.from_numpy(c).to(tdt), out
    )
    np.testing.assert_allclose(out.double().numpy()[0], a.sum() + c.sum(), rtol=1e-5, atol=1e-4)


def test_errors():
    def bitwise_float():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer((8,), "float32", op="bitor")

        return main

    def update_load():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                acc = T.alloc_reducer((8,), "float32")
                T.reducer_init(acc)
                T.reducer_update(acc, A[0])

        return main

    def no_dst():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                acc = T.alloc_reducer((8,), "float32")
                T.reducer_init(acc)
                T.finalize_reducer(acc)

        return main

    def not_reducer():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                T.reducer_init(A)

        return main

    for make, words in [
        (bitwise_float, "requires an integer dtype"),
        (update_load, "expects acc\\[indices\\]"),
        (no_dst, "pass a destination fragment"),
        (not_reducer, "expected a reducer"),
    ]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for op in ("sum", "max", "min"):
        art = cuda_pipeline.build(rows_kernel(13, 37, op, init=1.0), target, compiler="nvcc")
        assert art.device_binary
    assert cuda_pipeline.build(two_loops_kernel(45, "int32"), target, compiler="nvcc").device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_row_reduction_gpu(op, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, K = 13, 37
    a = rng.standard_normal((M, K))
    B = torch.zeros(M, device="cuda")
    tilelang.compile(rows_kernel(M, K, op), target="cuda")(torch.from_numpy(a).float().cuda(), B)
    ref = _NP[op](a.astype(np.float32).astype(np.float64), axis=1)
    np.testing.assert_allclose(B.cpu().double().numpy(), ref, rtol=1e-5, atol=1e-5)
