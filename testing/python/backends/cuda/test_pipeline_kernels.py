"""CUDA pipeline: nvcc compile checks (no GPU needed) and GPU correctness tests vs torch."""

import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline


def elementwise_rowsum(M, N, bM=64, bN=64):
    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), S: T.Tensor((M,), "float")
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bN), "float16")
            Bf = T.alloc_fragment((bM, bN), "float")
            s = T.alloc_fragment((bM,), "float")
            T.copy(A[by * bM, bx * bN], As)
            for i, j in T.Parallel(bM, bN):
                Bf[i, j] = As[i, j] * 2.0
            T.reduce_sum(Bf, s, dim=1)
            T.copy(Bf, B[by * bM, bx * bN])
            T.copy(s, S[by * bM])

    return main


def matmul(M, N, K, bM=128, bN=128, bK=32, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), dtype)
            Bs = T.alloc_shared((bK, bN), dtype)
            Cf = T.alloc_fragment((bM, bN), "float")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_elementwise_reduce_compiles(arch):
    target = {"kind": "cuda", "arch": arch}
    art = pipeline.build(elementwise_rowsum(1000, 1000), target, compiler="nvcc")
    src = art.get_kernel_source()
    assert src.count("__syncthreads()") == 1  # copy -> parallel read of As
    assert "__shfl_xor_sync" in src
    lowered = pipeline.lower(elementwise_rowsum(1000, 1000), target)
    assert list(lowered.attrs["tl.shared_memory"]["As"]) == [0, 64 * 64 * 2]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_gemm_compiles(arch):
    art = pipeline.build(matmul(1024, 1024, 1024), {"kind": "cuda", "arch": arch}, compiler="nvcc")
    assert "main_kernel" in art.get_kernel_source()


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, load_kernel


@pytest.mark.cuda
def test_elementwise_reduce_gpu():
    torch, load_kernel = _cuda()
    M, N = 1000, 64  # a tail in M; one block column, so S is the full row sum
    fn = load_kernel(pipeline.build(elementwise_rowsum(M, N), {"kind": "cuda"}))
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    s = torch.empty(M, device="cuda", dtype=torch.float32)
    fn(a, b, s)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, a * 2)
    torch.testing.assert_close(s, (a.float() * 2).sum(1), rtol=1e-3, atol=1e-2)


@pytest.mark.cuda
def test_gemm_gpu():
    torch, load_kernel = _cuda()
    M = N = K = 512
    fn = load_kernel(pipeline.build(matmul(M, N, K), {"kind": "cuda"}))
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    fn(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)
