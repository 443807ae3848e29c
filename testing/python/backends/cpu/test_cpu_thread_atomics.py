"""Upstream SIMT idioms the DeepSeek examples use (v3.2's radix top-k selector), on the CPU:
one-element atomics in per-thread code (each thread that reaches them updates, as on CUDA),
``return_prev`` into per-thread variables, and ``T.sync_threads(barrier_id, arrive_count)``
under an ``if`` keeping the first threads."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors


@tilelang.jit(target="cpu")
def histogram_ranks(n, bins, threads):
    @T.prim_func
    def main(
        X: T.Tensor((n,), T.int32),
        Hist: T.Tensor((bins,), T.int32),
        Rank: T.Tensor((n,), T.int32),
        Once: T.Tensor((2,), T.int32),
    ):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            local_hist = T.alloc_shared((bins,), T.int32)
            pos = T.alloc_var(T.int32)
            T.fill(local_hist, 0)
            T.sync_threads()
            for it in T.serial(T.ceildiv(n, threads)):
                i = it * threads + tx
                if i < n:
                    T.atomic_add(local_hist[X[i]], 1)  # per thread: address depends on tx
            T.sync_threads()
            if tx == 0:
                T.atomic_add(Once[0], 1)  # only the threads the `if` keeps
            T.atomic_add(Once[1], 1)  # thread-independent: once per block (as on CUDA)
            for it in T.serial(T.ceildiv(n, threads)):
                i = it * threads + tx
                if i < n:
                    pos = T.atomic_add(Hist[X[i]], 1, return_prev=True)
                    Rank[i] = pos + local_hist[X[i]] * 0

    return main


@pytest.mark.parametrize("n,bins,threads", [(300, 7, 128), (37, 3, 64)])
def test_per_thread_atomics_and_return_prev(n, bins, threads):
    x = torch.randint(0, bins, (n,), dtype=torch.int32)
    hist = torch.zeros(bins, dtype=torch.int32)
    rank = torch.full((n,), -1, dtype=torch.int32)
    once = torch.zeros(2, dtype=torch.int32)
    histogram_ranks(n, bins, threads)(x, hist, rank, once)
    ref = np.bincount(x.numpy(), minlength=bins)
    np.testing.assert_array_equal(hist.numpy(), ref)
    for b in range(bins):  # each element got a distinct previous count in its bin
        assert sorted(rank[x == b].tolist()) == list(range(int(ref[b])))
    assert once.tolist() == [1, 1]


@tilelang.jit(target="cpu")
def prefix_sums(n, radix, threads):
    @T.prim_func
    def main(X: T.Tensor((n, radix), T.int32), Y: T.Tensor((n, radix), T.int32)):
        with T.Kernel(n, threads=threads) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((radix,), T.int32)
            val = T.alloc_var(T.int32)
            if tx < radix:
                s[tx] = X[bx, tx]
            T.sync_threads()
            # Hillis-Steele suffix sums over the first `radix` threads, synchronised by a
            # named barrier only they reach (upstream's top-k selector does this)
            if tx < radix:
                for i in T.serial(8):
                    offset = 1 << i
                    T.sync_threads(3, radix)
                    if tx < radix - offset:
                        val = s[tx] + s[tx + offset]
                    T.sync_threads(3, radix)
                    if tx < radix - offset:
                        s[tx] = val
            T.sync_threads()
            if tx < radix:
                Y[bx, tx] = s[tx]

    return main


@pytest.mark.parametrize("n,radix,threads", [(3, 64, 128), (2, 96, 160)])
def test_named_barrier_under_thread_if(n, radix, threads):
    x = torch.randint(-50, 50, (n, radix), dtype=torch.int32)
    y = torch.zeros_like(x)
    prefix_sums(n, radix, threads)(x, y)
    xd = x.numpy().astype(np.float64)
    ref = np.flip(np.cumsum(np.flip(xd, 1), 1), 1)  # suffix sums (radix <= 2**8)
    np.testing.assert_array_equal(y.numpy().astype(np.float64), ref)


def test_sync_threads_arguments_are_checked():
    with pytest.raises(errors.TraceError, match="multiple of 32"):

        @T.prim_func
        def bad(A: T.Tensor((4,), T.int32)):
            with T.Kernel(1, threads=128):
                T.sync_threads(1, 48)

    with pytest.raises(errors.TraceError, match="barrier_id"):

        @T.prim_func
        def bad2(A: T.Tensor((4,), T.int32)):
            with T.Kernel(1, threads=128):
                T.sync_threads(arrive_count=64)


def test_sync_threads_barrier_id_only_counts_the_block():
    @T.prim_func
    def k(A: T.Tensor((4,), T.int32)):
        with T.Kernel(1, threads=96):
            T.sync_threads(2)

    assert "named_barrier_sync" in k.script() and "96" in k.script()


@tilelang.jit(target="cpu")
def first_warp_softmax_gemm(n, m, k):
    """mHC-pre style: the first warp alone normalises a small matrix (reduce, T.Parallel)
    and multiplies it (gemm) under ``if tx < 32``; upstream plans these tile ops over the
    threads the ``if`` keeps."""

    @T.prim_func
    def main(
        X: T.Tensor((n, m), T.float32),
        W: T.Tensor((m, k), T.float32),
        Y: T.Tensor((n, k), T.float32),
    ):
        with T.Kernel(1, threads=128):
            x_s = T.alloc_shared((n, m), T.float32)
            w_s = T.alloc_shared((m, k), T.float32)
            T.copy(X, x_s)
            T.copy(W, w_s)
            if T.get_thread_binding() < 32:
                f = T.alloc_fragment((n, m), T.float32)
                row_max = T.alloc_fragment((n,), T.float32)
                row_sum = T.alloc_fragment((n,), T.float32)
                acc = T.alloc_fragment((n, k), T.float32)
                T.copy(x_s, f)
                T.reduce_max(f, row_max, dim=1)
                for i, j in T.Parallel(n, m):
                    f[i, j] = T.exp(f[i, j] - row_max[i])
                T.reduce_sum(f, row_sum, dim=1)
                for i, j in T.Parallel(n, m):
                    f[i, j] = f[i, j] / row_sum[i]
                T.copy(f, x_s)
                T.clear(acc)
                T.gemm(x_s, w_s, acc)
                T.copy(acc, Y)

    return main


@pytest.mark.parametrize("n,m,k", [(4, 4, 8), (7, 5, 3)])
def test_reduce_and_gemm_under_first_warp_if(n, m, k):
    x = torch.randn(n, m)
    w = torch.randn(m, k)
    y = torch.zeros(n, k)
    first_warp_softmax_gemm(n, m, k)(x, w, y)
    xd = x.double().numpy()
    p = np.exp(xd - xd.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(y.double().numpy(), p @ w.double().numpy(), rtol=1e-5, atol=1e-6)
