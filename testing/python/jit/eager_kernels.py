"""Eager-form ``@tilelang.jit`` kernels shared by the eager tests (CPU and GPU)."""

import tilelang
import tilelang.language as T


def make_matmul_relu(**jit_options):
    """README's lead example, under ``@tilelang.jit(**jit_options)``."""

    @tilelang.jit(**jit_options)
    def matmul_relu(A, B, block_M: int = 128, block_N: int = 128, block_K: int = 32):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), T.float16)
        B: T.Tensor((K, N), T.float16)
        C = T.empty((M, N), T.float16)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), T.float16)
            B_shared = T.alloc_shared((block_K, block_N), T.float16)
            C_local = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[ko * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])
        return C

    return matmul_relu


def make_axpy_pair(**jit_options):
    """Two outputs (returned in the order W, Z, declared Z, W) and a run-time scalar."""

    @tilelang.jit(**jit_options)
    def axpy_pair(X, Y, alpha, block: int = 64):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y: T.Tensor((N,), T.float32)
        alpha: T.float32
        Z = T.empty((N,), T.float32)
        W = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Z[bx * block + i] = alpha * X[bx * block + i] + Y[bx * block + i]
                    W[bx * block + i] = X[bx * block + i] - Y[bx * block + i]
        return W, Z

    return axpy_pair


def make_scale_rows(**jit_options):
    """A ``T.dynamic`` row count (one kernel for every size) and a ``T.const`` width."""

    @tilelang.jit(**jit_options)
    def scale_rows(A, factor: float = 2.0, block: int = 16):
        m = T.dynamic("m")
        N = T.const("N")
        A: T.Tensor((m, N), T.float32)
        B = T.empty((m, N), T.float32)
        with T.Kernel(T.ceildiv(m, block), threads=32) as bx:
            for i, j in T.Parallel(block, N):
                if bx * block + i < m:
                    B[bx * block + i, j] = A[bx * block + i, j] * factor
        return B

    return scale_rows
