"""W4A16 GEMM: B holds 4-bit weights, two per byte along K, with one fp16 scale per column;
each K tile is unpacked into fp16 in shared memory (``T.Parallel`` with shifts and masks)
before ``T.gemm``. ``C = A @ ((q - 8) * scale)``."""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def dequant_matmul(M, N, K, block_M=64, block_N=64, block_K=32, num_stages=2, threads=128):
    """``A`` fp16 (M, K); ``Bq`` int8 (K // 2, N): row r packs K rows 2r (low nibble) and
    2r + 1 (high nibble); ``Scale`` fp16 (N,); ``C`` float32."""
    if K % block_K or block_K % 2:
        raise ValueError(f"K ({K}) must be a multiple of block_K ({block_K}), which must be even")
    dtype, accum = "float16", "float32"

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        Bq: T.Tensor((K // 2, N), "int8"),
        Scale: T.Tensor((N,), dtype),
        C: T.Tensor((M, N), accum),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            Bq_shared = T.alloc_shared((block_K // 2, block_N), "int8")
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum)
            T.clear(C_local)
            for k in T.Pipelined(K // block_K, num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(Bq[k * block_K // 2, bx * block_N], Bq_shared)
                for i, j in T.Parallel(block_K, block_N):
                    code = (Bq_shared[i // 2, j] >> ((i % 2) * 4)) & 15
                    B_shared[i, j] = T.cast(code - 8, dtype) * Scale[bx * block_N + j]
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def pack_int4(codes):
    """(K, N) integer codes in [0, 16) -> (K // 2, N) int8, two codes per byte."""
    packed = (codes[0::2] | (codes[1::2] << 4)).to(torch.uint8)
    return packed.view(torch.int8)


def main(M=256, N=256, K=256, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    codes = torch.randint(0, 16, (K, N), device=device)
    scale = (torch.rand(N, device=device) + 0.5).to(torch.float16)
    c = dequant_matmul(M, N, K)(a, pack_int4(codes), scale)
    weights = ((codes - 8).to(torch.float16) * scale).double()  # fp16, as the kernel rounds it
    torch.testing.assert_close(c.double(), a.double() @ weights, rtol=1e-3, atol=2e-2)
    print(f"w4a16 gemm {M}x{N}x{K} on {device}: matches")
    return c


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    args = parser.parse_args()
    main(args.m, args.n, args.k)
