"""Kernel parameters on the CPU target: scalars, ``T.dynamic`` dims, ``T.StridedTensor``.

This file deliberately has no ``from __future__ import annotations``: parameter
annotations are evaluated eagerly here (the other test files cover string annotations).
"""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def make_scaled_add(N, block):
    """Factory whose M-like sizes appear only in annotations and grid (not as closure cells)."""

    @T.prim_func
    def main(
        A: T.Tensor((N,), "float32"),
        B: T.Tensor((N,), "float32"),
        alpha: T.float32,
        n: T.int32,
    ):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i] = A[bx * block + i] * alpha

    return main


def test_scalar_params(randn):
    """Scalar float/int parameters; n < N limits the writes at run time."""
    kernel = tilelang.compile(make_scaled_add(100, 32), target="cpu")
    a = randn(100)
    for alpha, n in [(2.5, 100), (-1.0, 37), (0.0, 0)]:
        b = torch.full((100,), 9.0)
        kernel(a, b, alpha, n)
        ref = torch.full((100,), 9.0, dtype=torch.float64)
        ref[:n] = a[:n].double() * alpha
        torch.testing.assert_close(b.double(), ref, rtol=1e-6, atol=1e-6)


def test_annotation_only_names():
    """Sizes used only in annotations are taken from the enclosing scope."""

    def factory(M, K, dtype):
        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor((M, K), dtype)):
            with T.Kernel(1, threads=1):
                T.copy(A, B)

        return main

    kernel = tilelang.compile(factory(3, 5, "float16"), out_idx=-1, target="cpu")
    a = torch.randn(3, 5).half()
    assert torch.equal(kernel(a), a)


@tilelang.jit(out_idx=-1, target="cpu")
def dynamic_scale(block):
    """A dynamic length: one compiled kernel for every N."""
    N = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                B[bx * block + i] = A[bx * block + i] * 3.0 + 1.0

    return main


@pytest.mark.parametrize("N", [1, 31, 32, 100])
def test_dynamic_length(randn, N):
    a = randn(N)
    out = dynamic_scale(32)(a)
    assert out.shape == (N,)
    torch.testing.assert_close(out.double(), a.double() * 3 + 1, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def dynamic_rows(N, bM):
    """Dynamic M with static N, tiles copied with T.copy (tails guarded), output shape (M, N)."""
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=32) as bx:
            F = T.alloc_fragment((bM, N), "float32")
            T.copy(A[bx * bM, 0], F)
            for i, j in T.Parallel(bM, N):
                F[i, j] = F[i, j] - (bx * bM + i)
            T.copy(F, B[bx * bM, 0])

    return main


def test_dynamic_rows_several_sizes(randn):
    kernel = dynamic_rows(6, 8)
    for M in (5, 8, 29):
        a = randn(M, 6)
        ref = a.double() - torch.arange(M, dtype=torch.float64)[:, None]
        torch.testing.assert_close(kernel(a).double(), ref, rtol=1e-6, atol=1e-6)
    assert dynamic_rows(6, 8) is kernel  # one kernel for every M


@tilelang.jit(out_idx=-1, target="cpu")
def dynamic_2d(bM, bN):
    """Two dynamic dims shared by input and output."""
    M, N = T.dynamic("m"), T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=32) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                B[bx * bN + j, by * bM + i] = A[by * bM + i, bx * bN + j]

    return main


@pytest.mark.parametrize("M,N", [(16, 16), (13, 7), (1, 40)])
def test_dynamic_transpose(randn, M, N):
    a = randn(M, N)
    assert torch.equal(dynamic_2d(8, 8)(a), a.T.contiguous())


@tilelang.jit(out_idx=-1, target="cpu")
def strided_rows(M, N, row_stride):
    """A strided input view (row stride > N): reads follow the declared strides."""

    @T.prim_func
    def main(
        A: T.StridedTensor((M, N), (row_stride, 1), "float32"), B: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((M, N), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(M, N):
                B[i, j] = S[i, j] + 1.0

    return main


def test_strided_tensor(randn):
    base = randn(6, 12)
    view = base[:, 2:9]  # (6, 7) with row stride 12
    assert not view.is_contiguous()
    out = strided_rows(6, 7, 12)(view)
    torch.testing.assert_close(out.double(), view.double() + 1, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def strided_columns(M, N):
    """A transposed view: strides (1, M)."""

    @T.prim_func
    def main(A: T.StridedTensor((N, M), (1, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=32):
            for i, j in T.Parallel(N, M):
                B[i, j] = A[i, j] * 2.0

    return main


def test_strided_transposed_view(randn):
    base = randn(5, 8)  # (M, N) contiguous
    view = base.T  # (8, 5) with strides (1, 8)
    out = strided_columns(5, 8)(view)
    torch.testing.assert_close(out.double(), view.double() * 2, rtol=1e-6, atol=1e-6)


def test_scalar_param_in_shape_logic(rng):
    """A scalar int parameter as a loop bound and in index arithmetic."""

    @T.prim_func
    def main(
        A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32"), start: T.int32, count: T.int32
    ):
        with T.Kernel(1, threads=1):
            for i in T.serial(count):
                B[i] = A[start + i] * 2

    kernel = tilelang.compile(main, target="cpu")
    a = torch.from_numpy(rng.integers(-50, 50, size=64).astype(np.int32))
    b = torch.zeros(64, dtype=torch.int32)
    kernel(a, b, 10, 20)
    ref = torch.zeros(64, dtype=torch.int32)
    ref[:20] = a[10:30] * 2
    assert torch.equal(b, ref)


@tilelang.jit(out_idx=-1, target="cpu")
def reshaped_views(M, N):
    """``T.Tensor(shape, dtype, A.data)``: a 1-D view of a 2-D input and a 2-D view of a
    1-D output (upstream's flat-view idiom)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M * N,), "float32")):
        with T.Kernel(1, threads=32):
            A_flat = T.Tensor((M * N,), "float32", A.data)
            B_2d = T.Tensor((N, M), "float32", B.data)
            for i in T.Parallel(M * N):
                B[i] = A_flat[i] * 2.0
            for i, j in T.Parallel(N, M):
                B_2d[i, j] = B_2d[i, j] + 1.0

    return main


def test_tensor_views_of_parameters(randn):
    a = randn(3, 5)
    out = reshaped_views(3, 5)(a)
    torch.testing.assert_close(out, a.reshape(-1) * 2 + 1, rtol=0, atol=0)


def test_tensor_positional_strides_rejected():
    with pytest.raises(TypeError, match="strides="):
        T.Tensor((4, 4), "float32", (4, 1))
