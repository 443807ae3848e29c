"""``T.copy`` on the CPU target: every region form, every scope pair, element-type casts."""

from __future__ import annotations

import pytest
import torch

import tilelang
import tilelang.language as T

# Rounding error of one cast to each element type (relative), for comparisons in float64.
RTOL = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}


def _close(out, ref, dtype):
    torch.testing.assert_close(out.double(), ref.double(), rtol=RTOL[dtype], atol=RTOL[dtype])


# -- 2-D tiles ---------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def copy_tile_start(M, N, bM, bN, dtype="float32"):
    """Tile start ``A[i, j]``: the extent comes from the shared tile (tails guarded)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            T.copy(A[by * bM, bx * bN], S)
            T.copy(S, B[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("M,N,bM,bN", [(64, 64, 32, 32), (50, 37, 16, 32), (7, 5, 8, 8)])
def test_copy_tile_start(randn, M, N, bM, bN):
    a = randn(M, N)
    torch.testing.assert_close(copy_tile_start(M, N, bM, bN)(a), a, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_slices(M, N, bM):
    """Slices ``A[a:b, c:d]`` with run-time begins; ``:`` for whole dimensions."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M // bM, threads=32) as bx:
            S = T.alloc_shared((bM, N), "float32")
            T.copy(A[bx * bM : (bx + 1) * bM, :], S)
            T.copy(S, B[bx * bM : bx * bM + bM, 0:N])

    return main


def test_copy_slices(randn):
    a = randn(96, 40)
    torch.testing.assert_close(copy_slices(96, 40, 32)(a), a, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_transpose_slices(M, N):
    """Copy between slices of different positions: B = A with its two halves swapped."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((M, N), "float32")
            T.copy(A[:, 0 : N // 2], S[:, N // 2 : N])
            T.copy(A[:, N // 2 : N], S[:, 0 : N // 2])
            T.copy(S, B)

    return main


def test_copy_slice_to_slice(randn):
    a = randn(6, 10)
    ref = torch.cat([a[:, 5:], a[:, :5]], dim=1)
    torch.testing.assert_close(copy_transpose_slices(6, 10)(a), ref, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_whole(M, N):
    """Whole buffers on both sides."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, N), "float32")
            F = T.alloc_fragment((M, N), "float32")
            T.copy(A, S)
            T.copy(S, F)
            T.copy(F, B)

    return main


def test_copy_whole_buffers(randn):
    a = randn(33, 17)
    torch.testing.assert_close(copy_whole(33, 17)(a), a, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_row_into_2d(M, N):
    """A 1-D tile copied to a row of a 2-D tensor by its start ``B[i, 0]`` (rank alignment)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as bx:
            row = T.alloc_fragment((N,), "float32")
            T.copy(A[bx, :], row)
            for j in T.Parallel(N):
                row[j] = row[j] * 2.0
            T.copy(row, B[bx, 0])

    return main


def test_copy_1d_tile_to_row(randn):
    a = randn(5, 24)
    torch.testing.assert_close(copy_row_into_2d(5, 24)(a), a * 2, rtol=0, atol=0)


# -- 1-D, 3-D, 4-D -------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def copy_1d(N, block):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            S = T.alloc_shared((block,), "float32")
            T.copy(A[bx * block : (bx + 1) * block], S)
            for i in T.Parallel(block):
                S[i] = S[i] + 1.0
            T.copy(S, B[bx * block])

    return main


@pytest.mark.parametrize("N,block", [(128, 32), (100, 32)])
def test_copy_1d(randn, N, block):
    a = randn(N)
    torch.testing.assert_close(copy_1d(N, block)(a), a + 1, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_3d(B_, H, D, bD):
    """3-D: one (H, bD) tile per (batch, column block), with ``:`` over H."""

    @T.prim_func
    def main(X: T.Tensor((B_, H, D), "float32"), Y: T.Tensor((B_, H, D), "float32")):
        with T.Kernel(T.ceildiv(D, bD), B_, threads=32) as (bx, bz):
            S = T.alloc_shared((H, bD), "float32")
            T.copy(X[bz, :, bx * bD : (bx + 1) * bD], S)
            T.copy(S, Y[bz, 0, bx * bD])

    return main


@pytest.mark.parametrize("D", [16, 13])
def test_copy_3d(randn, D):
    x = randn(3, 5, D)
    torch.testing.assert_close(copy_3d(3, 5, D, 8)(x), x, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_4d(B_, S_, H, D, bS):
    """4-D (batch, seq, heads, dim): a (bS, D) tile of one head, as in attention kernels."""

    @T.prim_func
    def main(Q: T.Tensor((B_, S_, H, D), "float16"), O: T.Tensor((B_, S_, H, D), "float16")):
        with T.Kernel(T.ceildiv(S_, bS), H, B_, threads=64) as (bx, by, bz):
            Qs = T.alloc_shared((bS, D), "float16")
            Qf = T.alloc_fragment((bS, D), "float32")
            T.copy(Q[bz, bx * bS : (bx + 1) * bS, by, :], Qs)
            T.copy(Qs, Qf)
            for i, j in T.Parallel(bS, D):
                Qf[i, j] = Qf[i, j] * 0.5
            T.copy(Qf, O[bz, bx * bS : (bx + 1) * bS, by, :])

    return main


@pytest.mark.parametrize("S_", [32, 20])
def test_copy_4d(randn, S_):
    q = randn(2, S_, 3, 8, dtype="float16")
    out = copy_4d(2, S_, 3, 8, 16)(q)
    _close(out, q.double() * 0.5, "float16")


@tilelang.jit(out_idx=-1, target="cpu")
def copy_4d_full_tile(B_, H, S_, D):
    """4-D tile start with a 4-D shared tile (no unit dimensions dropped)."""

    @T.prim_func
    def main(X: T.Tensor((B_, H, S_, D), "float32"), Y: T.Tensor((B_, H, S_, D), "float32")):
        with T.Kernel(B_, threads=32) as b:
            S = T.alloc_shared((1, H, S_, D), "float32")
            T.copy(X[b, 0, 0, 0], S)
            T.copy(S, Y[b : b + 1, :, :, :])

    return main


def test_copy_4d_full_tile(randn):
    x = randn(2, 3, 4, 5)
    torch.testing.assert_close(copy_4d_full_tile(2, 3, 4, 5)(x), x, rtol=0, atol=0)


# -- scopes and casts -------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def copy_chain(M, N, bM, bN, in_dtype, frag_dtype, out_dtype):
    """global -> shared -> fragment -> global, converting element types on the way."""

    @T.prim_func
    def main(A: T.Tensor((M, N), in_dtype), B: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), in_dtype)
            F = T.alloc_fragment((bM, bN), frag_dtype)
            T.copy(A[by * bM, bx * bN], S)
            T.copy(S, F)
            T.copy(F, B[by * bM, bx * bN])

    return main


@pytest.mark.parametrize(
    "in_dtype,frag_dtype,out_dtype",
    [
        ("float16", "float32", "float32"),
        ("bfloat16", "float32", "float32"),
        ("float32", "float32", "float16"),
        ("float32", "float32", "bfloat16"),
        ("float16", "float32", "bfloat16"),
        ("bfloat16", "float16", "float32"),
        ("float32", "float16", "float32"),
    ],
)
def test_copy_chain_casts(randn, in_dtype, frag_dtype, out_dtype):
    a = randn(40, 24, dtype=in_dtype)
    out = copy_chain(40, 24, 16, 16, in_dtype, frag_dtype, out_dtype)(a)
    assert out.dtype == getattr(torch, out_dtype)
    ref = a.to(getattr(torch, frag_dtype)).to(getattr(torch, out_dtype))
    # Each conversion must round as torch does (round to nearest even).
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_fragment_into_shared_slice(M, N):
    """Fragment -> part of a shared tile -> global (sub-tile destinations)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((2 * M, N), "float32")):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M, N), "float32")
            S = T.alloc_shared((2 * M, N), "float32")
            T.fill(S, -1.0)
            T.copy(A, F)
            T.copy(F, S[M : 2 * M, :])
            T.copy(S, B)

    return main


def test_copy_into_shared_subtile(randn):
    a = randn(4, 6)
    out = copy_fragment_into_shared_slice(4, 6)(a)
    torch.testing.assert_close(out[4:], a, rtol=0, atol=0)
    assert torch.all(out[:4] == -1)


@tilelang.jit(out_idx=-1, target="cpu")
def copy_columns(B_, H, D):
    """A column ``X[b, 0:H, d]`` (unit dims on both sides) into a 1-D tile, then into a row
    of Y given by its start ``Y[b, d, 0]``: a per-batch transpose."""

    @T.prim_func
    def main(X: T.Tensor((B_, H, D), "float32"), Y: T.Tensor((B_, D, H), "float32")):
        with T.Kernel(B_, threads=1) as b:
            col = T.alloc_fragment((H,), "float32")
            for d in T.serial(D):
                T.copy(X[b, 0:H, d], col)
                T.copy(col, Y[b, d, 0])

    return main


def test_copy_column_through_1d_tile(randn):
    x = randn(2, 6, 5)
    assert torch.equal(copy_columns(2, 6, 5)(x), x.transpose(1, 2).contiguous())


@tilelang.jit(out_idx=-1, target="cpu")
def copy_row_start_to_1d(M, N):
    """Tile start of a 2-D tensor ``A[i, 0]`` into a 1-D tile takes the extent (1, N)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=1) as i:
            row = T.alloc_fragment((N,), "float32")
            T.copy(A[i, 0], row)
            T.copy(row, B[M - 1 - i, 0])

    return main


def test_copy_row_start_to_1d(randn):
    a = randn(4, 7)
    assert torch.equal(copy_row_start_to_1d(4, 7)(a), a.flip(0))


@tilelang.jit(target="cpu")
def stencil_halo(N, block):
    """Tiles with a one-element halo: the first block starts at -1 (reads zero before the
    start, and past the end of the last block)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=1) as bx:
            S = T.alloc_shared((block + 2,), "float32")
            T.copy(A[bx * block - 1], S)
            for i in T.Parallel(block):
                B[bx * block + i] = S[i] + S[i + 1] + S[i + 2]

    return main


@pytest.mark.parametrize("N", [12, 10])
def test_copy_negative_start_halo(randn, N):
    a, b = randn(N), torch.zeros(N)
    stencil_halo(N, 4)(a, b)
    ref = torch.nn.functional.pad(a.double(), (1, 1)).unfold(0, 3, 1).sum(1)
    torch.testing.assert_close(b.double(), ref, rtol=1e-6, atol=1e-6)
