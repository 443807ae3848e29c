"""CUDA tile ops end to end: each kernel is emulated on the CPU (numpy, no GPU needed) and,
marked ``cuda``, run on the GPU against torch with fresh random inputs and tails.

fill, copy forms (shared, fragment, 4-D regions with unit dims), reduce sum/max,
softmax, layernorm, atomic_add histogram and tile atomics, cumsum, and the
FlashAttention example (causal and not).
"""

import importlib.util
import pathlib

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGET = {"kind": "cuda", "arch": "sm_90a"}
ROOT = pathlib.Path(__file__).resolve().parents[4]


# ------------------------------------------------------------------------------ kernels
def fill_copy(M, N, bM=32, bN=64, value=3.5):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"),
             C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            s = T.alloc_shared((bM, bN), "float32")
            f = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], s)  # global -> shared
            T.copy(s, f)  # shared -> fragment
            T.copy(f, B[by * bM, bx * bN])  # fragment -> global
            T.fill(f, value)
            T.copy(f, C[by * bM, bx * bN])

    return main


def copy_4d(B, S, H, D, bM=64):
    @T.prim_func
    def main(X: T.Tensor((B, S, H, D), "float16"), Y: T.Tensor((B, S, H, D), "float16")):
        with T.Kernel(T.ceildiv(S, bM), H, B, threads=128) as (bx, by, bz):
            s = T.alloc_shared((bM, D), "float16")
            f = T.alloc_fragment((bM, D), "float32")
            T.copy(X[bz, bx * bM : (bx + 1) * bM, by, :], s)
            T.copy(s, f)
            for i, j in T.Parallel(bM, D):
                f[i, j] = f[i, j] + 1.0
            T.copy(f, Y[bz, bx * bM : (bx + 1) * bM, by, :])

    return main


def reduce_rows(M, N, bM=16):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"),
             Mx: T.Tensor((M,), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            f = T.alloc_fragment((bM, N), "float32")
            s = T.alloc_fragment((bM,), "float32")
            m = T.alloc_fragment((bM,), "float32")
            T.copy(A[bx * bM, 0], f)
            T.reduce_sum(f, s, dim=1)
            T.reduce_max(f, m, dim=1)
            T.copy(s, S[bx * bM])
            T.copy(m, Mx[bx * bM])

    return main


def layernorm(M, N, bM=8, eps=1e-5):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), G: T.Tensor((N,), "float32"),
             Y: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            sq = T.alloc_fragment((bM, N), "float32")
            mean = T.alloc_fragment((bM,), "float32")
            var = T.alloc_fragment((bM,), "float32")
            T.copy(X[bx * bM, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(bM):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(bM, N):
                sq[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(sq, var, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = (x[i, j] - mean[i]) * T.rsqrt(var[i] / N + eps) * G[j]
            T.copy(x, Y[bx * bM, 0])

    return main


def histogram(N, bins, bN=256):
    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), H: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(N, bN), threads=128) as bx:
            for i in T.Parallel(bN):
                if bx * bN + i < N:
                    T.atomic_add(H[A[bx * bN + i]], 1)

    return main


def tile_atomics(M, N, bM=32, bN=32):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), S: T.Tensor((bM, bN), "float32"),
             Mx: T.Tensor((bM,), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            f = T.alloc_fragment((bM, bN), "float32")
            r = T.alloc_fragment((bM,), "float32")
            T.copy(A[by * bM, bx * bN], f)
            T.atomic_add(S, f)
            T.reduce_max(f, r, dim=1)
            T.atomic_max(Mx, r)
            T.atomic_min(Mx[0], -100.0)

    return main


def cumsum_kernel(M, N, dim, reverse, fragment):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:  # noqa: F841
            s = T.alloc_shared((M, N), "float32")
            f = T.alloc_fragment((M, N), "float32")
            T.copy(A, s)
            if fragment:
                T.copy(s, f)
                T.cumsum(f, dim=dim, reverse=reverse)
                T.copy(f, B)
            else:
                T.cumsum(s, dim=dim, reverse=reverse)
                T.copy(s, B)

    return main


def _example(rel):
    path = ROOT / "examples" / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------ references
def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layernorm(x, g, eps=1e-5):
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + eps) * g


def _cumsum(a, dim, reverse):
    return np.flip(np.cumsum(np.flip(a, dim), dim), dim) if reverse else np.cumsum(a, dim)


def _tile_atomic_refs(a, bM=32, bN=32):
    M, N = a.shape
    pad = np.zeros((-(-M // bM) * bM, -(-N // bN) * bN), np.float32)
    pad[:M, :N] = a
    tiles = pad.reshape(pad.shape[0] // bM, bM, pad.shape[1] // bN, bN)
    mx = tiles.max(axis=(0, 2, 3))
    mx[0] = min(mx[0], -100.0)
    return tiles.sum((0, 2)), mx


# ------------------------------------------------------------------------------ CPU emulation
def _run(func, *arrays):
    return emulate(pipeline.lower(func, TARGET), *arrays)


def test_fill_copy_emulated():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((70, 100)).astype(np.float32)
    _, b, c = _run(fill_copy(70, 100), a, np.zeros_like(a), np.zeros_like(a))
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(c, np.full_like(a, 3.5))


def test_copy_4d_emulated():
    x = np.random.default_rng(1).standard_normal((2, 100, 3, 64)).astype(np.float16)
    _, y = _run(copy_4d(2, 100, 3, 64), x, np.zeros_like(x))
    np.testing.assert_array_equal(y, (x.astype(np.float32) + 1).astype(np.float16))


@pytest.mark.parametrize("M,N", [(40, 256), (37, 1000)])
def test_reduce_emulated(M, N):
    a = np.random.default_rng(2).standard_normal((M, N)).astype(np.float32)
    _, s, m = _run(reduce_rows(M, N), a, np.zeros(M, np.float32), np.zeros(M, np.float32))
    np.testing.assert_allclose(s, a.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(m, a.max(1))


def test_layernorm_emulated():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((20, 512)).astype(np.float32), rng.random(512).astype(np.float32)
    _, _, y = _run(layernorm(20, 512), x, g, np.zeros_like(x))
    np.testing.assert_allclose(y, _layernorm(x, g), rtol=1e-4, atol=1e-4)


def test_histogram_emulated():
    a = np.random.default_rng(4).integers(0, 16, 1000).astype(np.int32)
    _, h = _run(histogram(1000, 16), a, np.zeros(16, np.int32))
    np.testing.assert_array_equal(h, np.bincount(a, minlength=16))


def test_tile_atomics_emulated():
    a = np.random.default_rng(5).standard_normal((70, 64)).astype(np.float32)
    s, mx = np.zeros((32, 32), np.float32), np.full(32, -np.inf, np.float32)
    _, s, mx = _run(tile_atomics(70, 64), a, s, mx)
    want_s, want_mx = _tile_atomic_refs(a)
    np.testing.assert_allclose(s, want_s, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mx, want_mx)


@pytest.mark.parametrize("fragment", [False, True])
@pytest.mark.parametrize("dim,reverse", [(0, False), (1, False), (1, True)])
def test_cumsum_emulated(fragment, dim, reverse):
    a = np.random.default_rng(6).standard_normal((16, 40)).astype(np.float32)
    _, b = _run(cumsum_kernel(16, 40, dim, reverse, fragment), a, np.zeros_like(a))
    np.testing.assert_allclose(b, _cumsum(a, dim, reverse), rtol=1e-5, atol=1e-5)


def test_atomic_cumsum_compile_with_nvcc():
    for func in (histogram(1000, 16), tile_atomics(70, 64), cumsum_kernel(16, 40, 1, 0, 1)):
        src = pipeline.build(func, TARGET, compiler="nvcc").get_kernel_source()
        assert "main_kernel" in src


# ------------------------------------------------------------------------------ GPU
def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
def test_fill_copy_gpu():
    torch, load = _gpu()
    a = torch.randn(1000, 1000, device="cuda")
    b, c = torch.empty_like(a), torch.empty_like(a)
    load(fill_copy(1000, 1000))(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, a, rtol=0, atol=0)
    torch.testing.assert_close(c, torch.full_like(a, 3.5))


@pytest.mark.cuda
def test_copy_4d_gpu():
    torch, load = _gpu()
    x = torch.randn(2, 200, 3, 64, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    load(copy_4d(2, 200, 3, 64))(x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, (x.float() + 1).half())


@pytest.mark.cuda
@pytest.mark.parametrize("M,N", [(1000, 256), (333, 1000)])
def test_reduce_softmax_gpu(M, N):
    torch, load = _gpu()
    a = torch.randn(M, N, device="cuda")
    s, m = torch.empty(M, device="cuda"), torch.empty(M, device="cuda")
    load(reduce_rows(M, N))(a, s, m)
    y = torch.empty_like(a)
    load(_example("softmax/example_softmax.py").softmax.get_tir(M, N))(a, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(s, a.sum(1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(m, a.max(1).values)
    torch.testing.assert_close(y, torch.softmax(a, 1), rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_layernorm_gpu():
    torch, load = _gpu()
    M, N = 1001, 512
    x, g = torch.randn(M, N, device="cuda"), torch.rand(N, device="cuda")
    y = torch.empty_like(x)
    load(layernorm(M, N))(x, g, y)
    torch.cuda.synchronize()
    ref = torch.nn.functional.layer_norm(x, (N,), eps=1e-5) * g
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
def test_atomics_gpu():
    torch, load = _gpu()
    N, bins = 100_003, 64
    a = torch.randint(0, bins, (N,), device="cuda", dtype=torch.int32)
    h = torch.zeros(bins, device="cuda", dtype=torch.int32)
    load(histogram(N, bins))(a, h)
    x = torch.randn(300, 200, device="cuda")
    s = torch.zeros(32, 32, device="cuda")
    mx = torch.full((32,), float("-inf"), device="cuda")
    load(tile_atomics(300, 200))(x, s, mx)
    torch.cuda.synchronize()
    torch.testing.assert_close(h.long(), torch.bincount(a.long(), minlength=bins))
    want_s, want_mx = _tile_atomic_refs(x.cpu().numpy())
    torch.testing.assert_close(s.cpu(), torch.from_numpy(want_s), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mx.cpu(), torch.from_numpy(want_mx))


@pytest.mark.cuda
@pytest.mark.parametrize("fragment", [False, True])
def test_cumsum_gpu(fragment):
    torch, load = _gpu()
    for dim, reverse in [(0, False), (1, True)]:
        a = torch.randn(16, 40, device="cuda")
        b = torch.empty_like(a)
        load(cumsum_kernel(16, 40, dim, reverse, fragment))(a, b)
        torch.cuda.synchronize()
        want = _cumsum(a.cpu().numpy(), dim, reverse)
        torch.testing.assert_close(b.cpu(), torch.from_numpy(want.copy()), rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gpu(causal):
    torch, load = _gpu()
    fa = _example("flash_attention/example_mha_fwd_bshd.py")
    B, H, S, D = 2, 4, 256, 64
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    load(fa.flashattn.get_tir(B, H, S, D, causal))(q, k, v, o)
    torch.cuda.synchronize()
    ref = fa.ref_program(q, k, v, causal)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)
