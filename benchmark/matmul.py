"""tilelang mma GEMM vs torch.matmul on the same inputs (run on a GPU; CUDA events, median).

    python benchmark/matmul.py [--sizes 4096 8192] [--dtypes float16 bfloat16] [--iters 50]

For each size and dtype, each tile configuration is built (``tilelang.compile`` when the
full CUDA pipeline can build it, else ``tilelang.ops.gemm_cuda_standalone``), checked
against torch, and timed; the table reports TFLOP/s and the ratio to torch.matmul. The
kernel accumulates in float32 and writes a float32 C (torch writes the input dtype).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "testing/python/backends/cuda"))

from gemm_kernels import make  # noqa: E402

# mma.sync configurations known to be good on Ampere/Hopper (block M, N, K, threads, stages)
CONFIGS = [
    dict(bM=128, bN=256, bK=32, threads=256, stages=3),
    dict(bM=128, bN=256, bK=32, threads=256, stages=2),
    dict(bM=128, bN=128, bK=32, threads=256, stages=4),
    dict(bM=128, bN=128, bK=32, threads=128, stages=3),
    dict(bM=256, bN=128, bK=32, threads=256, stages=3),
]


def arch_of_device() -> str:
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def build(func, arch):
    """A callable ``kern(a, b, c)``: the full pipeline first, the standalone gemm path else."""
    errors = []
    try:
        import tilelang

        kernel = tilelang.compile(func, target="cuda")
        return kernel, "tilelang.compile"
    except Exception as err:  # noqa: BLE001 - report and fall back
        errors.append(f"tilelang.compile: {type(err).__name__}: {str(err)[:200]}")
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    arch = arch_of_device()
    print(f"device: {torch.cuda.get_device_name()} ({arch}), torch {torch.__version__}")
    rows = []
    for size in args.sizes:
        for dtype in args.dtypes:
            tdt = getattr(torch, dtype)
            a = torch.randn(size, size, dtype=tdt, device="cuda")
            b = torch.randn(size, size, dtype=tdt, device="cuda")
            c = torch.empty(size, size, dtype=torch.float32, device="cuda")
            flops = 2.0 * size**3
            t_torch = time_ms(lambda a=a, b=b: torch.matmul(a, b), args.iters)
            ref = (a.float() @ b.float()) if size <= 4096 else None
            torch_tflops = flops / t_torch / 1e9
            rows.append((size, dtype, "torch.matmul", "-", t_torch, torch_tflops, 1.0))
            for cfg in CONFIGS:
                name = "{bM}x{bN}x{bK}/{threads}t/{stages}s".format(**cfg)
                try:
                    kern, how = build(make(M=size, N=size, K=size, dtype=dtype, **cfg), arch)
                    kern(a, b, c)
                    if ref is not None:
                        torch.testing.assert_close(c, ref, rtol=2e-2, atol=5e-1)
                    t = time_ms(lambda kern=kern, a=a, b=b, c=c: kern(a, b, c), args.iters)
                    tflops = flops / t / 1e9
                    rows.append((size, dtype, name, how, t, tflops, tflops / torch_tflops))
                except Exception as err:  # noqa: BLE001 - keep benchmarking the others
                    print(f"  {size} {dtype} {name}: FAILED {type(err).__name__}: {err}"[:600])
    print(
        f"\n{'size':>6} {'dtype':>9} {'config':>24} {'built by':>16} {'ms':>9} {'TFLOP/s':>9} {'ratio':>6}"
    )
    for size, dtype, name, how, t, tf, ratio in rows:
        print(f"{size:>6} {dtype:>9} {name:>24} {how:>16} {t:>9.3f} {tf:>9.1f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
