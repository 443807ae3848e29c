"""Whole kernels on the CPU target, upstream-TileLang style: softmax, layernorm, row
reductions, elementwise add with tails, a dynamic-M GEMM and an atomic histogram."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


# -- elementwise ---------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def elementwise_add(M, N, bM, bN, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                C[by * bM + i, bx * bN + j] = (
                    A[by * bM + i, bx * bN + j] + B[by * bM + i, bx * bN + j]
                )

    return main


@pytest.mark.parametrize("M,N", [(128, 128), (100, 33), (1, 257)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_elementwise_add_tails(randn, M, N, dtype):
    a, b = randn(M, N, dtype=dtype), randn(M, N, dtype=dtype)
    c = elementwise_add(M, N, 32, 64, dtype)(a, b)
    assert c.dtype == a.dtype
    torch.testing.assert_close(c, (a.double() + b.double()).to(a.dtype), rtol=0, atol=0)


# -- softmax -----------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def softmax_rows(M, N, bM):
    """Whole-row softmax: reduce_max, exp, reduce_sum, divide."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            mx = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((bM,), "float32")
            T.copy(X[bx * bM, 0], x)
            T.reduce_max(x, mx, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = T.exp(x[i, j] - mx[i])
            T.reduce_sum(x, s, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] / s[i]
            T.copy(x, Y[bx * bM, 0])

    return main


@pytest.mark.parametrize("M,N", [(64, 64), (37, 100)])
def test_softmax(randn, M, N):
    x = randn(M, N, scale=3.0)
    ref = torch.softmax(x.double(), dim=1)
    torch.testing.assert_close(softmax_rows(M, N, 16)(x).double(), ref, rtol=1e-5, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def softmax_online(M, N, bM, bN, dtype="float16"):
    """Online softmax over column blocks: running max and rescaled running sum, then a
    second pass that normalises (columns past N are masked with -inf)."""
    scale = 1.44269504  # log2(e)

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, bN), "float32")
            m = T.alloc_fragment((bM,), "float32")
            m_prev = T.alloc_fragment((bM,), "float32")
            blk_max = T.alloc_fragment((bM,), "float32")
            blk_sum = T.alloc_fragment((bM,), "float32")
            l = T.alloc_fragment((bM,), "float32")
            T.fill(m, -T.infinity("float32"))
            T.clear(l)
            for k in T.Pipelined(T.ceildiv(N, bN), num_stages=2):
                T.copy(X[bx * bM, k * bN], x)
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.if_then_else(k * bN + j < N, x[i, j], -T.infinity("float32"))
                T.copy(m, m_prev)
                T.reduce_max(x, blk_max, dim=1)
                for i in T.Parallel(bM):
                    m[i] = T.max(m_prev[i], blk_max[i])
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.exp2((x[i, j] - m[i]) * scale)
                T.reduce_sum(x, blk_sum, dim=1)
                for i in T.Parallel(bM):
                    l[i] = l[i] * T.exp2((m_prev[i] - m[i]) * scale) + blk_sum[i]
            for k in T.serial(T.ceildiv(N, bN)):
                T.copy(X[bx * bM, k * bN], x)
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.exp2((x[i, j] - m[i]) * scale) / l[i]
                T.copy(x, Y[bx * bM, k * bN])

    return main


@pytest.mark.parametrize("M,N", [(32, 128), (20, 90)])
def test_softmax_online(randn, M, N):
    x = randn(M, N, dtype="float16", scale=4.0)
    ref = torch.softmax(x.double(), dim=1)
    out = softmax_online(M, N, 8, 32)(x)
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-3)


# -- layernorm -----------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def layernorm(M, N, bM, eps=1e-5):
    @T.prim_func
    def main(
        X: T.Tensor((M, N), "float32"),
        W: T.Tensor((N,), "float32"),
        B: T.Tensor((N,), "float32"),
        Y: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, N), "float32")
            sq = T.alloc_fragment((bM, N), "float32")
            mean = T.alloc_fragment((bM,), "float32")
            var = T.alloc_fragment((bM,), "float32")
            w = T.alloc_shared((N,), "float32")
            b = T.alloc_shared((N,), "float32")
            T.copy(W, w)
            T.copy(B, b)
            T.copy(X[bx * bM, 0], x)
            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(bM):
                mean[i] = mean[i] / N
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] - mean[i]
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, var, dim=1)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] * T.rsqrt(var[i] / N + eps) * w[j] + b[j]
            T.copy(x, Y[bx * bM, 0])

    return main


@pytest.mark.parametrize("M,N", [(32, 64), (45, 48)])
def test_layernorm(randn, M, N):
    x, w, b = randn(M, N, scale=2.0), randn(N), randn(N)
    ref = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double(), eps=1e-5)
    torch.testing.assert_close(layernorm(M, N, 16)(x, w, b).double(), ref, rtol=1e-4, atol=1e-5)


# -- row reductions ----------------------------------------------------------------------
@tilelang.jit(out_idx=[1, 2, 3], target="cpu")
def row_stats(M, N, bM, bN):
    """Row sum, max and absmax over column blocks (clear=False accumulates across blocks)."""

    @T.prim_func
    def main(
        X: T.Tensor((M, N), "float32"),
        Sum: T.Tensor((M,), "float32"),
        Max: T.Tensor((M,), "float32"),
        AbsMax: T.Tensor((M,), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, bN), "float32")
            s = T.alloc_fragment((bM,), "float32")
            mx = T.alloc_fragment((bM,), "float32")
            amx = T.alloc_fragment((bM,), "float32")
            T.clear(s)
            T.fill(mx, -T.infinity("float32"))
            T.clear(amx)
            for k in T.serial(T.ceildiv(N, bN)):
                T.copy(X[bx * bM, k * bN], x)
                T.reduce_sum(x, s, dim=1, clear=False)
                T.reduce_absmax(x, amx, dim=1, clear=False)
                for i, j in T.Parallel(bM, bN):
                    x[i, j] = T.if_then_else(k * bN + j < N, x[i, j], -T.infinity("float32"))
                T.reduce_max(x, mx, dim=1, clear=False)
            T.copy(s, Sum[bx * bM])
            T.copy(mx, Max[bx * bM])
            T.copy(amx, AbsMax[bx * bM])

    return main


@pytest.mark.parametrize("M,N", [(64, 128), (30, 75)])
def test_row_reductions(randn, M, N):
    x = randn(M, N)
    s, mx, amx = row_stats(M, N, 16, 32)(x)
    xd = x.double()
    torch.testing.assert_close(s.double(), xd.sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mx.double(), xd.amax(1))
    torch.testing.assert_close(amx.double(), xd.abs().amax(1))


# -- dynamic-M GEMM --------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def matmul_dynamic_m(N, K, bM, bN, bK, dtype="float16", accum="float32"):
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), dtype)
            Bs = T.alloc_shared((bK, bN), dtype)
            Cf = T.alloc_fragment((bM, bN), accum)
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


def test_gemm_dynamic_m(randn):
    N, K = 48, 72
    kernel = matmul_dynamic_m(N, K, 32, 32, 32)
    b = randn(K, N, dtype="float16")
    for M in (1, 32, 77, 128):
        a = randn(M, K, dtype="float16")
        c = kernel(a, b)
        assert c.shape == (M, N) and c.dtype == torch.float16
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=2e-3, atol=2e-3)
    assert matmul_dynamic_m(N, K, 32, 32, 32) is kernel


# -- histogram ---------------------------------------------------------------------------
@tilelang.jit(target="cpu")
def histogram_shared(N, bins, block):
    """Per-block histogram in shared memory, then one tile atomic_add into the global one."""

    @T.prim_func
    def main(Vals: T.Tensor((N,), "int32"), Hist: T.Tensor((bins,), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            local = T.alloc_shared((bins,), "int32")
            T.clear(local)
            for i in T.serial(block):
                if bx * block + i < N:
                    local[Vals[bx * block + i]] += 1
            T.atomic_add(Hist[0:bins], local)

    return main


@pytest.mark.parametrize("N", [4096, 1111])
def test_histogram(rng, N):
    bins = 32
    vals = rng.integers(0, bins, size=N).astype(np.int32)
    hist = torch.zeros(bins, dtype=torch.int32)
    histogram_shared(N, bins, 128)(torch.from_numpy(vals), hist)
    assert hist.tolist() == np.bincount(vals, minlength=bins).tolist()


# -- split-K GEMM ------------------------------------------------------------------------
@tilelang.jit(target="cpu")
def matmul_split_k(M, N, K, bM, bN, bK, split):
    """Each z-block multiplies one K slice and atomically adds its C tile (tails skipped)."""
    k_per = K // split

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), split, threads=128) as (bx, by, bz):
            As = T.alloc_shared((bM, bK), "float16")
            Bs = T.alloc_shared((bK, bN), "float16")
            Cf = T.alloc_fragment((bM, bN), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(k_per, bK), num_stages=2):
                T.copy(A[by * bM, bz * k_per + k * bK], As)
                T.copy(B[bz * k_per + k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            for i, j in T.Parallel(bM, bN):
                Cf[i, j] += 1.0  # nonzero even in the tail rows: out-of-bounds adds would show
            T.atomic_add(C[by * bM, bx * bN], Cf)

    return main


@pytest.mark.parametrize("M,N", [(64, 64), (50, 40)])
def test_gemm_split_k_atomic(randn, M, N):
    K, split = 96, 3
    a, b = randn(M, K, dtype="float16"), randn(K, N, dtype="float16")
    storage = torch.full((M + 16, N), 5.0)  # rows after C hold a sentinel
    c = storage[:M]
    c.zero_()
    matmul_split_k(M, N, K, 32, 32, 16, split)(a, b, c)
    ref = a.double() @ b.double() + split
    torch.testing.assert_close(c.double(), ref, rtol=1e-5, atol=1e-4)
    assert torch.all(storage[M:] == 5.0), "atomic_add wrote past the end of C"


# -- attention ---------------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def attention(B_, H, S, D, bM, bN, is_causal):
    """FlashAttention forward (BSHD): Q K^T by gemm(transpose_B), online softmax, P V."""
    scale = (1.0 / D) ** 0.5 * 1.44269504  # log2(e) / sqrt(D)

    @T.prim_func
    def main(
        Q: T.Tensor((B_, S, H, D), "float16"),
        K: T.Tensor((B_, S, H, D), "float16"),
        V: T.Tensor((B_, S, H, D), "float16"),
        O: T.Tensor((B_, S, H, D), "float16"),
    ):
        with T.Kernel(T.ceildiv(S, bM), H, B_, threads=128) as (bx, by, bz):
            Qs = T.alloc_shared((bM, D), "float16")
            Ks = T.alloc_shared((bN, D), "float16")
            Vs = T.alloc_shared((bN, D), "float16")
            acc_s = T.alloc_fragment((bM, bN), "float32")
            acc_p = T.alloc_fragment((bM, bN), "float16")
            acc_o = T.alloc_fragment((bM, D), "float32")
            m = T.alloc_fragment((bM,), "float32")
            m_prev = T.alloc_fragment((bM,), "float32")
            rescale = T.alloc_fragment((bM,), "float32")
            row_sum = T.alloc_fragment((bM,), "float32")
            l = T.alloc_fragment((bM,), "float32")
            T.copy(Q[bz, bx * bM : (bx + 1) * bM, by, :], Qs)
            T.clear(acc_o)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            loop_end = (
                T.min(T.ceildiv(S, bN), T.ceildiv((bx + 1) * bM, bN))
                if is_causal
                else T.ceildiv(S, bN)
            )
            for k in T.Pipelined(loop_end, num_stages=1):
                T.copy(K[bz, k * bN : (k + 1) * bN, by, :], Ks)
                for i, j in T.Parallel(bM, bN):
                    if is_causal:
                        acc_s[i, j] = T.if_then_else(
                            bx * bM + i >= k * bN + j, 0, -T.infinity("float32")
                        )
                    else:
                        acc_s[i, j] = T.if_then_else(k * bN + j < S, 0, -T.infinity("float32"))
                T.gemm(Qs, Ks, acc_s, transpose_B=True)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(bM):
                    rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(bM, bN):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(bM):
                    l[i] = l[i] * rescale[i] + row_sum[i]
                for i, j in T.Parallel(bM, D):
                    acc_o[i, j] *= rescale[i]
                T.copy(acc_s, acc_p)
                T.copy(V[bz, k * bN : (k + 1) * bN, by, :], Vs)
                T.gemm(acc_p, Vs, acc_o)
            for i, j in T.Parallel(bM, D):
                acc_o[i, j] /= l[i]
            T.copy(acc_o, O[bz, bx * bM : (bx + 1) * bM, by, :])

    return main


@pytest.mark.parametrize("S", [64, 40])
@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_attention(randn, S, is_causal):
    B_, H, D = 1, 2, 16
    q, k, v = (randn(B_, S, H, D, dtype="float16") for _ in range(3))
    out = attention(B_, H, S, D, 16, 16, is_causal)(q, k, v)
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    scores = qd @ kd.transpose(-1, -2) / D**0.5
    if is_causal:
        scores = scores.masked_fill(torch.ones(S, S).triu(1).bool(), float("-inf"))
    ref = (torch.softmax(scores, -1) @ vd).transpose(1, 2)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)


# -- convolution -------------------------------------------------------------------------
@tilelang.jit(out_idx=-1, target="cpu")
def conv2d_nhwc(N, C, H, W, F, K, S, D, P, bM, bN, bK):
    """Implicit-GEMM convolution (upstream's example): im2col in a T.Parallel with an
    and-ed bounds test, the weights and output through flat T.Tensor views."""
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    dtype = "float16"

    @T.prim_func
    def main(
        data: T.Tensor((N, H, W, C), dtype),
        kernel: T.Tensor((K, K, C, F), dtype),
        out: T.Tensor((N, OH, OW, F), dtype),
    ):
        with T.Kernel(T.ceildiv(F, bN), T.ceildiv(N * OH * OW, bM), threads=128) as (bx, by):
            data_shared = T.alloc_shared((bM, bK), dtype)
            kernel_shared = T.alloc_shared((bK, bN), dtype)
            out_local = T.alloc_fragment((bM, bN), "float32")
            kernel_flat = T.Tensor((K * K * C, F), dtype, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)
            T.clear(out_local)
            for k_iter in T.Pipelined(T.ceildiv(K * K * C, bK), num_stages=2):
                for i, j in T.Parallel(bM, bK):
                    k = k_iter * bK + j
                    m = by * bM + i
                    access_h = m % (OH * OW) // OW * S + k // (K * C) * D - P
                    access_w = m % OW * S + k // C % K * D - P
                    in_bound = (
                        (access_h >= 0) and (access_w >= 0) and (access_h < H) and (access_w < W)
                    )
                    data_shared[i, j] = T.if_then_else(
                        in_bound, data[m // (OH * OW), access_h, access_w, k % C], 0
                    )
                T.copy(kernel_flat[k_iter * bK, bx * bN], kernel_shared)
                T.gemm(data_shared, kernel_shared, out_local)
            T.copy(out_local, out_flat[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("S,D,P", [(1, 1, 1), (2, 1, 0), (1, 2, 2)])
def test_conv2d_implicit_gemm(randn, S, D, P):
    N, C, H, W, F, K = 2, 8, 9, 9, 16, 3
    x, w = randn(N, H, W, C, dtype="float16"), randn(K, K, C, F, dtype="float16")
    out = conv2d_nhwc(N, C, H, W, F, K, S, D, P, 32, 16, 16)(x, w)
    ref = torch.nn.functional.conv2d(
        x.double().permute(0, 3, 1, 2),
        w.double().permute(3, 2, 0, 1),
        stride=S,
        padding=P,
        dilation=D,
    ).permute(0, 2, 3, 1)
    assert out.shape == ref.shape
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-2)


@tilelang.jit(out_idx=-1, target="cpu")
def matmul_dynamic_mnk(bM, bN, bK):
    """M, N and K all symbolic: the K loop count and every tile's tails come from the call."""
    M, N, K = T.dynamic("m"), T.dynamic("n"), T.dynamic("k")

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), "float16")
            Bs = T.alloc_shared((bK, bN), "float16")
            Cf = T.alloc_fragment((bM, bN), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


def test_gemm_dynamic_mnk(randn):
    kernel = matmul_dynamic_mnk(32, 32, 16)
    for M, N, K in [(1, 1, 1), (33, 17, 45), (64, 64, 64), (100, 3, 200)]:
        a, b = randn(M, K, dtype="float16"), randn(K, N, dtype="float16")
        c = kernel(a, b)
        assert c.shape == (M, N)
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-4)
