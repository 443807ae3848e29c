"""Row softmax: a row tile in a fragment, ``T.reduce_max``/``T.reduce_sum`` and ``T.Parallel``."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def softmax(M, N, block_M=16, dtype="float32", threads=128):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float")
            row_max = T.alloc_fragment((block_M,), "float")
            row_sum = T.alloc_fragment((block_M,), "float")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * 1.4426950408889634)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


def main(M=100, N=256, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(M, N, device=device)
    y = softmax(M, N)(x)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), rtol=1e-4, atol=1e-5)
    print(f"softmax {M}x{N} on {device}: matches torch")
    return y


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--n", type=int, default=256)
    args = parser.parse_args()
    main(args.m, args.n)
