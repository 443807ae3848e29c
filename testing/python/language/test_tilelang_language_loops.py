"""Loops on the CPU target: T.Parallel, T.Pipelined, T.serial, T.unroll, T.vectorized, range,
and Python loops over lists (unrolled while tracing)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=-1, target="cpu")
def add_1d(N, block):
    """1-D T.Parallel with a tail: accesses past N are skipped/zero."""

    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")
    ):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


@pytest.mark.parametrize("N", [256, 1000, 3])
def test_parallel_1d(randn, N):
    a, b = randn(N), randn(N)
    torch.testing.assert_close(add_1d(N, 128)(a, b).double(), a.double() + b.double())


@tilelang.jit(out_idx=-1, target="cpu")
def axpby_2d(M, N, bM, bN):
    """2-D T.Parallel over a tile, on fragments loaded with T.copy."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((M, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            Af = T.alloc_fragment((bM, bN), "float32")
            Bf = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], Af)
            T.copy(B[by * bM, bx * bN], Bf)
            for i, j in T.Parallel(bM, bN):
                Af[i, j] = 2.0 * Af[i, j] - Bf[i, j] * (i + j)
            T.copy(Af, C[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("M,N", [(64, 64), (37, 53)])
def test_parallel_2d(randn, M, N):
    a, b = randn(M, N), randn(M, N)
    bM = bN = 16
    i = torch.arange(M).remainder(bM)[:, None]
    j = torch.arange(N).remainder(bN)[None, :]
    ref = 2 * a.double() - b.double() * (i + j)
    torch.testing.assert_close(axpby_2d(M, N, bM, bN)(a, b).double(), ref, rtol=1e-6, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def chunked_row_sum(M, K, bK, stages):
    """Row sums accumulated over K chunks in a T.Pipelined loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), Out: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, bK), "float32")
            part = T.alloc_fragment((M,), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[0, k * bK], S)
                T.reduce_sum(S, part, dim=1)
                for i in T.Parallel(M):
                    acc[i] += part[i]
            T.copy(acc, Out)

    return main


@pytest.mark.parametrize("stages", [0, 1, 2, 3])
def test_pipelined(randn, stages):
    a = randn(8, 70)
    out = chunked_row_sum(8, 70, 16, stages)(a)
    torch.testing.assert_close(out.double(), a.double().sum(1), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def loop_kinds(N):
    """Each loop constructor writes its own slice of the output."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((6, N), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(N):
                Out[0, i] = A[i] + 1.0
            for i in T.unroll(N):
                Out[1, i] = A[i] * 2.0
            for i in T.vectorized(N):
                Out[2, i] = A[i] - 3.0
            for i in range(N):
                Out[3, i] = A[N - 1 - i]
            for i in T.serial(0, N, 2):  # stepped
                Out[4, i] = 1.0
                Out[4, i + 1] = 0.0
            for i in range(2, N):
                Out[5, i] = A[i - 1] + A[i - 2]
            Out[5, 0] = 0.0
            Out[5, 1] = 0.0

    return main


def test_loop_kinds(randn):
    N = 16
    a = randn(N)
    out = loop_kinds(N)(a).double()
    a = a.double()
    torch.testing.assert_close(out[0], a + 1)
    torch.testing.assert_close(out[1], a * 2)
    torch.testing.assert_close(out[2], a - 3)
    torch.testing.assert_close(out[3], a.flip(0))
    torch.testing.assert_close(out[4], torch.tensor([1.0, 0.0] * (N // 2), dtype=torch.float64))
    ref5 = torch.zeros(N, dtype=torch.float64)
    ref5[2:] = a[1:-1] + a[:-2]
    torch.testing.assert_close(out[5], ref5, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def nested_serial_matvec(M, N):
    """Nested T.serial loops with a run-time bound from the grid; range with two bounds."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"), x: T.Tensor((N,), "float32"), y: T.Tensor((M,), "float32")
    ):
        with T.Kernel(M, threads=1) as row:
            acc = T.alloc_var("float32")
            acc = 0.0
            for j in T.serial(N):
                acc += A[row, j] * x[j]
            y[row] = acc

    return main


def test_serial_matvec(randn):
    a, x = randn(9, 13), randn(13)
    torch.testing.assert_close(
        nested_serial_matvec(9, 13)(a, x).double(), a.double() @ x.double(), rtol=1e-5, atol=1e-5
    )


@tilelang.jit(out_idx=-1, target="cpu")
def python_list_loop(N, weights):
    """A Python loop over a list of weights: unrolled into one term per weight."""

    @T.prim_func
    def main(A: T.Tensor((len(weights), N), "float32"), Out: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((N,), "float32")
            T.clear(acc)
            for k, w in enumerate(weights):
                for i in T.Parallel(N):
                    acc[i] += A[k, i] * w
            T.copy(acc, Out)

    return main


@pytest.mark.parametrize("weights", [(1.0,), (0.5, -2.0, 3.0)])
def test_python_loop_unrolled(randn, weights):
    a = randn(len(weights), 10)
    ref = sum(w * a[k].double() for k, w in enumerate(weights))
    out = python_list_loop(10, weights)(a)
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)
    # unrolled: one loop per weight, each reading its own constant row of A
    source = python_list_loop(10, weights).get_kernel_source()
    assert all(f"A[{k}, " in source for k in range(len(weights)))


@tilelang.jit(out_idx=-1, target="cpu")
def continue_and_break(N):
    """continue/break in IR loops: sum the positive entries before the first one above 2."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=1):
            acc = T.alloc_var("float32")
            acc = 0.0
            for i in T.serial(N):
                if A[i] > 2.0:
                    break
                if A[i] < 0.0:
                    continue
                acc += A[i]
            Out[0] = acc

    return main


def test_continue_and_break(randn):
    a = randn(64, scale=1.5)
    ref = 0.0
    for v in a.double().tolist():
        if v > 2.0:
            break
        if v < 0.0:
            continue
        ref += v
    torch.testing.assert_close(
        continue_and_break(64)(a).double(),
        torch.tensor([ref], dtype=torch.float64),
        rtol=1e-5,
        atol=1e-5,
    )


@tilelang.jit(out_idx=-1, target="cpu")
def stepped_loops(N):
    """Steps other than 1 follow Python's range for every loop kind."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((4, N), "float32")):
        with T.Kernel(1, threads=1):
            T.clear(Out)
            for i in T.unroll(0, N, 3):
                Out[0, i] = A[i]
            for i in T.serial(1, N, 4):
                Out[1, i] = A[i]
            for i in range(2, N, 5):
                Out[2, i] = A[i]
            for i in T.unroll(N - 1, 0, -2):
                Out[3, i] = A[i]

    return main


@pytest.mark.parametrize("N", [12, 13])
def test_stepped_loops(randn, N):
    a = randn(N)
    out = stepped_loops(N)(a)
    for row, rng_ in enumerate(
        [range(0, N, 3), range(1, N, 4), range(2, N, 5), range(N - 1, 0, -2)]
    ):
        ref = torch.zeros(N)
        idx = list(rng_)
        ref[idx] = a[idx]
        assert torch.equal(out[row], ref), (row, rng_)


# ------------------------------------------------------------- run-time T.Parallel extents
def _bounded_parallel(max_len, two_d):
    @T.prim_func
    def main(
        A: T.Tensor((max_len, 3), "float32"), B: T.Tensor((max_len, 3), "float32"), n: T.int32
    ):
        with T.Kernel(1, threads=128):
            for i, j in T.Parallel(max_len, 3):
                B[i, j] = 0.0
            if two_d:
                for i, j in T.Parallel(T.min(n, max_len), T.min(n, 2)):
                    B[i, j] = A[i, j] - 1.0
            else:
                for i in T.Parallel(T.min(n, max_len)):
                    B[i, 0] = A[i, 0] * 2.0

    return main


def _bounded_parallel_ref(a, n, two_d):
    ref = np.zeros_like(a, dtype=np.float64)
    c = min(n, a.shape[0])
    if two_d:
        ref[:c, : min(n, 2)] = a[:c, : min(n, 2)] - 1.0
    else:
        ref[:c, 0] = a[:c, 0] * 2.0
    return ref


@pytest.mark.parametrize("two_d", [False, True])
@pytest.mark.parametrize("n", [0, 1, 13, 200, 600])
def test_parallel_extent_bounded_by_a_constant(n, two_d):
    """T.Parallel(T.min(n, 300)) (upstream's dynamic extent) runs 300 iterations with the
    body guarded; on CUDA it was 'needs static extents' (emulated sm_80 here, and CPU)."""
    from tilelang.backends.cuda import pipeline
    from tilelang.testing.cuda_emulator import emulate

    a = np.random.default_rng(n).standard_normal((300, 3)).astype(np.float32)
    want = _bounded_parallel_ref(a, n, two_d)
    kernel = tilelang.compile(_bounded_parallel(300, two_d), out_idx=[1], target="cpu")
    np.testing.assert_allclose(kernel(torch.from_numpy(a), n).numpy(), want, rtol=1e-6)
    lowered = pipeline.lower(_bounded_parallel(300, two_d), {"kind": "cuda", "arch": "sm_80"})
    out = emulate(lowered, a, np.zeros_like(a), np.int32(n))[1]
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_unbounded_parallel_writing_a_fragment_on_cuda_names_the_line():
    """T.Parallel(n) runs as a strided loop over the threads on CUDA
    (backends/cuda/test_parallel_runtime_extent.py); a fragment written there is an error."""
    from tilelang.backends.cuda import pipeline

    @T.prim_func
    def main(A: T.Tensor((300,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((300,), "float32")
            for i in T.Parallel(n):
                f[i] = 0.0  # the line the error names
            T.copy(f, A)

    with pytest.raises(tilelang.errors.CompileError) as info:
        pipeline.lower(main, {"kind": "cuda", "arch": "sm_80"})
    assert "test_tilelang_language_loops.py:" in str(info.value)
    assert "writes the fragment f" in str(info.value)
