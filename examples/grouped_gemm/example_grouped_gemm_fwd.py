"""Grouped GEMM (the MoE expert GEMM): G problems ``C[g] = A[g] @ B[g]`` whose row counts
``batch_sizes[g]`` differ, in ONE launch. A and C hold the groups' rows back to back
(``batch_offsets``); the grid walks the groups' row tiles as if each group were padded to
a multiple of ``block_M`` (``batch_padded_offsets``), and each block finds its group by
scanning those padded offsets, then masks the rows past its group's end.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[2])
def grouped_gemm(
    batch_sizes_list,
    K,
    N,
    block_M=64,
    block_N=64,
    block_K=32,
    trans_b=False,
    num_stages=2,
    threads=128,
    dtype="float16",
):
    """Kernel factory: ``kernel(A, B, batch_sizes, batch_offsets, batch_padded_offsets) -> C``
    with A ``(sum(sizes), K)``, B ``(G, K, N)`` (``(G, N, K)`` when ``trans_b``)."""
    batch_sum = sum(batch_sizes_list)
    batch_count = len(batch_sizes_list)
    accum_dtype = "float"
    total_m_blocks = sum(math.ceil(size / block_M) for size in batch_sizes_list)
    B_shape = (batch_count, N, K) if trans_b else (batch_count, K, N)
    B_shared_shape = (block_N, block_K) if trans_b else (block_K, block_N)

    @T.prim_func
    def kernel(
        A: T.Tensor((batch_sum, K), dtype),
        B: T.Tensor(B_shape, dtype),
        C: T.Tensor((batch_sum, N), dtype),
        batch_sizes: T.Tensor((batch_count,), "int32"),
        batch_offsets: T.Tensor((batch_count,), "int32"),
        batch_padded_offsets: T.Tensor((batch_count,), "int32"),
    ):
        with T.Kernel(total_m_blocks, T.ceildiv(N, block_N), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared(B_shared_shape, dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            cur_batch_idx = T.alloc_var("int32")

            # the last group whose padded start is at or before this row tile
            m_start_padded = bx * block_M
            cur_batch_idx = 0
            for g in T.serial(batch_count):
                cur_batch_idx = T.if_then_else(
                    m_start_padded >= batch_padded_offsets[g], g, cur_batch_idx
                )
            m_start = (
                m_start_padded - batch_padded_offsets[cur_batch_idx] + batch_offsets[cur_batch_idx]
            )
            rows = batch_sizes[cur_batch_idx] + batch_padded_offsets[cur_batch_idx] - m_start_padded

            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                # rows past this group's end belong to the next group (or lie outside A):
                # they are computed but never stored
                T.copy(A[m_start, k * block_K], A_shared)
                if trans_b:
                    T.copy(B[cur_batch_idx, by * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[cur_batch_idx, k * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=trans_b)

            for i, j in T.Parallel(block_M, block_N):
                if i < rows and by * block_N + j < N:
                    C[m_start + i, by * block_N + j] = C_local[i, j]

    return kernel


def construct_inputs(batch_sizes_list, K, N, trans_b=False, padding_M=64, device="cpu",
                     dtype=torch.float16):  # fmt: skip
    """Random A, B and the int32 ``batch_sizes``/``batch_offsets``/``batch_padded_offsets``."""
    offsets, padded = [0], [0]
    for size in batch_sizes_list[:-1]:
        offsets.append(offsets[-1] + size)
        padded.append(padded[-1] + math.ceil(size / padding_M) * padding_M)
    G = len(batch_sizes_list)
    a = torch.randn(sum(batch_sizes_list), K, device=device, dtype=dtype)
    b = torch.randn(*((G, N, K) if trans_b else (G, K, N)), device=device, dtype=dtype)

    def as_int32(values):
        return torch.tensor(values, device=device, dtype=torch.int32)

    return a, b, as_int32(batch_sizes_list), as_int32(offsets), as_int32(padded)


def torch_gmm(a, b, batch_sizes_list, trans_b=False):
    """Reference: one ``torch.mm`` per group, in the inputs' dtype and device."""
    out, start = [], 0
    for g, size in enumerate(batch_sizes_list):
        out.append(a[start : start + size] @ (b[g].T if trans_b else b[g]))
        start += size
    return torch.cat(out)


def main(batch_sizes_list=(64, 100, 1, 250), K=192, N=200, trans_b=False, block_M=64,
         block_N=64, block_K=32, device=None):  # fmt: skip
    """Run the grouped GEMM on random inputs and check it against per-group torch GEMMs."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sizes = list(batch_sizes_list)
    inputs = construct_inputs(sizes, K, N, trans_b, block_M, device)
    kernel = grouped_gemm(tuple(sizes), K, N, block_M, block_N, block_K, trans_b)
    c = kernel(*inputs)
    ref = torch_gmm(inputs[0].double(), inputs[1].double(), sizes, trans_b).to(c.dtype)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)
    print(f"grouped gemm sizes={sizes} K={K} N={N} trans_b={trans_b} on {device}: matches torch")
    return c


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_sizes", default="64,100,1,250")
    parser.add_argument("--k", type=int, default=192)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--trans_b", action="store_true")
    args = parser.parse_args()
    main(tuple(int(s) for s in args.batch_sizes.split(",")), args.k, args.n, args.trans_b)
