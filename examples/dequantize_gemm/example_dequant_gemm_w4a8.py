"""W4A8 GEMM (upstream's ``examples/dequantize_gemm/example_dequant_gemm_w4a8.py``).

``Ct = (A @ dequant(qB).T).T`` with int8 activations ``A`` (M x K) and signed 4-bit
weights packed two per byte (``qB``: N x K/2 uint8, low nibble first). Each packed tile is
unpacked in registers by a ``tvm.tirx`` helper working on scalar expressions
(``val.dtype``, ``tirx.reinterpret(dtype, value)``: TVM's spellings), then fed to an
int8 x int8 -> int32 tensor-core GEMM. The unpack loop reads ``B_local[i, j // 2]``: two
iterations per register, which layout inference places on one thread.
"""

import argparse

import torch

import tilelang
import tilelang.language as T
from tilelang.tvm import tirx


def _tir_u8_to_i4_to_i8(nbit: int, val: tirx.PrimExpr, pos: tirx.PrimExpr, dtype: str):
    """The signed 4-bit field ``pos`` of the byte ``val``, sign-extended to int8."""
    assert nbit == 4
    assert dtype == T.int8
    assert val.dtype == T.uint8
    mask = tirx.const((1 << nbit) - 1, T.uint8)
    i4 = (val >> (pos.astype(T.uint8) * tirx.const(nbit, T.uint8))) & mask
    i8_shifted = tirx.reinterpret(T.int8, i4 << tirx.const(4, T.uint8))
    return i8_shifted >> tirx.const(4, T.int8)


@tilelang.jit(out_idx=[2])
def matmul_int8xint4(
    M,
    N,
    K,
    in_dtype=T.int8,
    out_dtype=T.int32,
    accum_dtype=T.int32,
    num_bits=4,
    block_M=32,
    block_N=32,
    block_K=128,
    num_stages=1,
    threads=128,
):
    num_elems_per_byte = 8 // num_bits
    storage_dtype = T.uint8
    A_shape = (M, K)
    B_shape = (N, K // num_elems_per_byte)
    A_shared_shape = (block_M, block_K)
    B_shared_shape = (block_N, block_K // num_elems_per_byte)
    B_dequantize_local_shape = (block_N, block_K)

    @T.prim_func
    def main(
        A: T.Tensor(A_shape, in_dtype),
        B: T.Tensor(B_shape, storage_dtype),
        Ct: T.Tensor((N, M), out_dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(A_shared_shape, in_dtype)
            B_shared = T.alloc_shared(B_shared_shape, storage_dtype)
            B_local = T.alloc_fragment(B_shared_shape, storage_dtype)
            B_dequantize_local = T.alloc_fragment(B_dequantize_local_shape, in_dtype)
            B_dequantize_prev_local = T.alloc_fragment(B_dequantize_local_shape, in_dtype)
            Ct_local = T.alloc_fragment((block_N, block_M), accum_dtype)
            Ct_shared = T.alloc_shared((block_N, block_M), out_dtype)

            T.annotate_layout({B_shared: tilelang.layout.make_swizzled_layout(B_shared)})

            T.clear(Ct_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K // num_elems_per_byte], B_shared)
                T.copy(B_shared, B_local)
                for i, j in T.Parallel(block_N, block_K):
                    B_dequantize_local[i, j] = _tir_u8_to_i4_to_i8(
                        num_bits,
                        B_local[i, j // num_elems_per_byte],
                        j % num_elems_per_byte,
                        dtype=in_dtype,
                    )
                T.copy(B_dequantize_local, B_dequantize_prev_local)
                T.gemm(B_dequantize_prev_local, A_shared, Ct_local, transpose_B=True)
            T.copy(Ct_local, Ct_shared)
            T.copy(
                Ct_shared, Ct[bx * block_N : (bx + 1) * block_N, by * block_M : (by + 1) * block_M]
            )

    return main


def torch_convert(qB):
    """Unpack ``qB`` (N x K/2 uint8, low nibble first) into signed int8 (N x K)."""
    assert qB.dim() == 2 and qB.dtype == torch.uint8
    N, half = qB.shape
    i4 = torch.stack((qB & 0x0F, qB >> 4), dim=-1).reshape(N, half * 2).to(torch.int8)
    return (i4 << 4) >> 4


def ref_program(A, qB):
    """Ct in float64: exact for these integer sizes."""
    return (A.double() @ torch_convert(qB).double().T).T


def run(M, N, K, device=None, **config):
    """One W4A8 GEMM on random int8 activations and packed int4 weights; returns
    (Ct, float64 reference)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kernel = matmul_int8xint4(M, N, K, **config)
    A = torch.randint(-128, 128, (M, K), dtype=torch.int8, device=device)
    qB = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=device)
    Ct = kernel(A, qB)
    return Ct, ref_program(A, qB)


def main(m=128, n=256, k=256):
    Ct, ref = run(m, n, k)
    assert torch.equal(Ct.double(), ref), "w4a8 gemm differs from torch"
    print(f"w4a8 gemm {m}x{n}x{k}: matches torch exactly")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=512)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--k", type=int, default=512)
    args = parser.parse_args()
    main(args.m, args.n, args.k)
