"""tilelang GEMM (wgmma on sm_90a, mma.sync elsewhere) vs torch.matmul (run on a GPU).

    python benchmark/matmul.py [--sizes 4096 8192] [--dtypes float16 bfloat16] [--iters 50]
                               [--configs all|wgmma|mma]

For each size and dtype, each tile configuration is built (``tilelang.compile``; when that
fails, ``tilelang.ops.gemm_cuda_standalone`` for the mma configs), checked against torch,
and timed (CUDA events, median); the table reports TFLOP/s and the ratio to torch.matmul.
The kernel accumulates in float32 and writes C in the input dtype, as torch.matmul does.

Configurations (block M x N x K / threads / stages):

* ``wgmma`` ones target the device's arch (``sm_90a`` on Hopper: the wgmma path); ``+r8``
  rasterizes the blocks in panels of 8 tile rows (a 1-D grid, for L2 reuse of B), ``-ovl``
  builds without keeping a wgmma group in flight across iterations (copies S-1 ahead,
  ``pipeline_planning.WGMMA_IN_FLIGHT = False``);
* ``mma`` ones target ``sm_90`` on Hopper (no ``a``: wgmma is unavailable, so mma.sync).

At sizes above 4096 the check covers 256 sampled rows of C.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilelang.language as T  # noqa: E402

# (name, block M, N, K, threads, stages, path, raster panel, keep a wgmma group in flight)
CONFIGS = [
    ("128x256x64/256t/4s", 128, 256, 64, 256, 4, "wgmma", 0, True),
    ("128x256x64/256t/3s", 128, 256, 64, 256, 3, "wgmma", 0, True),
    ("128x256x64/256t/4s+r8", 128, 256, 64, 256, 4, "wgmma", 8, True),
    ("128x256x64/256t/4s-ovl", 128, 256, 64, 256, 4, "wgmma", 0, False),
    ("256x128x64/256t/4s", 256, 128, 64, 256, 4, "wgmma", 0, True),
    ("128x128x64/128t/4s", 128, 128, 64, 128, 4, "wgmma", 0, True),
    ("128x128x32/128t/3s", 128, 128, 32, 128, 3, "mma", 0, True),
]


def matmul_kernel(M, N, K, bM, bN, bK, threads, stages, dtype, out_dtype, raster=0):
    """C (out_dtype) = A (M, K) @ B (K, N); ``raster``: 1-D grid in panels of that many rows."""
    gm, gn = (M + bM - 1) // bM, (N + bN - 1) // bN
    if raster and gm % raster:
        raise ValueError(f"raster panel {raster} does not divide {gm} tile rows")

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), out_dtype)
    ):
        with T.Kernel(gm * gn if raster else gn, 1 if raster else gm, threads=threads) as (x, y):
            if raster:
                by = (x // (raster * gn)) * raster + x % raster
                bx = (x // raster) % gn
            else:
                bx, by = x, y
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def arch_of_device() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def build(func, arch, in_flight=True):
    """A callable ``kern(a, b, c)`` and how it was built."""
    from tilelang.transform import pipeline_planning

    errors = []
    if not in_flight:  # a module switch: build directly, bypassing the kernel caches
        from tilelang.backends.cuda import load_kernel, pipeline

        pipeline_planning.WGMMA_IN_FLIGHT = False
        try:
            return load_kernel(pipeline.build(func, {"kind": "cuda", "arch": arch})), "pipeline"
        finally:
            pipeline_planning.WGMMA_IN_FLIGHT = True
    try:
        import tilelang

        kernel = tilelang.compile(func, target={"kind": "cuda", "arch": arch})
        return kernel, "tilelang.compile"
    except Exception as err:  # noqa: BLE001 - report and fall back
        errors.append(f"tilelang.compile: {type(err).__name__}: {str(err)[:300]}")
    from tilelang.backends.cuda.runtime import load_kernel
    from tilelang.ops.gemm_cuda_standalone import build_standalone

    try:
        return load_kernel(build_standalone(func, arch=arch)), "standalone"
    except Exception as err:  # noqa: BLE001
        errors.append(f"standalone: {type(err).__name__}: {str(err)[:300]}")
    raise RuntimeError("; ".join(errors))


def time_ms(fn, iters: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(c, a, b, size):
    """Compare C with a float32 reference (all of it, or 256 sampled rows when large)."""
    if size <= 4096:
        ref = a.float() @ b.float()
        torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=5e-1)
        return
    rows = torch.randperm(size, device=a.device)[:256]
    ref = a[rows].float() @ b.float()
    torch.testing.assert_close(c[rows].float(), ref, rtol=2e-2, atol=5e-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--configs", choices=["all", "wgmma", "mma"], default="all")
    args = parser.parse_args()
    arch = arch_of_device()
    print(f"device: {torch.cuda.get_device_name()} ({arch}), torch {torch.__version__}")
    rows = []
    for size in args.sizes:
        for dtype in args.dtypes:
            tdt = getattr(torch, dtype)
            a = torch.randn(size, size, dtype=tdt, device="cuda")
            b = torch.randn(size, size, dtype=tdt, device="cuda")
            c = torch.empty(size, size, dtype=tdt, device="cuda")
            flops = 2.0 * size**3
            t_torch = time_ms(lambda a=a, b=b: torch.matmul(a, b), args.iters)
            torch_tflops = flops / t_torch / 1e9
            rows.append((size, dtype, "torch.matmul", "-", "-", t_torch, torch_tflops, 1.0))
            for name, bM, bN, bK, threads, stages, path, raster, in_flight in CONFIGS:
                if args.configs != "all" and path != args.configs:
                    continue
                if path == "mma" and dtype != args.dtypes[0]:
                    continue  # the reference path once per size
                target = arch.rstrip("a") if path == "mma" else arch
                try:
                    func = matmul_kernel(
                        size, size, size, bM, bN, bK, threads, stages, dtype, dtype, raster
                    )
                    kern, how = build(func, target, in_flight)
                    c.fill_(float("nan"))
                    kern(a, b, c)
                    check(c, a, b, size)
                    t = time_ms(lambda kern=kern, a=a, b=b, c=c: kern(a, b, c), args.iters)
                    tflops = flops / t / 1e9
                    rows.append(
                        (
                            size,
                            dtype,
                            name,
                            f"{path}/{target}",
                            how,
                            t,
                            tflops,
                            tflops / torch_tflops,
                        )
                    )
                except Exception as err:  # noqa: BLE001 - keep benchmarking the others
                    print(f"  {size} {dtype} {name}: FAILED {type(err).__name__}: {err}"[:800])
    print(
        f"\n{'size':>6} {'dtype':>9} {'config':>24} {'path':>14} {'built by':>16} {'ms':>9} "
        f"{'TFLOP/s':>9} {'ratio':>6}"
    )
    for size, dtype, name, path, how, t, tf, ratio in rows:
        print(
            f"{size:>6} {dtype:>9} {name:>24} {path:>14} {how:>16} {t:>9.3f} {tf:>9.1f} "
            f"{ratio:>6.2f}"
        )


if __name__ == "__main__":
    main()
