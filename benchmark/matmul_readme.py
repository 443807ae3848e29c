"""The README's GEMM, as a user writes it (plus ``T.use_swizzle(10)``), vs torch.matmul (GPU).

    python benchmark/matmul_readme.py [--sizes 4096 8192] [--dtypes float16 bfloat16]
                                      [--iters 50] [--pass-configs KEY=VALUE ...]
                                      [--variant NAME:KEY=VALUE,KEY=VALUE ...]

The configurations are the issue tracker's held-out ones (block M x N x K / threads /
stages): 128x256x64/256/3, 128x128x64/128/3, 128x256x32/256/4. Each kernel is built by
``tilelang.compile`` (only ``T.*`` and pass configs: no module switches), checked against
torch on sampled rows, and timed with CUDA events (median of ``--iters``) in the same
process as torch.matmul; the table gives TFLOP/s and the ratio to torch. torch.matmul is
timed before and after each size/dtype group and the ratio is against the mean of the two.

``--variant`` adds a build of every configuration with more pass configs (on top of
``--pass-configs``), timed in the same process: e.g. ``--variant
epi:tl.tma_store_epilogue=true mc:tl.cluster_multicast=2`` gives rows ``.../3s epi`` and
``.../3s mc`` next to the plain ones (A/B of code-generation choices without a second run).
The cluster schedules side by side: ``--variant mc2:tl.cluster_multicast=2
mc2old:tl.cluster_multicast=2,tl.cluster_multicast_sync=cluster
mc2reg:tl.cluster_multicast=2,tl.tma_store_epilogue=false`` (the default CTA-scope schedule,
the first one with cluster-scope fences in every iteration, the default one with register
stores instead of the staged TMA-store epilogue).
"""

from __future__ import annotations

import argparse

import torch
from config_args import parse_pass_configs, parse_variants  # --pass-configs / --variant
from matmul import time_ms  # CUDA events around each call, median (benchmark/matmul.py)

import tilelang
import tilelang.language as T

CONFIGS = [(128, 256, 64, 256, 3), (128, 128, 64, 128, 3), (128, 256, 32, 256, 4)]


def matmul(M, N, K, block_M, block_N, block_K, threads, num_stages, dtype, pass_configs):
    """The README program: C = A @ B with float32 accumulation, rasterized (swizzle 10)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.use_swizzle(10)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return tilelang.compile(main, out_idx=[-1], target="cuda", pass_configs=pass_configs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--pass-configs", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--variant", nargs="*", default=[], metavar="NAME:KEY=VALUE,...")
    parser.add_argument(
        "--configs",
        nargs="*",
        default=None,
        metavar="BMxBNxBK/Tt/Ss",
        help="only these configurations (names as in the table)",
    )
    args = parser.parse_args()
    configs = parse_pass_configs(args.pass_configs)
    variants = [("", configs)]
    variants += [(name, {**configs, **extra}) for name, extra in parse_variants(args.variant)]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, configs {configs}")
    rows = []
    for size in args.sizes:
        for dtype in args.dtypes:
            tdt = getattr(torch, dtype)
            a = torch.randn(size, size, dtype=tdt, device="cuda")
            b = torch.randn(size, size, dtype=tdt, device="cuda")
            flops = 2.0 * size**3
            t_first = time_ms(lambda a=a, b=b: torch.matmul(a, b), args.iters)
            sample = torch.randperm(size, device="cuda")[:128]
            want = a[sample].float() @ b.float()
            timed = []
            for cfg in CONFIGS:
                base = "x".join(map(str, cfg[:3])) + f"/{cfg[3]}t/{cfg[4]}s"
                if args.configs and base not in args.configs:
                    continue
                for vname, vconfigs in variants:
                    name = f"{base} {vname}".strip()
                    try:
                        kernel = matmul(size, size, size, *cfg, dtype, vconfigs)
                        c = kernel(a, b)
                        torch.testing.assert_close(c[sample].float(), want, rtol=2e-2, atol=5e-1)
                        timed.append(
                            (name, time_ms(lambda k=kernel, a=a, b=b: k(a, b), args.iters))
                        )
                    except Exception as err:  # noqa: BLE001 - report and go on
                        print(f"  {size} {dtype} {name}: FAILED {type(err).__name__}: {err}"[:600])
            t_last = time_ms(lambda a=a, b=b: torch.matmul(a, b), args.iters)
            t_ref = (t_first + t_last) / 2
            rows.append((size, dtype, "torch.matmul", t_ref, flops / t_ref / 1e9, 1.0))
            for name, t in timed:
                rows.append((size, dtype, name, t, flops / t / 1e9, t_ref / t))
    print(f"\n{'size':>6} {'dtype':>9} {'config':>26} {'ms':>8} {'TFLOP/s':>9} {'ratio':>6}")
    for size, dtype, name, t, tf, ratio in rows:
        print(f"{size:>6} {dtype:>9} {name:>26} {t:>8.3f} {tf:>9.1f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
