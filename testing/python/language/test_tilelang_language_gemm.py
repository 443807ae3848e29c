"""``T.gemm`` on the CPU target: transposes, input types, ``clear_accum``, non-multiple shapes."""

from __future__ import annotations

import pytest
import torch

import tilelang
import tilelang.language as T

# Relative tolerance of a K-long float32 accumulation of products of rounded inputs.
TOL = {"float32": 1e-5, "float16": 1e-5, "bfloat16": 1e-5}


@tilelang.jit(out_idx=-1, target="cpu")
def matmul(M, N, K, bM, bN, bK, trans_A, trans_B, in_dtype, out_dtype, accum_dtype, stages=2):
    """C = op(A) @ op(B), A stored (K, M) when trans_A, B stored (N, K) when trans_B."""
    A_shape = (K, M) if trans_A else (M, K)
    B_shape = (N, K) if trans_B else (K, N)
    A_tile = (bK, bM) if trans_A else (bM, bK)
    B_tile = (bN, bK) if trans_B else (bK, bN)

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, in_dtype),
        C: T.Tensor((M, N), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared(A_tile, in_dtype)
            Bs = T.alloc_shared(B_tile, in_dtype)
            Cf = T.alloc_fragment((bM, bN), accum_dtype)
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
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


def _ref(a, b, trans_A, trans_B):
    a, b = a.double(), b.double()
    return (a.T if trans_A else a) @ (b.T if trans_B else b)


@pytest.mark.parametrize("trans_A", [False, True])
@pytest.mark.parametrize("trans_B", [False, True])
@pytest.mark.parametrize("in_dtype", ["float16", "bfloat16", "float32"])
def test_gemm_transposes_and_dtypes(randn, trans_A, trans_B, in_dtype):
    M, N, K = 72, 56, 80  # not multiples of the 32x32x32 tile
    a = randn(*((K, M) if trans_A else (M, K)), dtype=in_dtype)
    b = randn(*((N, K) if trans_B else (K, N)), dtype=in_dtype)
    kernel = matmul(M, N, K, 32, 32, 32, trans_A, trans_B, in_dtype, "float32", "float32")
    c = kernel(a, b)
    assert c.dtype == torch.float32 and c.shape == (M, N)
    torch.testing.assert_close(
        c.double(), _ref(a, b, trans_A, trans_B), rtol=TOL[in_dtype], atol=TOL[in_dtype]
    )


@pytest.mark.parametrize(
    "M,N,K,bM,bN,bK",
    [
        (64, 64, 64, 32, 32, 32),
        (33, 47, 61, 16, 16, 16),
        (1, 5, 3, 16, 16, 16),
        (100, 20, 9, 64, 32, 8),
        (128, 96, 200, 64, 64, 64),
    ],
)
def test_gemm_non_multiple_shapes(randn, M, N, K, bM, bN, bK):
    a, b = randn(M, K, dtype="float16"), randn(K, N, dtype="float16")
    kernel = matmul(M, N, K, bM, bN, bK, False, False, "float16", "float32", "float32")
    torch.testing.assert_close(
        kernel(a, b).double(), _ref(a, b, False, False), rtol=1e-5, atol=1e-5
    )


def test_gemm_fp16_output(randn):
    """Accumulate in float32, store float16: one rounding of the exact result."""
    M, N, K = 48, 40, 96
    a, b = randn(M, K, dtype="float16"), randn(K, N, dtype="float16")
    kernel = matmul(M, N, K, 32, 32, 32, False, True, "float16", "float16", "float32")
    c = kernel(a, b.T.contiguous())
    assert c.dtype == torch.float16
    torch.testing.assert_close(c.double(), _ref(a, b, False, False), rtol=1e-3, atol=1e-3)


def test_gemm_fp32_accumulates_beyond_fp16(rng):
    """Sums that overflow float16 stay exact in a float32 accumulator."""
    M, N, K = 16, 16, 64
    a = torch.full((M, K), 512.0, dtype=torch.float16)
    b = torch.from_numpy(rng.integers(1, 8, size=(K, N))).to(torch.float16)
    kernel = matmul(M, N, K, 16, 16, 16, False, False, "float16", "float32", "float32")
    c = kernel(a, b)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=0, atol=0)
    assert c.max().item() > 65504  # beyond the float16 range


@tilelang.jit(out_idx=-1, target="cpu")
def gemm_clear_accum(M, N, K, clear_accum):
    """One K tile; C's fragment starts filled with 7, then gemm(..., clear_accum)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float32"),
        B: T.Tensor((K, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, K), "float32")
            Bs = T.alloc_shared((K, N), "float32")
            Cf = T.alloc_fragment((M, N), "float32")
            T.fill(Cf, 7.0)
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, Cf, clear_accum=clear_accum)
            T.copy(Cf, C)

    return main


@pytest.mark.parametrize("clear_accum", [True, False])
def test_gemm_clear_accum(randn, clear_accum):
    a, b = randn(24, 16), randn(16, 20)
    c = gemm_clear_accum(24, 20, 16, clear_accum)(a, b)
    ref = a.double() @ b.double() + (0.0 if clear_accum else 7.0)
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def gemm_clear_per_step(M, N, K, bK):
    """clear_accum inside the K loop: only the last K tile survives."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float32"),
        B: T.Tensor((K, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, bK), "float32")
            Bs = T.alloc_shared((bK, N), "float32")
            Cf = T.alloc_fragment((M, N), "float32")
            for k in T.serial(K // bK):
                T.copy(A[0, k * bK], As)
                T.copy(B[k * bK, 0], Bs)
                T.gemm(As, Bs, Cf, clear_accum=True)
            T.copy(Cf, C)

    return main


def test_gemm_clear_accum_in_loop(randn):
    a, b = randn(8, 32), randn(32, 12)
    c = gemm_clear_per_step(8, 12, 32, 8)(a, b)
    ref = a[:, 24:].double() @ b[24:].double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def gemm_fragment_A(M, N, K, bM):
    """A taken from a fragment (registers), scaled before the gemm (as in attention's P @ V)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            Af = T.alloc_fragment((bM, K), "float32")
            Ah = T.alloc_fragment((bM, K), "float16")
            Bs = T.alloc_shared((K, N), "float16")
            Cf = T.alloc_fragment((bM, N), "float32")
            T.copy(A[bx * bM, 0], Af)
            for i, j in T.Parallel(bM, K):
                Af[i, j] = Af[i, j] * 2.0
            T.copy(Af, Ah)
            T.copy(B, Bs)
            T.gemm(Ah, Bs, Cf, clear_accum=True)
            T.copy(Cf, C[bx * bM, 0])

    return main


def test_gemm_fragment_operand(randn):
    a, b = randn(40, 16, dtype="float16"), randn(16, 24, dtype="float16")
    c = gemm_fragment_A(40, 24, 16, 16)(a, b)
    torch.testing.assert_close(c.double(), 2 * a.double() @ b.double(), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def gemm_staged_buffers(M, N, K, bK):
    """Manual double buffering: 3-D shared tiles indexed by stage, A[k % 2, :, :] operands."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float32"),
        B: T.Tensor((K, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((2, M, bK), "float32")
            Bs = T.alloc_shared((2, bK, N), "float32")
            Cf = T.alloc_fragment((M, N), "float32")
            T.clear(Cf)
            for k in T.serial(T.ceildiv(K, bK)):
                T.copy(A[0, k * bK], As[k % 2, :, :])
                T.copy(B[k * bK, 0], Bs[k % 2, :, :])
                T.gemm(As[k % 2, :, :], Bs[k % 2, :, :], Cf)
            T.copy(Cf, C)

    return main


def test_gemm_stage_indexed_operands(randn):
    a, b = randn(16, 40), randn(40, 24)
    c = gemm_staged_buffers(16, 24, 40, 16)(a, b)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


@tilelang.jit(out_idx=-1, target="cpu")
def gemm_subregions():
    """Operands and accumulator given as slices of larger tiles."""

    @T.prim_func
    def main(
        A: T.Tensor((32, 16), "float32"),
        B: T.Tensor((16, 32), "float32"),
        C: T.Tensor((32, 32), "float32"),
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((32, 16), "float32")
            Bs = T.alloc_shared((16, 32), "float32")
            Cf = T.alloc_fragment((32, 32), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.clear(Cf)
            T.gemm(As[0:16, :], Bs[:, 16:32], Cf[16:32, 0:16])
            T.gemm(As[16:32, 0:8], Bs[0:16, 0:16], Cf[0:8, 16:32], transpose_A=True)
            T.copy(Cf, C)

    return main


def test_gemm_on_subregions(randn):
    a, b = randn(32, 16), randn(16, 32)
    ad, bd = a.double(), b.double()
    ref = torch.zeros(32, 32, dtype=torch.float64)
    ref[16:, :16] = ad[:16] @ bd[:, 16:]
    ref[:8, 16:] = ad[16:, :8].T @ bd[:, :16]
    torch.testing.assert_close(gemm_subregions()(a, b).double(), ref, rtol=1e-5, atol=1e-5)
