"""T.ptr and T.make_tensor: scalar address parameters, pointer tables, strided views.

CPU against float64 torch (a tile GEMM over T.make_tensor views with non-tile-multiple
sizes, pointer-table copies); CUDA forms build with nvcc for sm_80 / sm_90a; GPU tests are
marked cuda."""

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


def matmul_ptr(M, N, K, bM, bN, bK, dtype="float32", accum="float32", c_tensor=False):
    """Upstream's test_tilelang_language_ptr matmul. ``c_tensor``: C is a T.Tensor parameter
    (the CPU backend needs one tensor parameter to place its shared-memory workspace)."""
    c_type = T.Tensor((M, N), accum) if c_tensor else T.ptr

    @T.prim_func
    def main(a_ptr: T.ptr, b_ptr: T.ptr, c_ptr: c_type, m: T.int32, n: T.int32, k: T.int32):
        A = T.make_tensor(a_ptr, (m, k), dtype)
        B = T.make_tensor(b_ptr, (n, k), dtype)
        C = c_ptr if c_tensor else T.make_tensor(c_ptr, (m, n), accum)
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), dtype)
            Bs = T.alloc_shared((bN, bK), dtype)
            Cl = T.alloc_fragment((bM, bN), accum)
            T.clear(Cl)
            for ko in T.Pipelined(T.ceildiv(k, bK), num_stages=2):
                T.copy(A[by * bM, ko * bK], As)
                T.copy(B[bx * bN, ko * bK], Bs)
                T.gemm(As, Bs, Cl, transpose_B=True)
            T.copy(Cl, C[by * bM, bx * bN])

    return main


def test_matmul_through_pointers_cpu(rng):
    M, N, K = 70, 45, 50
    a = torch.from_numpy(rng.standard_normal((M, K)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((N, K)).astype(np.float32))
    c = torch.zeros(M, N)
    kernel = tilelang.compile(matmul_ptr(M, N, K, 32, 32, 16, c_tensor=True), target="cpu")
    kernel(a.data_ptr(), b.data_ptr(), c, M, N, K)
    ref = a.double() @ b.double().T
    np.testing.assert_allclose(c.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def table_copy(G, N, dtype):
    @T.prim_func
    def main(src_ptrs: T.Tensor([G], T.ptr), out: T.Tensor([G, N], dtype)):
        with T.Kernel(G, threads=1) as bx:
            Src = T.make_tensor(src_ptrs[bx], (N,), dtype)
            for i in T.serial(N):
                out[bx, i] = Src[i] * 2

    return main


def strided_view(R, C):
    @T.prim_func
    def main(base: T.ptr, out: T.Tensor([C, R], "float32")):
        with T.Kernel(1, threads=32):
            # the transpose of a row-major (R, C) matrix, as a strided view
            V = T.make_tensor(base, (C, R), "float32", strides=(1, C))
            for i, j in T.Parallel(C, R):
                out[i, j] = V[i, j]

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_pointer_table_cpu(dtype, rng):
    G, N = 3, 37
    srcs = [torch.from_numpy(rng.standard_normal(N)).to(getattr(torch, dtype)) for _ in range(G)]
    table = torch.tensor([s.data_ptr() for s in srcs], dtype=torch.int64)
    out = torch.zeros(G, N, dtype=getattr(torch, dtype))
    tilelang.compile(table_copy(G, N, dtype), target="cpu")(table, out)
    ref = torch.stack(srcs).double() * 2
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=1e-3)


def test_strided_view_cpu(rng):
    R, C = 13, 7
    x = torch.from_numpy(rng.standard_normal((R, C)).astype(np.float32))
    out = torch.zeros(C, R)
    tilelang.compile(strided_view(R, C), target="cpu")(x.data_ptr(), out)
    np.testing.assert_array_equal(out.numpy(), x.numpy().T)


def test_dtype_and_errors():
    assert T.ptr == "int64" and T.ptr.bits == 64
    with pytest.raises(tilelang.TileLangError, match="not a Python int"):

        @T.prim_func
        def main(out: T.Tensor([4], "float32")):
            with T.Kernel(1, threads=1):
                T.make_tensor(12345, (4,), "float32")

    with pytest.raises(tilelang.TileLangError, match="must be a 64-bit integer"):

        @T.prim_func
        def main2(p: T.int32, out: T.Tensor([4], "float32")):
            with T.Kernel(1, threads=1):
                T.make_tensor(p, (4,), "float32")


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for func in (
        matmul_ptr(256, 256, 128, 64, 64, 32, "float16"),
        table_copy(3, 37, "float16"),
        strided_view(13, 7),
    ):
        assert cuda_pipeline.build(func, target, compiler="nvcc").device_binary


@pytest.mark.cuda
def test_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N, K = 200, 136, 96
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.zeros(M, N, device="cuda")
    kernel = tilelang.compile(matmul_ptr(M, N, K, 64, 64, 32, "float16"), target="cuda")
    kernel(a.data_ptr(), b.data_ptr(), c.data_ptr(), M, N, K)
    torch.testing.assert_close(c, (a.double() @ b.double().T).float(), rtol=1e-2, atol=1e-2)
    srcs = [torch.randn(37, device="cuda") for _ in range(3)]
    table = torch.tensor([s.data_ptr() for s in srcs], device="cuda", dtype=torch.int64)
    out = torch.zeros(3, 37, device="cuda")
    tilelang.compile(table_copy(3, 37, "float32"), target="cuda")(table, out)
    torch.testing.assert_close(out, torch.stack(srcs) * 2)
