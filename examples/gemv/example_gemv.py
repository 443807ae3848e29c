"""GEMV ``y = A @ x``: each block owns ``block_N`` rows of A, streams K in tiles through
``T.Pipelined``, accumulates element products in a fragment, then ``T.reduce_sum``s the rows."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def gemv(N, K, block_N=32, block_K=128, dtype="float16", threads=128):
    """``Y[n] = sum_k A[n, k] * X[k]`` with float32 accumulation, ``Y`` in float32."""

    @T.prim_func
    def main(A: T.Tensor((N, K), dtype), X: T.Tensor((K,), dtype), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), threads=threads) as bn:
            a_shared = T.alloc_shared((block_N, block_K), dtype)
            x_shared = T.alloc_shared((block_K,), dtype)
            acc = T.alloc_fragment((block_N, block_K), "float32")
            y = T.alloc_fragment((block_N,), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[bn * block_N, ko * block_K], a_shared)
                T.copy(X[ko * block_K], x_shared)
                for i, j in T.Parallel(block_N, block_K):
                    acc[i, j] += T.cast(a_shared[i, j], "float32") * T.cast(x_shared[j], "float32")
            T.reduce_sum(acc, y, dim=1)
            T.copy(y, Y[bn * block_N])

    return main


def main(N=1024, K=1024, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(N, K, device=device, dtype=torch.float16)
    x = torch.randn(K, device=device, dtype=torch.float16)
    y = gemv(N, K)(a, x)
    torch.testing.assert_close(y.double(), a.double() @ x.double(), rtol=1e-3, atol=1e-2)
    print(f"gemv {N}x{K} on {device}: matches torch")
    return y


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=1024)
    args = parser.parse_args()
    main(args.n, args.k)
