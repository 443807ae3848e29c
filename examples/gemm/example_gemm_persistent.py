"""Persistent GEMM (upstream's ``examples/gemm/example_gemm_persistent.py``).

One block per SM walks the output tiles wave by wave. ``use_persistent_primitive=True``
lets ``T.Persistent`` enumerate the tiles (grouped ``group_size`` at a time along N for
L2 reuse); ``False`` writes the same schedule by hand, as upstream's non-persistent
comparison does. The constants ``M, N, K`` bind from the arguments' shapes, or from
``matmul_persistent.compile(M=..., N=..., K=..., ...)``.
"""

import argparse

import torch

import tilelang
import tilelang.language as T
from tilelang.carver.arch import driver


@tilelang.jit
def matmul_persistent(
    A,
    B,
    block_M,
    block_N,
    block_K,
    threads,
    num_stages,
    use_persistent_primitive=True,
    sm_num=None,
    group_size=8,
    dtype=T.float16,
    accum_dtype=T.float32,
):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    C = T.empty((M, N), dtype)

    sm_num = sm_num or driver.get_num_sms()
    m_blocks = T.ceildiv(M, block_M)
    n_blocks = T.ceildiv(N, block_N)
    # the hand schedule visits tiles in groups of group_size along N: count the waves over
    # the padded grid (upstream counts m_blocks * n_blocks, which misses tiles when
    # group_size does not divide n_blocks)
    waves = T.ceildiv(m_blocks * T.ceildiv(n_blocks, group_size) * group_size, sm_num)

    with T.Kernel(sm_num, threads=threads) as (block_id):
        A_shared = T.alloc_shared((block_M, block_K), dtype)
        B_shared = T.alloc_shared((block_K, block_N), dtype)
        C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
        C_shared = T.alloc_shared((block_M, block_N), dtype)

        if use_persistent_primitive:
            for bx, by in T.Persistent([m_blocks, n_blocks], sm_num, block_id, group_size):
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[bx * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, by * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C_shared)
                T.copy(C_shared, C[bx * block_M, by * block_N])
        else:
            for w in T.serial(waves):
                tile_id = sm_num * w + block_id
                bx = (tile_id // group_size) % m_blocks
                by = (tile_id % group_size) + (tile_id // group_size) // m_blocks * group_size
                if bx * block_M < M and by * block_N < N:
                    T.clear(C_local)
                    for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                        T.copy(A[bx * block_M, k * block_K], A_shared)
                        T.copy(B[k * block_K, by * block_N], B_shared)
                        T.gemm(A_shared, B_shared, C_local)
                    T.copy(C_local, C_shared)
                    T.copy(C_shared, C[bx * block_M, by * block_N])

    return C


def ref_program(A, B):
    return A @ B


def main(M=4096, N=4096, K=4096, block=(128, 256, 64), threads=256, num_stages=3, sm_num=None):
    """Both schedules against torch (profiler inputs: randn)."""
    block_M, block_N, block_K = block
    for persistent in (True, False):
        kernel = matmul_persistent.compile(
            M=M,
            N=N,
            K=K,
            block_M=block_M,
            block_N=block_N,
            block_K=block_K,
            threads=threads,
            num_stages=num_stages,
            use_persistent_primitive=persistent,
            sm_num=sm_num,
        )
        profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Randn)
        profiler.assert_allclose(ref_program, rtol=0.01, atol=0.01)
        name = "Persistent" if persistent else "Non-persistent"
        print(f"{name} GEMM: all checks passed")
        if torch.cuda.is_available():
            latency = profiler.do_bench(warmup=50)
            print(f"{name} GEMM: {latency:.3f} ms, {2 * M * N * K / latency * 1e-9:.1f} TFlops")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=8192)
    parser.add_argument("--N", type=int, default=8192)
    parser.add_argument("--K", type=int, default=8192)
    args = parser.parse_args()
    main(args.M, args.N, args.K)
