"""2-D convolution as an implicit GEMM (NHWC input, HWIO weights): each K tile of the
im2col matrix is gathered into shared memory by a ``T.Parallel`` loop (padding reads as
zero), the weights tile is a plain copy, and ``T.gemm`` accumulates in float32."""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def convolution(N, C, H, W, F_out, KH, KW, stride=1, padding=0, dilation=1,
                block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):  # fmt: skip
    """``Out[n, oh, ow, f] = sum In[n, ih, iw, c] * Wt[kh, kw, c, f]`` (fp16 in, float32 out)."""
    OH = (H + 2 * padding - dilation * (KH - 1) - 1) // stride + 1
    OW = (W + 2 * padding - dilation * (KW - 1) - 1) // stride + 1
    gemm_m, gemm_k = N * OH * OW, KH * KW * C
    dtype, accum = "float16", "float32"

    @T.prim_func
    def main(
        In: T.Tensor((N, H, W, C), dtype),
        Wt: T.Tensor((KH, KW, C, F_out), dtype),
        Out: T.Tensor((N, OH, OW, F_out), accum),
    ):
        with T.Kernel(T.ceildiv(F_out, block_N), T.ceildiv(gemm_m, block_M), threads=threads) as (
            bx,
            by,
        ):
            data_shared = T.alloc_shared((block_M, block_K), dtype)
            weight_shared = T.alloc_shared((block_K, block_N), dtype)
            out_local = T.alloc_fragment((block_M, block_N), accum)
            weight_flat = T.Tensor((gemm_k, F_out), dtype, Wt.data)
            out_flat = T.Tensor((gemm_m, F_out), accum, Out.data)
            T.clear(out_local)
            for k in T.Pipelined(T.ceildiv(gemm_k, block_K), num_stages=num_stages):
                for i, j in T.Parallel(block_M, block_K):
                    m, kk = by * block_M + i, k * block_K + j
                    n, oh, ow = m // (OH * OW), (m // OW) % OH, m % OW
                    kh, kw, c = kk // (KW * C), (kk // C) % KW, kk % C
                    ih = oh * stride + kh * dilation - padding
                    iw = ow * stride + kw * dilation - padding
                    inside = (
                        (m < gemm_m) & (kk < gemm_k) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                    )
                    data_shared[i, j] = T.if_then_else(inside, In[n, ih, iw, c], 0)
                T.copy(weight_flat[k * block_K, bx * block_N], weight_shared)
                T.gemm(data_shared, weight_shared, out_local)
            T.copy(out_local, out_flat[by * block_M, bx * block_N])

    return main


def reference(x, w, stride, padding, dilation):
    """torch's conv2d in float64, NHWC / HWIO in and NHWC out."""
    out = F.conv2d(x.permute(0, 3, 1, 2).double(), w.permute(3, 2, 0, 1).double(),
                   stride=stride, padding=padding, dilation=dilation)  # fmt: skip
    return out.permute(0, 2, 3, 1)


def main(N=2, C=32, H=16, W=16, F_out=64, K=3, stride=1, padding=1, dilation=1, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(N, H, W, C, device=device, dtype=torch.float16)
    w = torch.randn(K, K, C, F_out, device=device, dtype=torch.float16)
    out = convolution(N, C, H, W, F_out, K, K, stride, padding, dilation)(x, w)
    torch.testing.assert_close(out.double(), reference(x, w, stride, padding, dilation),
                               rtol=1e-3, atol=2e-2)  # fmt: skip
    print(f"conv2d {N}x{H}x{W}x{C} * {K}x{K}x{C}x{F_out} s{stride} p{padding} d{dilation} "
          f"on {device}: matches")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--c", type=int, default=32)
    parser.add_argument("--h", type=int, default=16)
    parser.add_argument("--w", type=int, default=16)
    parser.add_argument("--f", type=int, default=64)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--padding", type=int, default=1)
    parser.add_argument("--dilation", type=int, default=1)
    a = parser.parse_args()
    main(a.n, a.c, a.h, a.w, a.f, a.k, a.stride, a.padding, a.dilation)
