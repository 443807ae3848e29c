"""8-bit GEMM on Hopper: tilelang's wgmma k32 path vs torch in the same process (run on a GPU).

    python benchmark/matmul_8bit.py [--sizes 4096 8192] [--iters 50] [--dtypes float8_e4m3fn int8]

float8 e4m3 (or e5m2): C (bfloat16) = A (M, K) @ B (N, K)^T, the program written as upstream's
fp8 GEMM example writes it (B transposed, K-major), against ``torch._scaled_mm`` with unit
scales (bf16 out). int8: C (int32) against ``torch._int_mm``. CUDA events, median of
``--iters`` runs; each result is checked against a float64 reference on sampled rows first.
"""

from __future__ import annotations

import argparse

import torch
from matmul import time_ms  # CUDA events around each call, median (benchmark/matmul.py)

import tilelang
import tilelang.language as T

CONFIGS = [  # (bM, bN, bK, threads, stages)
    (128, 256, 128, 256, 3),
    (128, 256, 128, 256, 4),
    (128, 128, 128, 128, 4),
    (256, 128, 128, 256, 3),
]


def gemm_8bit(M, N, K, bM, bN, bK, threads, stages, dtype, acc, out):
    """C = A @ B^T with 8-bit A (M, K) and B (N, K)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), out)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bN, bK), dtype)
            C_f = T.alloc_fragment((bM, bN), acc)
            T.use_swizzle(10)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[bx * bN, k * bK], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float8_e4m3fn", "int8"])
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for size in args.sizes:
        for dtype in args.dtypes:
            fp8 = dtype.startswith("float8")
            tdt = getattr(torch, dtype)
            if fp8:
                a = torch.randn(size, size, device="cuda").to(tdt)
                b = torch.randn(size, size, device="cuda").to(tdt)
                one = torch.ones((), device="cuda")
                ref_fn = lambda a=a, b=b, one=one: torch._scaled_mm(  # noqa: E731
                    a, b.t(), one, one, out_dtype=torch.bfloat16
                )
                acc, out, ref_name = "float32", "bfloat16", "torch._scaled_mm"
            else:
                a = torch.randint(-8, 8, (size, size), device="cuda", dtype=tdt)
                b = torch.randint(-8, 8, (size, size), device="cuda", dtype=tdt)
                ref_fn = lambda a=a, b=b: torch._int_mm(a, b.t())  # noqa: E731
                acc, out, ref_name = "int32", "int32", "torch._int_mm"
            flops = 2.0 * size**3
            t_ref = time_ms(ref_fn, args.iters)
            rows.append((size, dtype, ref_name, t_ref, flops / t_ref / 1e9, 1.0))
            sample = torch.randperm(size, device="cuda")[:128]
            want = a[sample].double() @ b.double().t()
            for bM, bN, bK, threads, stages in CONFIGS:
                name = f"{bM}x{bN}x{bK}/{threads}t/{stages}s"
                try:
                    func = gemm_8bit(size, size, size, bM, bN, bK, threads, stages, dtype, acc, out)
                    kernel = tilelang.compile(func, target="cuda")
                    c = torch.full((size, size), -1, device="cuda", dtype=getattr(torch, out))
                    kernel(a, b, c)
                    tol = 2e-2 if fp8 else 0
                    torch.testing.assert_close(
                        c[sample].double(), want, rtol=tol, atol=tol * want.abs().max().item()
                    )
                    t = time_ms(lambda k=kernel, a=a, b=b, c=c: k(a, b, c), args.iters)
                    rows.append((size, dtype, name, t, flops / t / 1e9, t_ref / t))
                except Exception as err:  # noqa: BLE001 - report and go on
                    print(f"  {size} {dtype} {name}: FAILED {type(err).__name__}: {err}"[:600])
    print(f"\n{'size':>6} {'dtype':>14} {'config':>22} {'ms':>8} {'TFLOP/s':>9} {'ratio':>6}")
    for size, dtype, name, t, tf, ratio in rows:
        print(f"{size:>6} {dtype:>14} {name:>22} {t:>8.3f} {tf:>9.1f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
