"""Small kernels for the ROCm and Metal backend tests (gemm variants, reductions, bad ops)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tilelang
import tilelang.language as T

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8, "float32": np.float32,
      "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz}  # fmt: skip


def random_operand(rng, shape, dtype):
    """Fresh random values of ``dtype`` (small integers for int8, normals otherwise)."""
    if dtype == "int8":
        return rng.integers(-8, 8, size=shape).astype(np.int8)
    return rng.standard_normal(shape).astype(NP[dtype])


def check_matmul(run, rng, m, n, k, trans_a, trans_b, in_dtype, acc):
    """Run ``run(a, b, c) -> c`` on random operands of :func:`matmul`'s shapes and compare C
    with the float64 product (exactly for int32 accumulators)."""
    a = random_operand(rng, (k, m) if trans_a else (m, k), in_dtype)
    b = random_operand(rng, (n, k) if trans_b else (k, n), in_dtype)
    c = run(a, b, np.zeros((m, n), np.int32 if acc == "int32" else NP[acc]))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = (a64.T if trans_a else a64) @ (b64.T if trans_b else b64)
    if acc == "int32":
        np.testing.assert_array_equal(c, ref.astype(np.int32))
    else:
        np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@tilelang.jit(out_idx=-1)
def matmul(M, N, K, bM=64, bN=64, bK=32, trans_A=False, trans_B=False, in_dtype="float16",
           accum_dtype="float32", out_dtype="float32", threads=128, num_stages=2):  # fmt: skip
    """C = op(A) @ op(B); A stored (K, M) when trans_A, B stored (N, K) when trans_B; the k
    loop is ``T.Pipelined(..., num_stages=num_stages)``."""
    A_shape, A_tile = ((K, M), (bK, bM)) if trans_A else ((M, K), (bM, bK))
    B_shape, B_tile = ((N, K), (bN, bK)) if trans_B else ((K, N), (bK, bN))

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, in_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            As = T.alloc_shared(A_tile, in_dtype)
            Bs = T.alloc_shared(B_tile, in_dtype)
            Cf = T.alloc_fragment((bM, bN), accum_dtype)
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=num_stages):
                if trans_A:
                    T.copy(A[k * bK, by * bM], As)
                else:
                    T.copy(A[by * bM, k * bK], As)
                if trans_B:
                    T.copy(B[bx * bN, k * bK], Bs)
                else:
                    T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf, transpose_A=trans_A, transpose_B=trans_B)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


@tilelang.jit(out_idx=-1)
def row_reduce(M, N, kind="sum", bM=4, threads=256, dtype="float32"):
    """out[i] = reduce_kind(X[i, :]) with one block row of ``bM`` rows over ``threads`` threads."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), out: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            xf = T.alloc_fragment((bM, N), dtype)
            r = T.alloc_fragment((bM,), dtype)
            T.copy(X[bx * bM, 0], xf)
            if kind == "sum":
                T.reduce_sum(xf, r, dim=1)
            elif kind == "max":
                T.reduce_max(xf, r, dim=1)
            else:
                T.reduce_min(xf, r, dim=1)
            T.copy(r, out[bx * bM])

    return main


@tilelang.jit(out_idx=-1)
def printing(N):
    """A copy with a ``T.print`` (no Metal rule)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(N):
                B[i] = A[i]
            T.print(bx)

    return main


@tilelang.jit(out_idx=-1)
def double_add(N):
    """float64 elementwise (MSL has no double)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float64"), B: T.Tensor((N,), "float64")):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + 1.0

    return main


@tilelang.jit(out_idx=-1)
def two_kernels(N):
    """Two ``T.Kernel`` blocks launched in order: B = A + 1, then C = 2 B."""

    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")
    ):
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + 1.0
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                C[bx * 64 + i] = B[bx * 64 + i] * 2.0

    return main
