"""T.rng_init / T.rng_rand / T.rng_rand_float: curand's Philox4x32-10 streams.

CPU: exact uint32 values against a pure-Python model of curand's Philox state (word ``g`` of
a stream is word ``g % 4`` of block ``g // 4``; Philox itself checked against Random123's
known-answer vectors) and its uniform / Box-Muller formulas, uniform and normal statistics,
the upstream example's form (a T.Parallel loop run by one thread, equal to triton's
``randint4x`` stream). CUDA: nvcc builds for sm_80/sm_90a, emulated values equal
to the CPU's; GPU tests (marked cuda) compare CUDA with the CPU bit for bit.
"""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.language.random import philox_reference

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_philox_known_answers():
    """Random123's kat_vectors for philox4x32_10."""
    assert philox_reference(0, 0, 0) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    ones = 0xFFFFFFFFFFFFFFFF
    assert philox_reference(ones, ones, ones) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


def per_thread_kernel(n, threads, blocks, seed, off):
    @T.prim_func
    def main(
        A: T.Tensor((blocks * threads, n), "uint32"),
        B: T.Tensor((blocks * threads, n), "float32"),
        C: T.Tensor((blocks * threads, n), "float64"),
        D: T.Tensor((blocks * threads, n), "float32"),
    ):
        with T.Kernel(blocks, threads=threads) as bx:
            tx = T.get_thread_binding()
            row = bx * threads + tx
            T.rng_init(seed, off=off)  # seq defaults to tx + bx * threads
            for i in T.serial(n):
                A[row, i] = T.rng_rand()
                B[row, i] = T.rng_rand_float()
                C[row, i] = T.rng_rand_float(bit=64)
                D[row, i] = T.rng_rand_float(dist="normal")

    return main


def _outputs(rows, n):
    return (
        torch.zeros(rows, n, dtype=torch.uint32),
        torch.zeros(rows, n),
        torch.zeros(rows, n, dtype=torch.float64),
        torch.zeros(rows, n),
    )


class CurandStream:
    """curand's curandStatePhilox4_32_10_t in Python: draws, uniforms, pending normals."""

    def __init__(self, seed, seq, off):
        self.seed, self.seq, self.n = seed, seq, off
        self.pending = {32: None, 64: None}

    def word(self):
        g, self.n = self.n, self.n + 1
        return philox_reference(self.seed, self.seq, g // 4)[g % 4]

    def uniform32(self):
        x = np.float32(self.word())
        return np.float32(x * np.float32(2.0**-32) + np.float32(2.0**-33))

    def uniform64(self):
        x, y = self.word(), self.word()
        return float(x ^ (y << 21)) * 2.0**-53 + 2.0**-54

    def normal(self, bit):
        if self.pending[bit] is not None:
            value, self.pending[bit] = self.pending[bit], None
            return value
        if bit == 32:
            u = float(self.uniform32())
            step = float(np.float32(2.0**-32 * 2 * math.pi))
            v = self.word() * step + step / 2
        else:
            u = self.uniform64()
            x, y = self.word(), self.word()
            v = (float(x ^ (y << 21)) * 2.0**-52 + 2.0**-53) * math.pi
        s = math.sqrt(-2 * math.log(u))
        self.pending[bit] = s * math.cos(v)
        return s * math.sin(v)


def _expected(seed, off, rows, n):
    """Reference values of per_thread_kernel: row r is the stream (seed, r) from word off."""
    a = np.zeros((rows, n), np.uint64)
    b, c, d = np.zeros((rows, n)), np.zeros((rows, n)), np.zeros((rows, n))
    for r in range(rows):
        stream = CurandStream(seed, r, off)
        for i in range(n):
            a[r, i] = stream.word()
            b[r, i] = stream.uniform32()
            c[r, i] = stream.uniform64()
            d[r, i] = stream.normal(32)
    return a, b, c, d


def test_curand_stream_model():
    """The model's uint32 order is triton's randint4x (upstream's examples/rand compares
    its kernel with it): element 4 o + k is word k of block o."""
    stream = CurandStream(42, 0, 0)
    words = [stream.word() for _ in range(12)]
    assert words == [w for o in range(3) for w in philox_reference(42, 0, o)]
    late = CurandStream(42, 0, 6)  # skipahead(6): block 1, word 2
    assert late.word() == philox_reference(42, 0, 1)[2]


def test_values_match_reference_cpu():
    n, threads, blocks, seed, off = 5, 33, 2, 20260101, 7
    outs = _outputs(threads * blocks, n)
    tilelang.compile(per_thread_kernel(n, threads, blocks, seed, off), target="cpu")(*outs)
    a, b, c, d = _expected(seed, off, threads * blocks, n)
    np.testing.assert_array_equal(outs[0].numpy().astype(np.uint64), a)
    np.testing.assert_allclose(outs[1].numpy(), b, rtol=1e-7)
    np.testing.assert_allclose(outs[2].numpy(), c, rtol=1e-15)
    np.testing.assert_allclose(outs[3].numpy(), d, rtol=1e-4, atol=1e-5)


def mixed_kernel(n, threads, seed, off):
    """Normals of both widths interleaved with words: a pending normal takes no words."""

    @T.prim_func
    def main(
        A: T.Tensor((threads, n), "uint32"),
        Z32: T.Tensor((threads, n), "float32"),
        Z64: T.Tensor((threads, n), "float64"),
    ):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            T.rng_init(seed, tx * 3 + 1, off)
            for i in T.serial(n):
                Z64[tx, i] = T.rng_rand_float(64, "normal")
                A[tx, i] = T.rng_rand()
                Z32[tx, i] = T.rng_rand_float(32, "normal")

    return main


def test_normals_and_words_interleaved_cpu():
    n, threads, seed, off = 5, 7, 123456789, 3
    a = torch.zeros(threads, n, dtype=torch.uint32)
    z32, z64 = torch.zeros(threads, n), torch.zeros(threads, n, dtype=torch.float64)
    tilelang.compile(mixed_kernel(n, threads, seed, off), target="cpu")(a, z32, z64)
    for t in range(threads):
        stream = CurandStream(seed, t * 3 + 1, off)
        for i in range(n):
            assert z64[t, i].item() == pytest.approx(stream.normal(64), rel=1e-12, abs=1e-12)
            assert int(a[t, i]) == stream.word()
            assert z32[t, i].item() == pytest.approx(stream.normal(32), rel=1e-5, abs=1e-5)


def bulk_kernel(n, threads, seed):
    @T.prim_func
    def main(U: T.Tensor((threads, n), "float64"), Z: T.Tensor((threads, n), "float64")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            T.rng_init(seed, tx)
            for i in T.serial(n):
                U[tx, i] = T.rng_rand_float(64)
                Z[tx, i] = T.rng_rand_float(64, "normal")

    return main


def test_distribution_statistics_cpu():
    n, threads = 500, 64  # 32000 samples of each
    u = torch.zeros(threads, n, dtype=torch.float64)
    z = torch.zeros(threads, n, dtype=torch.float64)
    tilelang.compile(bulk_kernel(n, threads, 99), target="cpu")(u, z)
    u, z = u.numpy().ravel(), z.numpy().ravel()
    N = u.size
    assert u.min() > 0 and u.max() <= 1
    # mean and variance within 5 standard errors
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / N)
    # chi-square over 20 bins: 19 degrees of freedom, P(chi2 > 50) < 1e-4
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    chi2 = ((counts - N / 20) ** 2 / (N / 20)).sum()
    assert chi2 < 50, chi2
    # Kolmogorov-Smirnov against the normal CDF: D * sqrt(N) < 1.95 (p ~ 0.001)
    zs = np.sort(z)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(zs / math.sqrt(2)))
    ks = np.max(np.maximum(np.arange(1, N + 1) / N - cdf, cdf - np.arange(N) / N))
    assert ks * math.sqrt(N) < 1.95, ks
    assert abs(z.mean()) < 5 / math.sqrt(N) and abs(z.var() - 1) < 5 * math.sqrt(2 / N)
    # neighbouring draws of one stream and the same draw of neighbouring streams uncorrelated
    grid = u.reshape(threads, n)
    assert abs(np.corrcoef(grid[:, :-1].ravel(), grid[:, 1:].ravel())[0, 1]) < 0.03
    assert abs(np.corrcoef(grid[:-1].ravel(), grid[1:].ravel())[0, 1]) < 0.03


def upstream_form_kernel(M, seed):
    """The form of upstream's examples/rand: one thread, T.Parallel over its numbers."""
    num_per_thread = 16

    @T.prim_func
    def main(A: T.Tensor((M,), "uint32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, num_per_thread), threads=1) as bx:
            tx = T.get_thread_binding()
            T.rng_init(seed, 0, bx * num_per_thread + tx * num_per_thread)
            for i, j in T.Parallel(1, num_per_thread):
                idx = (bx + i) * num_per_thread + j
                if idx < M:
                    A[idx] = T.rng_rand()
            for i, j in T.Parallel(1, num_per_thread):
                idx = (bx + i) * num_per_thread + j
                if idx < M:
                    B[idx] = T.rng_rand_float()

    return main


def test_upstream_form_cpu():
    M, seed = 45, 3
    a, b = torch.zeros(M, dtype=torch.uint32), torch.zeros(M)
    tilelang.compile(upstream_form_kernel(M, seed), target="cpu")(a, b)
    for idx in range(M):
        blk, j = divmod(idx, 16)
        valid = min(16, M - blk * 16)  # draws made by the first loop of this block
        assert int(a[idx]) == CurandStream(seed, 0, blk * 16 + j).word()
        assert float(b[idx]) == CurandStream(seed, 0, blk * 16 + valid + j).uniform32()


def test_errors():
    with pytest.raises(tilelang.TileLangError, match="needs a T.rng_init"):

        @T.prim_func
        def no_init(A: T.Tensor((4,), "uint32")):
            with T.Kernel(1, threads=4):
                A[T.get_thread_binding()] = T.rng_rand()

    with pytest.raises(tilelang.TileLangError, match="bit must be 32 or 64"):

        @T.prim_func
        def bad_bits(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                T.rng_init(1)
                A[T.get_thread_binding()] = T.rng_rand_float(16)

    with pytest.raises(tilelang.TileLangError, match="generator must be one of"):

        @T.prim_func
        def bad_gen(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                T.rng_init(1, generator="mt19937")


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for func in (per_thread_kernel(5, 33, 2, 1, 7), upstream_form_kernel(45, 3)):
        assert cuda_pipeline.build(func, target, compiler="nvcc").device_binary


def test_emulated_equals_cpu():
    from tilelang.testing.cuda_emulator import emulate

    n, threads, blocks, seed, off = 3, 40, 2, 5, 0
    outs = _outputs(threads * blocks, n)
    tilelang.compile(per_thread_kernel(n, threads, blocks, seed, off), target="cpu")(*outs)
    lowered = cuda_pipeline.lower(per_thread_kernel(n, threads, blocks, seed, off), SM80)
    arrays = [np.zeros_like(o.numpy()) for o in outs]
    arrays = emulate(lowered, *arrays)
    np.testing.assert_array_equal(arrays[0], outs[0].numpy())
    np.testing.assert_array_equal(arrays[1], outs[1].numpy())
    np.testing.assert_allclose(arrays[2], outs[2].numpy(), rtol=1e-15)
    np.testing.assert_allclose(arrays[3], outs[3].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_gpu_equals_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cpu_reference import reference_run

    n, threads, blocks, seed, off = 6, 128, 3, 77, 11
    # the CPU backend, or the CUDA emulator where it is absent (the GPU machine has no
    # TIRx LLVM backend): testing/python/cpu_reference.py
    cpu = [
        torch.from_numpy(a)
        for a in reference_run(
            per_thread_kernel(n, threads, blocks, seed, off), *_outputs(threads * blocks, n)
        )
    ]
    gpu = [o.cuda() for o in _outputs(threads * blocks, n)]
    tilelang.compile(per_thread_kernel(n, threads, blocks, seed, off), target="cuda")(*gpu)
    assert torch.equal(gpu[0].cpu(), cpu[0])
    torch.testing.assert_close(gpu[1].cpu(), cpu[1], rtol=0, atol=0)
    torch.testing.assert_close(gpu[2].cpu(), cpu[2], rtol=1e-15, atol=0)
    torch.testing.assert_close(gpu[3].cpu(), cpu[3], rtol=1e-5, atol=1e-5)
    a, b = (
        torch.from_numpy(x)
        for x in reference_run(
            upstream_form_kernel(45, 3), torch.zeros(45, dtype=torch.uint32), torch.zeros(45)
        )
    )
    ga, gb = torch.zeros_like(a).cuda(), torch.zeros_like(b).cuda()
    tilelang.compile(upstream_form_kernel(45, 3), target="cuda")(ga, gb)
    assert torch.equal(ga.cpu(), a) and torch.equal(gb.cpu(), b)
