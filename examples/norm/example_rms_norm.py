"""RMS norm over rows, two ways: a whole row tile in registers, and a split-K form whose
row chunks stream through ``T.Pipelined`` (the sum of squares accumulated with
``T.reduce_sum(..., clear=False)``, then a second pass scales each chunk)."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def rms_norm(M, N, block_M=8, eps=1e-6, dtype="float32", threads=128):
    """``Y = X / sqrt(mean(X**2, axis=1) + eps)``, one block of ``block_M`` whole rows."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x_shared = T.alloc_shared((block_M, N), dtype)
            x = T.alloc_fragment((block_M, N), "float")
            squares = T.alloc_fragment((block_M, N), "float")
            scale = T.alloc_fragment((block_M,), "float")
            T.copy(X[bx * block_M : (bx + 1) * block_M, :], x_shared)
            T.copy(x_shared, x)
            for i, j in T.Parallel(block_M, N):
                squares[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(squares, scale, dim=1)
            for i in T.Parallel(block_M):
                scale[i] = T.rsqrt(scale[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                x[i, j] *= scale[i]
            T.copy(x, Y[bx * block_M : (bx + 1) * block_M, :])

    return main


@tilelang.jit(out_idx=[-1])
def rms_norm_splitk(M, N, block_M=8, block_N=128, eps=1e-6, dtype="float32", threads=128):
    """The same norm for rows too long for one tile: two pipelined passes over column chunks."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x_shared = T.alloc_shared((block_M, block_N), dtype)
            x = T.alloc_fragment((block_M, block_N), "float")
            sum_sq = T.alloc_fragment((block_M,), "float")
            T.clear(sum_sq)
            for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
                T.copy(X[bx * block_M, k * block_N], x_shared)
                T.copy(x_shared, x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] * x[i, j]
                T.reduce_sum(x, sum_sq, dim=1, clear=False)
            for i in T.Parallel(block_M):
                sum_sq[i] = T.rsqrt(sum_sq[i] / N + eps)
            for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=2):
                T.copy(X[bx * block_M, k * block_N], x_shared)
                T.copy(x_shared, x)
                for i, j in T.Parallel(block_M, block_N):
                    x[i, j] = x[i, j] * sum_sq[i]
                T.copy(x, Y[bx * block_M, k * block_N])

    return main


def reference(x, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps)


def main(M=100, N=512, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(M, N, device=device)
    ref = reference(x)
    for name, kernel in (("rms_norm", rms_norm(M, N)), ("rms_norm_splitk", rms_norm_splitk(M, N))):
        y = kernel(x)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
        print(f"{name} {M}x{N} on {device}: matches torch")
    return y


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--n", type=int, default=512)
    args = parser.parse_args()
    main(args.m, args.n)
