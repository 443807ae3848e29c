"""FP8 GEMM (upstream's ``examples/gemm_fp8``), in the eager ``@tilelang.jit`` form.

``C = A @ B.T`` with float8 operands (e4m3fn or e5m2) staged through shared memory and
accumulated in float32. ``two_acc=True`` is upstream's "2xAcc" variant: the tensor-core
accumulator is promoted into a second float32 fragment every ``128 // block_K``
k-steps (fp8 wgmma accumulates in reduced precision on Hopper), and the result is
stored through shared memory.
"""

import argparse

import torch

import tilelang
import tilelang.language as T
from tilelang.language.fp8 import determine_fp8_type


@tilelang.jit
def matmul(A, B, block_M, block_N, block_K, dtype, out_dtype, two_acc=False, accum_dtype=T.float32):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((N, K), dtype)
    C = T.empty((M, N), out_dtype)

    update_interval = 128 // block_K if block_K < 128 else 1

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_N, block_K), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)

        T.clear(C_local)
        if two_acc:
            C_accum = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared = T.alloc_shared((block_M, block_N), out_dtype)
            T.clear(C_accum)
            k_iters = T.ceildiv(K, block_K)
            for k in T.Pipelined(k_iters, num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                if (k + 1) % update_interval == 0:
                    for i, j in T.Parallel(block_M, block_N):
                        C_accum[i, j] += C_local[i, j]
                    T.clear(C_local)
            if k_iters % update_interval != 0:
                for i, j in T.Parallel(block_M, block_N):
                    C_accum[i, j] += C_local[i, j]
            T.copy(C_accum, C_shared)
            T.copy(C_shared, C[by * block_M, bx * block_N])
        else:
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return C


def calc_diff(x, y):
    """1 - cosine similarity of two tensors, in float64 (upstream's check)."""
    x, y = x.double(), y.double()
    return 1 - 2 * (x * y).sum() / (x * x + y * y).sum()


def run(M, N, K, dtype=None, two_acc=False, block=(128, 128, 64), device=None):
    """One fp8 GEMM against a float64 torch reference; returns (C, reference)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or determine_fp8_type()
    torch_dtype = T.dtype(dtype).as_torch()
    a = (100 * (2 * torch.rand(M, K, device=device) - 1)).to(torch_dtype)
    b = (100 * (2 * torch.rand(N, K, device=device) - 1)).to(torch_dtype)
    c = matmul(a, b, *block, dtype, T.float32, two_acc)
    ref = a.double() @ b.double().T
    diff = calc_diff(c, ref)
    assert diff < 1e-3, f"fp8 gemm {dtype}: diff {diff}"
    return c, ref


def main(M=1024, N=1024, K=8192):
    for two_acc in (False, True):
        run(M, N, K, two_acc=two_acc)
        print(f"fp8 gemm {M}x{N}x{K} two_acc={two_acc}: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=8192)
    args = parser.parse_args()
    main(args.m, args.n, args.k)
