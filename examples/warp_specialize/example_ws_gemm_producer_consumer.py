"""A hand-written producer/consumer GEMM: warpgroup 1 loads, warpgroup 0 multiplies.

Two shared stages form a ring. For k-tile ``ko`` (stage ``s = ko % 2``, lap ``ko // 2``):

* producer (``T.ws(1)``): wait until the consumer released stage ``s`` (``empty[s]``; the
  first lap passes at once), copy the A and B tiles into it, arrive on ``full[s]``;
* consumer (``T.ws(0)``): wait for ``full[s]``, ``T.gemm`` on the stage, arrive on
  ``empty[s]``.

The producer's loads of the next stage overlap the consumer's gemm of this one. The
``T.gemm`` is planned over the consumer's 128 threads (one warpgroup's wgmma on sm_90a).
Needs sm_90 (mbarriers).
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul_producer_consumer(
    M, N, K, block_M=128, block_N=128, block_K=64, dtype="float16", accum_dtype="float"
):
    stages = 2

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=256) as (bx, by):
            A_shared = T.alloc_shared((stages, block_M, block_K), dtype)
            B_shared = T.alloc_shared((stages, block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            full = T.alloc_barrier(arrive_count=[128] * stages)
            empty = T.alloc_barrier(arrive_count=[128] * stages)

            with T.ws(0):
                T.clear(C_local)

            for ko in T.serial(T.ceildiv(K, block_K)):
                s = ko % stages
                lap = ko // stages
                with T.ws(1):
                    T.barrier_wait(empty[s], (lap & 1) ^ 1)
                    T.tma_copy(A[by * block_M, ko * block_K], A_shared[s, :, :], barrier=full[s])
                    T.tma_copy(B[ko * block_K, bx * block_N], B_shared[s, :, :], barrier=full[s])
                    T.barrier_arrive(full[s])
                with T.ws(0):
                    T.barrier_wait(full[s], lap & 1)
                    T.gemm(A_shared[s, :, :], B_shared[s, :, :], C_local)
                    T.barrier_arrive(empty[s])

            with T.ws(0):
                T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(M=1024, N=1024, K=1024):
    kernel = matmul_producer_consumer(M, N, K)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    ref = (a.double() @ b.double()).to(c.dtype)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)
    print(f"producer/consumer gemm {M}x{N}x{K}: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=1024)
    parser.add_argument("--N", type=int, default=1024)
    parser.add_argument("--K", type=int, default=1024)
    args = parser.parse_args()
    main(args.M, args.N, args.K)
