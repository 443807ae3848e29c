"""Stream-K GEMM ``C = A @ B^T``: a fixed grid of ``num_programs`` blocks (one per SM) splits
the K iterations of the "stream-K" tiles evenly among themselves, crossing tile borders, so
no SM idles in a partial last wave. A block that covers a whole tile stores it; partial tile
pieces are summed into C with ``T.atomic_add`` (C must start at zero, float32). The tiles
left over after the stream-K share are plain data-parallel tiles, ``num_programs`` at a time.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T


def streamk_schedule(M, N, K, block_M, block_N, block_K, num_programs):
    """Host-side split: ``(streamk_tiles, iters_per_tile, full, partial, dp_rounds)`` -- the
    first ``streamk_tiles`` tiles are shared out as K iterations (``full`` per program, the
    first ``partial`` programs one more); the rest take ``dp_rounds`` data-parallel rounds."""
    total_tiles = math.ceil(M / block_M) * math.ceil(N / block_N)
    iters_per_tile = math.ceil(K / block_K)
    streamk_tiles = total_tiles % num_programs
    if total_tiles - streamk_tiles > num_programs:  # two-tile stream-K + data-parallel
        streamk_tiles += num_programs
    streamk_iters = streamk_tiles * iters_per_tile
    dp_rounds = math.ceil((total_tiles - streamk_tiles) / num_programs)
    return (streamk_tiles, iters_per_tile, streamk_iters // num_programs,
            streamk_iters % num_programs, dp_rounds)  # fmt: skip


@tilelang.jit
def tl_matmul_streamk(M, N, K, num_programs=132, block_M=16, block_N=128, block_K=32,
                      dtypeAB="float16", accum_dtype="float", num_stages=2, threads=64):  # fmt: skip
    """Kernel factory: ``kernel(A, B, C)`` accumulates ``A @ B.T`` into a zeroed float32 C;
    A ``(M, K)``, B ``(N, K)``."""
    if num_programs < 1:
        raise ValueError(f"tl_matmul_streamk: num_programs must be >= 1, got {num_programs}")
    streamk_tiles, iters_per_tile, full, partial, dp_rounds = streamk_schedule(
        M, N, K, block_M, block_N, block_K, num_programs
    )
    total_tiles = math.ceil(M / block_M) * math.ceil(N / block_N)
    tiles_n = math.ceil(N / block_N)

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtypeAB),
        B: T.Tensor((N, K), dtypeAB),
        C: T.Tensor((M, N), accum_dtype),
    ):
        with T.Kernel(num_programs, threads=threads) as pid:
            A_shared = T.alloc_shared((block_M, block_K), dtypeAB)
            B_shared = T.alloc_shared((block_N, block_K), dtypeAB)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            start_iter = T.alloc_local((1,), "int32")
            end_iter = T.alloc_local((1,), "int32")

            # stream-K part: this program's contiguous run of (tile, k) iterations
            start_iter[0] = pid * full + T.min(pid, partial)
            last_iter = (pid + 1) * full + T.min(pid + 1, partial)
            while start_iter[0] < last_iter:
                first_k = start_iter[0] % iters_per_tile
                end_iter[0] = T.min(start_iter[0] + (iters_per_tile - first_k), last_iter)
                tile_id = start_iter[0] // iters_per_tile
                pid_m = tile_id // tiles_n
                pid_n = tile_id % tiles_n
                T.clear(C_local)
                for k in T.Pipelined(end_iter[0] - start_iter[0], num_stages=num_stages):
                    T.copy(A[pid_m * block_M, (k + first_k) * block_K], A_shared)
                    T.copy(B[pid_n * block_N, (k + first_k) * block_K], B_shared)
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                if first_k == 0 and end_iter[0] % iters_per_tile == 0:
                    T.copy(C_local, C[pid_m * block_M, pid_n * block_N])  # the whole tile
                else:
                    for i, j in T.Parallel(block_M, block_N):
                        if pid_m * block_M + i < M and pid_n * block_N + j < N:
                            T.atomic_add(C[pid_m * block_M + i, pid_n * block_N + j], C_local[i, j])
                start_iter[0] = end_iter[0]

            # data-parallel part: whole tiles, one per program per round
            for p in T.serial(dp_rounds):
                tile_id = streamk_tiles + p * num_programs + pid
                if tile_id < total_tiles:
                    pid_m = tile_id // tiles_n
                    pid_n = tile_id % tiles_n
                    T.clear(C_local)
                    for k in T.Pipelined(iters_per_tile, num_stages=num_stages):
                        T.copy(A[pid_m * block_M, k * block_K], A_shared)
                        T.copy(B[pid_n * block_N, k * block_K], B_shared)
                        T.gemm(A_shared, B_shared, C_local, transpose_B=True)
                    T.copy(C_local, C[pid_m * block_M, pid_n * block_N])

    return main


def main(M=256, N=1024, K=512, num_programs=None, block_M=16, block_N=128, block_K=32,
         device=None):  # fmt: skip
    """Stream-K GEMM on random inputs in [-1, 1), checked against ``A @ B.T`` in float64."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if num_programs is None:
        num_programs = (torch.cuda.get_device_properties(0).multi_processor_count
                        if device == "cuda" else 8)  # fmt: skip
    a = torch.rand(M, K, device=device, dtype=torch.float16) * 2 - 1
    b = torch.rand(N, K, device=device, dtype=torch.float16) * 2 - 1
    c = torch.zeros(M, N, device=device, dtype=torch.float32)
    kernel = tl_matmul_streamk(M, N, K, num_programs, block_M, block_N, block_K)
    kernel(a, b, c)
    ref = a.double() @ b.double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-3)
    print(f"stream-K gemm {M}x{N}x{K} on {num_programs} programs ({device}): matches torch")
    return c


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--k", type=int, default=512)
    parser.add_argument("--num_programs", type=int, default=None)
    args = parser.parse_args()
    main(args.m, args.n, args.k, args.num_programs)
