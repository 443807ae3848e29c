"""DeepGEMM-style FP8 GEMM with block scales and two-level accumulation ("2xAcc").

``C = (A * scales_a) @ (B * scales_b)^T`` where ``A`` (M x K) and ``B`` (N x K) are
float8_e4m3fn, ``scales_a`` has one float32 per row and 128-wide K group, and ``scales_b``
one per 128 x 128 block of ``B``. Tensor cores accumulate FP8 products in limited
precision, so each 128-wide K step runs its own gemm into a fresh float32 fragment
(``clear_accum=True``) and the kernel promotes it into the real accumulator scaled by
``scales_a[row] * scales_b[block]`` on the CUDA cores -- the second accumulation level.

M, N and K need not be multiples of the tiles (tails are zero-filled on load and not
stored); ``block_N`` must divide 128, so that a tile reads one ``scales_b`` block.
"""

import argparse

import torch

import tilelang
import tilelang.language as T

GROUP = 128  # the K width (and N height) one scale covers


@tilelang.jit
def fp8_gemm_2xacc(
    A,
    B,
    scales_a,
    scales_b,
    out_dtype=T.bfloat16,
    block_M=64,
    block_N=128,
    num_stages=2,
    threads=128,
):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float8_e4m3fn)
    B: T.Tensor((N, K), T.float8_e4m3fn)
    scales_a: T.Tensor((M, T.ceildiv(K, GROUP)), T.float32)
    scales_b: T.Tensor((T.ceildiv(N, GROUP), T.ceildiv(K, GROUP)), T.float32)
    C = T.empty((M, N), out_dtype)
    assert GROUP % block_N == 0, "block_N must divide 128"

    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
        A_shared = T.alloc_shared((block_M, GROUP), T.float8_e4m3fn)
        B_shared = T.alloc_shared((block_N, GROUP), T.float8_e4m3fn)
        C_shared = T.alloc_shared((block_M, block_N), out_dtype)
        row_scale = T.alloc_fragment((block_M,), T.float32)
        C_step = T.alloc_fragment((block_M, block_N), T.float32)
        C_acc = T.alloc_fragment((block_M, block_N), T.float32)

        T.use_swizzle(panel_size=8)
        T.clear(C_acc)
        for k in T.Pipelined(T.ceildiv(K, GROUP), num_stages=num_stages):
            T.copy(A[by * block_M, k * GROUP], A_shared)
            T.copy(B[bx * block_N, k * GROUP], B_shared)
            block_scale = scales_b[bx * block_N // GROUP, k]
            for i in T.Parallel(block_M):
                row_scale[i] = scales_a[by * block_M + i, k] * block_scale
            # first level: this K group's products, in a fresh accumulator
            T.gemm(A_shared, B_shared, C_step, transpose_B=True, clear_accum=True)
            # second level: promoted, scaled, into the float32 accumulator
            for i, j in T.Parallel(block_M, block_N):
                C_acc[i, j] += C_step[i, j] * row_scale[i]
        T.copy(C_acc, C_shared)
        T.copy(C_shared, C[by * block_M, bx * block_N])
    return C


def quantize_rows(x: torch.Tensor):
    """float -> (float8_e4m3fn, one scale per row and 128-wide K group)."""
    m, k = x.shape
    groups = -(-k // GROUP)
    padded = torch.nn.functional.pad(x.float(), (0, groups * GROUP - k)).view(m, groups, GROUP)
    scale = padded.abs().amax(-1).clamp(min=1e-4) / 448.0
    q = (padded / scale[..., None]).view(m, -1)[:, :k].to(torch.float8_e4m3fn)
    return q, scale


def quantize_blocks(x: torch.Tensor):
    """float -> (float8_e4m3fn, one scale per 128 x 128 block)."""
    n, k = x.shape
    gn, gk = -(-n // GROUP), -(-k // GROUP)
    padded = torch.nn.functional.pad(x.float(), (0, gk * GROUP - k, 0, gn * GROUP - n))
    blocks = padded.view(gn, GROUP, gk, GROUP)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0
    q = (blocks / scale[:, None, :, None]).view(gn * GROUP, gk * GROUP)[:n, :k]
    return q.to(torch.float8_e4m3fn), scale


def reference(A, B, scales_a, scales_b):
    """float64: the dequantized product."""
    m, k = A.shape
    n = B.shape[0]
    a = A.double() * scales_a.double().repeat_interleave(GROUP, 1)[:, :k]
    b = (
        B.double()
        * scales_b.double().repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)[:n, :k]
    )
    return a @ b.T


def main(M=1024, N=1024, K=8192, out_dtype=T.bfloat16):
    x = torch.randn(M, K, device="cuda")
    w = torch.randn(N, K, device="cuda")
    A, scales_a = quantize_rows(x)
    B, scales_b = quantize_blocks(w)
    C = fp8_gemm_2xacc(A, B, scales_a, scales_b, out_dtype)
    want = reference(A, B, scales_a, scales_b)
    torch.testing.assert_close(C.double(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
    print(f"fp8 2xAcc GEMM {M}x{N}x{K}: matches the float64 reference")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=8192)
    args = parser.parse_args()
    main(args.m, args.n, args.k)
