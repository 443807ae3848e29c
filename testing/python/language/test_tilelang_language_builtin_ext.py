"""T.alloc_buffer (every scope), T.access_ptr (element, slice, tensor, offset; read back
through T.make_tensor) and T.dp4a. CPU against numpy float64 / int64 with shapes that are
not tile multiples; CUDA: nvcc builds for sm_80 and sm_90a; GPU runs are marked cuda."""

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


def scale_kernel(M, N, bM=16, bN=16):
    """B = 2 * A + 1 through tiles from T.alloc_buffer in shared / fragment / local scopes."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            S = T.alloc_buffer((bM, bN), "float32", scope="shared.dyn")
            F = T.alloc_buffer((bM, bN), "float32", scope="local.fragment")
            one = T.alloc_buffer((1,), "float32", scope="local")
            T.copy(A[by * bM, bx * bN], S)
            one[0] = 1.0
            for i, j in T.Parallel(bM, bN):
                F[i, j] = S[i, j] * 2 + one[0]
            T.copy(F, B[by * bM, bx * bN])

    return main


def ptr_kernel(M, N, off):
    """B[r, :5] = A[r, off:off+5] (element start + offset) and C[r, :] = A[r, :] (slice start)
    read through views of T.access_ptr addresses."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        B: T.Tensor((M, 5), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(M, threads=1) as r:
            V = T.make_tensor(T.access_ptr(A[r, 0], "r", 5, offset=off), (5,), "float32")
            W = T.make_tensor(T.access_ptr(A[r, 0:N], "r"), (N,), "float32")
            for k in T.serial(5):
                B[r, k] = V[k]
            for k in T.serial(N):
                C[r, k] = W[k]

    return main


def dp4a_kernel(M):
    @T.prim_func
    def main(A: T.Tensor((M, 4), "int8"), B: T.Tensor((M, 4), "int8"), C: T.Tensor((M,), "int32")):
        with T.Kernel(M, threads=1) as r:
            T.dp4a(A[r, 0], B[r, 0:4], C[r])

    return main


@pytest.mark.parametrize("M,N", [(37, 23), (50, 40)])
def test_alloc_buffer_scopes(M, N, rng):
    a = rng.standard_normal((M, N))
    A = torch.from_numpy(a).float()
    B = torch.zeros(M, N)
    tilelang.compile(scale_kernel(M, N), target="cpu")(A, B)
    np.testing.assert_allclose(B.double().numpy(), A.double().numpy() * 2 + 1, rtol=1e-6)


def test_alloc_buffer_global_and_var(rng):
    N = 29

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        W = T.alloc_buffer((N,), "float32")  # scope "global": a workspace
        with T.Kernel(1, threads=1):
            for i in T.serial(N):
                W[i] = A[i] * 3
        with T.Kernel(1, threads=1):
            acc = T.alloc_buffer((1,), "float32", scope="local.var")
            acc[0] = 0.0
            for i in T.serial(N):
                acc[0] = acc[0] + W[i]
                B[i] = acc[0]

    a = rng.standard_normal(N)
    B = torch.zeros(N)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a).float(), B)
    np.testing.assert_allclose(B.double().numpy(), np.cumsum(a * 3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N,off", [(7, 13, 3), (5, 9, 0)])
def test_access_ptr_views(M, N, off, rng):
    a = rng.standard_normal((M, N))
    B, C = torch.zeros(M, 5), torch.zeros(M, N)
    tilelang.compile(ptr_kernel(M, N, off), target="cpu")(torch.from_numpy(a).float(), B, C)
    np.testing.assert_allclose(B.double().numpy(), a[:, off : off + 5], rtol=1e-6)
    np.testing.assert_allclose(C.double().numpy(), a, rtol=1e-6)


@pytest.mark.parametrize("M", [1, 19])
def test_dp4a(M, rng):
    a = rng.integers(-128, 128, size=(M, 4))
    b = rng.integers(-128, 128, size=(M, 4))
    c0 = rng.integers(-1000, 1000, size=M)
    C = torch.from_numpy(c0).int()
    tilelang.compile(dp4a_kernel(M), target="cpu")(
        torch.from_numpy(a).to(torch.int8), torch.from_numpy(b).to(torch.int8), C
    )
    np.testing.assert_array_equal(C.numpy().astype(np.int64), c0 + (a * b).sum(1))


def test_errors():
    def bad_scope():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.alloc_buffer((8,), "float32", scope="texture")

        return main

    def bad_access():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.evaluate(T.call_extern("handle", "f", T.access_ptr(A, "x")))

        return main

    def bad_base():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.evaluate(T.call_extern("handle", "f", T.access_ptr(3, "r")))

        return main

    def bad_dp4a():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), C: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=1):
                T.dp4a(A[0], A[4], C[0])

        return main

    for make, words in [
        (bad_scope, "scope must be one of"),
        (bad_access, "access_type must be"),
        (bad_base, "base must be a tensor"),
        (bad_dp4a, "A must be int8"),
    ]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for func in (scale_kernel(37, 23), ptr_kernel(7, 13, 3), dp4a_kernel(19)):
        assert cuda_pipeline.build(func, target, compiler="nvcc").device_binary


@pytest.mark.cuda
def test_gpu_matches_cpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.from_numpy(rng.standard_normal((37, 23))).float()
    B = torch.zeros(37, 23, device="cuda")
    tilelang.compile(scale_kernel(37, 23), target="cuda")(a.cuda(), B)
    torch.testing.assert_close(B.cpu().double(), a.double() * 2 + 1)
    x = torch.from_numpy(rng.integers(-128, 128, size=(19, 4))).to(torch.int8)
    y = torch.from_numpy(rng.integers(-128, 128, size=(19, 4))).to(torch.int8)
    C = torch.zeros(19, dtype=torch.int32, device="cuda")
    tilelang.compile(dp4a_kernel(19), target="cuda")(x.cuda(), y.cuda(), C)
    ref = (x.long() * y.long()).sum(1)
    assert torch.equal(C.cpu().long(), ref)


# ----------------------------------------------------------------- T.tfloat32, T.tvm_storage_sync
def tf32_gemm(M, N, K, bM=32, bN=32, bK=16):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), T.tfloat32),
        B: T.Tensor((K, N), T.tfloat32),
        C: T.Tensor((M, N), T.float32),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), T.tfloat32)
            Bs = T.alloc_shared((bK, bN), T.tfloat32)
            Cf = T.alloc_fragment((bM, bN), T.float32)
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


def test_tfloat32_gemm_cpu(rng):
    M, N, K = 45, 37, 50
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    C = torch.zeros(M, N)
    fa, fb = torch.from_numpy(a).float(), torch.from_numpy(b).float()
    tilelang.compile(tf32_gemm(M, N, K), target="cpu")(fa, fb, C)
    ref = fa.double().numpy() @ fb.double().numpy()
    np.testing.assert_allclose(C.double().numpy(), ref, rtol=1e-4, atol=1e-4)
    assert T.tfloat32.as_torch() is torch.float32 and T.tfloat32.bits == 32


def storage_sync_kernel(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tid = T.get_thread_binding(0)
            S = T.alloc_shared((n,), "float32")
            S[tid] = A[tid]
            T.tvm_storage_sync("shared")
            B[tid] = S[n - 1 - tid] + S[(tid + 1) % n]

    return main


def test_tvm_storage_sync(rng):
    n = 48
    a = rng.standard_normal(n)
    B = torch.zeros(n)
    tilelang.compile(storage_sync_kernel(n), target="cpu")(torch.from_numpy(a).float(), B)
    ref = a[::-1] + np.roll(a, -1)
    np.testing.assert_allclose(B.double().numpy(), ref, rtol=1e-6, atol=1e-6)

    def bad_scope():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                T.tvm_storage_sync("global")

        return main

    with pytest.raises(tilelang.TileLangError, match="scope must be 'shared'"):
        bad_scope()


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds_tf32_and_sync(target):
    art = cuda_pipeline.build(tf32_gemm(45, 37, 50), target, compiler="nvcc")
    assert art.device_binary
    assert "tf32" in art.kernel_source
    art = cuda_pipeline.build(storage_sync_kernel(48), target, compiler="nvcc")
    assert "__syncthreads" in art.kernel_source


@pytest.mark.cuda
def test_tfloat32_gemm_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N, K = 45, 37, 50
    fa = torch.from_numpy(rng.standard_normal((M, K))).float()
    fb = torch.from_numpy(rng.standard_normal((K, N))).float()
    C = torch.zeros(M, N, device="cuda")
    tilelang.compile(tf32_gemm(M, N, K), target="cuda")(fa.cuda(), fb.cuda(), C)
    ref = fa.double() @ fb.double()
    torch.testing.assert_close(C.cpu().double(), ref, rtol=1e-2, atol=5e-2)  # tf32 products


# ----------------------------------------------------------------------------- T.thread_binding
def binding_kernel(nx, ny):
    @T.prim_func
    def main(A: T.Tensor((ny, nx), "float32"), B: T.Tensor((ny, nx), "float32")):
        with T.Kernel(1, threads=(nx, ny)):
            tx = T.thread_binding(0, nx, thread="threadIdx.x")
            ty = T.thread_binding(ny, "threadIdx.y")
            B[ty, tx] = A[ty, tx] * 3 + tx - ty

    return main


def test_thread_binding(rng):
    nx, ny = 24, 5
    a = rng.standard_normal((ny, nx))
    B = torch.zeros(ny, nx)
    tilelang.compile(binding_kernel(nx, ny), target="cpu")(torch.from_numpy(a).float(), B)
    ref = a * 3 + np.arange(nx)[None, :] - np.arange(ny)[:, None]
    np.testing.assert_allclose(B.double().numpy(), ref, rtol=1e-5, atol=1e-5)

    def wrong_extent():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                tx = T.thread_binding(0, 16, thread="threadIdx.x")
                A[tx] = 0.0

        return main

    def no_axis():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                ty = T.thread_binding(0, 8, thread="threadIdx.y")
                A[ty] = 0.0

        return main

    for make, words in [(wrong_extent, "spans 16 threads"), (no_axis, "not launched")]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()
    if shutil.which("nvcc"):  # the CUDA backend launches one thread dimension
        art = cuda_pipeline.build(binding_1d(96), SM80, compiler="nvcc")
        assert "threadIdx.x" in art.kernel_source and art.device_binary


def binding_1d(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.thread_binding(0, n, thread="threadIdx.x")
            A[tx] = A[tx] + tx

    return main
