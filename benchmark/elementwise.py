"""Memory-bound kernels vs torch on a GPU: elementwise add and row softmax.

    python benchmark/elementwise.py [--ops add softmax] [--dtypes float16 float32]
                                    [--iters 100] [--warmup 10]

Both sides get the same inputs; each tilelang kernel is checked against torch first
(``ok``), then both are timed with CUDA events, one event pair per run, median of
``--iters`` runs after ``--warmup``. Bandwidth counts the bytes a kernel must move once:
add reads A and B and writes C (3 M N elements), softmax reads X and writes Y (2 M N).
``ratio`` is tilelang's bandwidth over torch's (above 1: tilelang is faster).

Kernels (``tilelang/transform/vectorize.py`` gives them 16-byte loads and stores):

* add: ``C[i, j] = A[i, j] + B[i, j]`` with a ``T.Parallel`` nest over a
  ``block_M x block_N`` tile straight on global memory;
* softmax: ``block_M`` rows per block held in a float32 fragment (``T.copy`` in and out,
  ``T.reduce_max``/``T.reduce_sum``, ``exp2``), the example's kernel with the input and
  output in the benchmark's dtype.

The last lines printed are the table (compile messages come first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402

LOG2E = 1.4426950408889634


def add_kernel(M, N, dtype, block_M=32, block_N=256, threads=256):
    """C = A + B on (M, N) tensors of ``dtype``."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            for i, j in T.Parallel(block_M, block_N):
                y, x = by * block_M + i, bx * block_N + j
                C[y, x] = A[y, x] + B[y, x]

    return main


def softmax_kernel(M, N, dtype, block_M=4, threads=128):
    """Y = softmax(X, dim=1), rows of N elements, computed in float32."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


# (op, M, N, kernel options): one table row each, per dtype
CASES = [
    ("add", 8192, 8192, dict(block_M=32, block_N=256, threads=256)),
    ("softmax", 16384, 1024, dict(block_M=4, threads=128)),
    ("softmax", 8192, 4096, dict(block_M=1, threads=256)),
]


def time_ms(fn, iters, warmup):
    """Median milliseconds of ``fn()`` over ``iters`` runs, one CUDA event pair per run."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for start, end in zip(starts, ends):
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def run_case(op, M, N, dtype, options, iters, warmup):
    """One table row: (label, torch ms, tilelang ms, bytes moved, ok)."""
    tdtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    if op == "add":
        a, b = (torch.randn(M, N, device="cuda", dtype=tdtype, generator=gen) for _ in range(2))
        c = torch.empty_like(a)
        kernel = tilelang.compile(add_kernel(M, N, dtype, **options), target="cuda")
        kernel(a, b, c)
        ok = torch.allclose(c, a + b)
        ref = time_ms(lambda: torch.add(a, b, out=c), iters, warmup)
        ours = time_ms(lambda: kernel(a, b, c), iters, warmup)
        moved = 3 * M * N * a.element_size()
        label = f"{options['block_M']}x{options['block_N']}/{options['threads']}t"
    else:
        x = torch.randn(M, N, device="cuda", dtype=tdtype, generator=gen)
        y = torch.empty_like(x)
        kernel = tilelang.compile(softmax_kernel(M, N, dtype, **options), target="cuda")
        kernel(x, y)
        want = torch.softmax(x.float(), dim=1)
        tol = 1e-2 if dtype != "float32" else 1e-5
        ok = torch.allclose(y.float(), want, rtol=tol, atol=tol * 1e-2)
        ref = time_ms(lambda: torch.softmax(x, dim=1), iters, warmup)
        ours = time_ms(lambda: kernel(x, y), iters, warmup)
        moved = 2 * M * N * x.element_size()
        label = f"{options['block_M']} rows/{options['threads']}t"
    return label, ref, ours, moved, ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=["add", "softmax"])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "float32"])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmark/elementwise.py needs a CUDA GPU")
    rows = []
    for op, M, N, options in CASES:
        if op not in args.ops:
            continue
        for dtype in args.dtypes:
            print(f"building and timing {op} {M}x{N} {dtype} ...", flush=True)
            try:
                label, ref, ours, moved, ok = run_case(
                    op, M, N, dtype, options, args.iters, args.warmup
                )
            except Exception as err:  # noqa: BLE001 - report the row, keep the others
                print(f"  failed: {type(err).__name__}: {str(err)[:300]}", flush=True)
                rows.append((op, f"{M}x{N}", dtype, "-", None, None, None, "error"))
                continue
            rows.append((op, f"{M}x{N}", dtype, label, ref, ours, moved, "yes" if ok else "NO"))
    name = torch.cuda.get_device_name()
    print(f"{name}: median of {args.iters} runs (CUDA events); GB/s = bytes moved once / time")
    head = f"{'op':<8}{'shape':<11}{'dtype':<8}{'config':<14}{'torch ms':>9}{'GB/s':>7}"
    print(head + f"{'tl ms':>9}{'GB/s':>7}{'ratio':>7}  ok")
    for op, shape, dtype, label, ref, ours, moved, ok in rows:
        short = dtype.replace("float", "fp")
        if ref is None:
            print(
                f"{op:<8}{shape:<11}{short:<8}{label:<14}{'-':>9}{'-':>7}{'-':>9}{'-':>7}{'-':>7}  {ok}"
            )
            continue
        gbs_ref, gbs_ours = moved / ref / 1e6, moved / ours / 1e6
        print(
            f"{op:<8}{shape:<11}{short:<8}{label:<14}{ref:>9.4f}{gbs_ref:>7.0f}"
            f"{ours:>9.4f}{gbs_ours:>7.0f}{gbs_ours / gbs_ref:>7.2f}  {ok}"
        )


if __name__ == "__main__":
    main()
