"""Block-sparse GEMM: a boolean mask over (row block, column block, K block) says which
products to compute; the pipelined K loop skips the masked-out tiles (an ``if`` around the
copies and the gemm inside ``T.Pipelined``)."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def blocksparse_matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):
    """``C[i, j] = sum over unmasked k blocks of A[i, k] @ B[k, j]`` (float32 result)."""
    dtype, accum = "float16", "float32"
    mask_shape = (T.ceildiv(M, block_M), T.ceildiv(N, block_N), T.ceildiv(K, block_K))

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        BlockMask: T.Tensor(mask_shape, "bool"),
        C: T.Tensor((M, N), accum),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if BlockMask[by, bx, k]:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def reference(a, b, mask, block_M=64, block_N=64, block_K=32):
    """The masked product in float64, block by block."""
    M, N = a.shape[0], b.shape[1]
    c = torch.zeros(M, N, dtype=torch.float64, device=a.device)
    for i, j, k in mask.nonzero().tolist():
        rows, cols = slice(i * block_M, (i + 1) * block_M), slice(j * block_N, (j + 1) * block_N)
        ks = slice(k * block_K, (k + 1) * block_K)
        c[rows, cols] += a[rows, ks].double() @ b[ks, cols].double()
    return c


def main(M=256, N=256, K=256, sparsity=0.5, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    grid = (-(-M // 64), -(-N // 64), -(-K // 32))
    mask = torch.rand(grid, device=device) >= sparsity
    c = blocksparse_matmul(M, N, K)(a, b, mask)
    torch.testing.assert_close(c.double(), reference(a, b, mask), rtol=1e-3, atol=1e-2)
    print(
        f"block-sparse gemm {M}x{N}x{K} ({mask.float().mean():.0%} of tiles) on {device}: matches"
    )
    return c


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--sparsity", type=float, default=0.5)
    args = parser.parse_args()
    main(args.m, args.n, args.k, args.sparsity)
