"""GEMM kernels (tilelang DSL) shared by the gemm/pipeline tests and benchmark/matmul.py."""

import tilelang.language as T


def make(
    M=1024,
    N=1024,
    K=1024,
    bM=128,
    bN=128,
    bK=32,
    threads=128,
    stages=3,
    dtype="float16",
    ta=False,
    tb=False,
    accum="float32",
):
    """A tiled ``C = op(A) @ op(B)`` kernel; C (and its fragment) has type ``accum``."""
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    as_ = (bK, bM) if ta else (bM, bK)
    bs_ = (bN, bK) if tb else (bK, bN)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(as_, dtype)
            B_shared = T.alloc_shared(bs_, dtype)
            C_local = T.alloc_fragment((bM, bN), accum)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                if ta:
                    T.copy(A[k * bK, by * bM], A_shared)
                else:
                    T.copy(A[by * bM, k * bK], A_shared)
                if tb:
                    T.copy(B[bx * bN, k * bK], B_shared)
                else:
                    T.copy(B[k * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_A=ta, transpose_B=tb)
            T.copy(C_local, C[by * bM, bx * bN])

    return main


def build_mma(func, arch, compiler="nvcc"):
    """CudaArtifact of ``func`` through the CUDA pipeline with ``T.gemm`` on mma.sync (pass
    config ``tl.disable_wgmma``, so sm_90a builds take the mma path too)."""
    from tilelang.backends.cuda.pipeline import build

    target = {"kind": "cuda", "arch": arch}
    return build(func, target, {"tl.disable_wgmma": True}, compiler=compiler)


def lower_mma(func, arch="sm_90a"):
    """The thread-level function of ``func`` with ``T.gemm`` on mma.sync."""
    from tilelang.backends.cuda.pipeline import lower

    return lower(func, {"kind": "cuda", "arch": arch}, {"tl.disable_wgmma": True})
