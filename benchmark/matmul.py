"""tilelang GEMM (wgmma on sm_90a, mma.sync elsewhere) vs torch.matmul (run on a GPU).

    python benchmark/matmul.py [--sizes 4096 8192] [--dtypes float16 bfloat16] [--iters 50]
                               [--configs all|wgmma|mma|extra] [--only NAME ...]

For each size and dtype, each tile configuration is built (``tilelang.compile`` with the
configuration's pass configs), checked against torch,
and timed (CUDA events, median); the table reports TFLOP/s and the ratio to torch.matmul.
The kernel accumulates in float32 and writes C in the input dtype, as torch.matmul does.

Configurations (block M x N x K / threads / stages), ``--configs all|wgmma|mma|extra`` or
``--only NAME...``:

* ``wgmma`` ones target the device's arch (``sm_90a`` on Hopper: the wgmma path); ``+rP``
  rasterizes the blocks in panels of P tile rows (a 1-D grid, for L2 reuse of B), ``-ovl``
  builds without keeping a wgmma group in flight across iterations (copies S-1 ahead,
  pass config ``tl.wgmma_in_flight = False``), ``+ca`` issues each iteration's copies
  after the wgmma batch (``tl.wgmma_copies_after = True``);
* ``mma`` ones target ``sm_90`` on Hopper (no ``a``: wgmma is unavailable, so mma.sync);
  ``-nosplit`` builds them with ``tl.mma_split_pipeline = False`` (the gemm is not
  split into phases: every fragment of a tile is loaded after the iteration's barrier, the
  schedule before the split), for an A/B comparison in the same run.

At sizes above 4096 the check covers 256 sampled rows of C.

``--sustain S`` adds a second table: torch.matmul, each configuration, then torch.matmul
again, each run back to back for S seconds while ``nvidia-smi`` samples the SM clock and
power (``benchmark/power_probe.py``). At 8192³ every GEMM on the H200 runs into the 700 W
power limit, and in short bursts the kernel measured after a heavier one inherits its
lower clock; the sustained ratio (each kernel at its own steady clock, against the mean of
the two torch windows) is the one that compares energy per FLOP fairly. See RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark"))

import plotting  # noqa: E402

import tilelang.language as T  # noqa: E402


def _cfg(
    bM, bN, bK, threads, stages, path="wgmma", raster=0, in_flight=True, after=False, split=True,
    tma=True,
):  # fmt: skip
    name = f"{bM}x{bN}x{bK}/{threads}t/{stages}s"
    name += (f"+r{raster}" if raster else "") + ("-ovl" if not in_flight else "")
    name += ("+ca" if after else "") + ("-nosplit" if not split else "")
    name += "-cpasync" if not tma else ""
    return dict(
        name=name, bM=bM, bN=bN, bK=bK, threads=threads, stages=stages, path=path,
        raster=raster, in_flight=in_flight, after=after, split=split, tma=tma,
    )  # fmt: skip


#: ``+rP``: rasterized in panels of P tile rows; ``-ovl``: no wgmma group kept in flight;
#: ``+ca``: the iteration's copies issued after the wgmma batch (tl.wgmma_copies_after);
#: ``-cpasync``: cp.async copies instead of TMA on sm_90+ (tl.disable_tma_lower).
CONFIGS = [
    _cfg(128, 256, 64, 256, 4),
    _cfg(128, 256, 64, 256, 4, raster=8),
    _cfg(128, 256, 64, 256, 4, raster=4),
    _cfg(128, 256, 64, 256, 4, in_flight=False),
    _cfg(256, 128, 64, 256, 4),
    _cfg(128, 128, 64, 128, 4),
    # mma.sync (sm_90 without a): the reference config (the README GEMM's tile), then
    # the best ones measured on the H200 (bK=64, 8 warps; rasterized; RESULTS.md, session 3)
    _cfg(128, 128, 32, 128, 3, path="mma"),
    _cfg(128, 128, 32, 128, 4, path="mma"),
    _cfg(128, 256, 64, 256, 3, path="mma"),
    _cfg(128, 256, 64, 256, 3, path="mma", raster=8),
    _cfg(128, 256, 64, 256, 4, path="mma"),
    _cfg(256, 128, 64, 256, 3, path="mma", raster=4),
]
#: More variants (measured on the H200, see RESULTS.md), run with ``--configs extra`` or
#: by name with ``--only``.
EXTRA = [
    _cfg(128, 256, 64, 256, 3, raster=8),
    _cfg(128, 256, 64, 256, 4, raster=16),
    _cfg(128, 256, 64, 256, 4, raster=8, after=True),
    _cfg(256, 128, 64, 256, 4, raster=4),
    _cfg(256, 128, 64, 256, 4, raster=8),
    _cfg(128, 128, 64, 128, 4, raster=8),
    # mma.sync, earlier defaults: no split schedule, bK=32 with 8 warps, rasterized 128x128
    _cfg(128, 128, 32, 128, 3, path="mma", split=False),
    _cfg(128, 128, 32, 128, 4, path="mma", raster=8),
    _cfg(128, 128, 64, 128, 3, path="mma"),
    _cfg(128, 256, 32, 256, 3, path="mma"),
    _cfg(128, 256, 32, 256, 3, path="mma", split=False),
    _cfg(128, 256, 32, 256, 4, path="mma"),
    _cfg(128, 256, 32, 256, 4, path="mma", raster=8),
    _cfg(256, 128, 32, 256, 3, path="mma"),
    _cfg(256, 128, 32, 256, 4, path="mma", raster=4),
    # mma.sync: deeper pipelines (4 stages beat 3 by ~15% on the H200)
    _cfg(128, 128, 32, 128, 4, path="mma", split=False),
    _cfg(128, 128, 32, 128, 5, path="mma"),
    _cfg(128, 128, 32, 128, 6, path="mma"),
    _cfg(128, 128, 32, 128, 5, path="mma", split=False),
    _cfg(128, 128, 64, 128, 4, path="mma"),
    _cfg(128, 256, 32, 256, 5, path="mma"),
    _cfg(256, 128, 32, 256, 5, path="mma"),
    # mma.sync, 128x128 tiles on 8 warps (1 CTA per SM at 144-166 registers). Forcing two
    # CTAs per SM with __launch_bounds__(256, 2) measured 0.39-0.46x (RESULTS.md, 6578522)
    _cfg(128, 128, 32, 256, 4, path="mma"),
    # mma.sync, bK=64 tiles (fewer barriers and waits per FLOP; RESULTS.md, session 3)
    _cfg(128, 256, 64, 256, 2, path="mma"),
    _cfg(256, 128, 64, 256, 3, path="mma"),
    _cfg(128, 128, 64, 128, 3, path="mma", raster=8),
    # wgmma with cp.async copies (the default before TMA pipelining), for comparison
    _cfg(128, 256, 64, 256, 4, tma=False),
    _cfg(128, 256, 64, 256, 3, tma=False),
    _cfg(128, 128, 64, 256, 3, tma=False),
    _cfg(128, 128, 64, 256, 3),
    _cfg(128, 256, 64, 256, 3),
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


def build(func, arch, in_flight=True, after=False, split=True, tma=True):
    """A callable ``kern(a, b, c)`` and how it was built (``tilelang.compile`` with the
    configuration's code-generation choices as pass configs, so each is its own cache entry)."""
    import tilelang

    configs = {
        "tl.wgmma_in_flight": in_flight,
        "tl.wgmma_copies_after": after,
        "tl.mma_split_pipeline": split,
        "tl.disable_tma_lower": not tma,
    }
    kernel = tilelang.compile(func, target={"kind": "cuda", "arch": arch}, pass_configs=configs)
    return kernel, "tilelang.compile"


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
    parser.add_argument("--configs", choices=["all", "wgmma", "mma", "extra"], default="all")
    parser.add_argument("--only", nargs="+", default=None, help="config names to run")
    parser.add_argument("--sustain", type=float, default=0.0, help="seconds per sustained run")
    plotting.add_plot_argument(parser)
    args = parser.parse_args()
    plotting.check(args.plot)
    arch = arch_of_device()
    print(f"device: {torch.cuda.get_device_name()} ({arch}), torch {torch.__version__}")
    pool = CONFIGS + EXTRA
    if args.only:
        selected = [c for c in pool if c["name"] in args.only]
    elif args.configs == "extra":
        selected = EXTRA
    else:
        selected = [c for c in CONFIGS if args.configs in ("all", c["path"])]
    rows, sustained = [], []
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
            runners = {}
            for cfg in selected:
                name, path = cfg["name"], cfg["path"]
                target = arch.rstrip("a") if path == "mma" else arch
                try:
                    func = matmul_kernel(
                        size, size, size, cfg["bM"], cfg["bN"], cfg["bK"], cfg["threads"],
                        cfg["stages"], dtype, dtype, cfg["raster"],
                    )  # fmt: skip
                    kern, how = build(
                        func, target, cfg["in_flight"], cfg["after"], cfg["split"], cfg["tma"]
                    )
                    c.fill_(float("nan"))
                    kern(a, b, c)
                    check(c, a, b, size)
                    run = lambda kern=kern, a=a, b=b, c=c: kern(a, b, c)  # noqa: E731
                    runners[f"{name} {path}"] = run
                    t = time_ms(run, args.iters)
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
            if args.sustain > 0 and runners:
                torch_fn = lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)  # noqa: E731
                sustained += sustain_rows(size, dtype, torch_fn, runners, flops, args.sustain)
    print(
        f"\n{'size':>6} {'dtype':>9} {'config':>24} {'path':>14} {'built by':>16} {'ms':>9} "
        f"{'TFLOP/s':>9} {'ratio':>6}"
    )
    for size, dtype, name, path, how, t, tf, ratio in rows:
        print(
            f"{size:>6} {dtype:>9} {name:>24} {path:>14} {how:>16} {t:>9.3f} {tf:>9.1f} "
            f"{ratio:>6.2f}"
        )
    plot_rows = [
        {"group": f"{size} {dtype}", "label": f"{name} {path}", "ratio": ratio}
        for size, dtype, name, path, how, t, tf, ratio in rows
    ]
    plot_rows += [
        {"group": f"{size} {dtype} sustained", "label": name, "ratio": ratio}
        for size, dtype, name, tf, mhz, watts, capped, ratio in sustained
    ]
    if plot_rows:
        plotting.plot_ratios(plot_rows, args.plot, title="tilelang GEMM / torch.matmul (TFLOP/s)")
    if sustained:
        print(
            f"\nsustained ({args.sustain:.0f} s each; torch = mean of the windows before and after)"
        )
        print(f"{'size':>6} {'dtype':>9} {'config':>24} {'TFLOP/s':>9} {'SM MHz':>7} {'W':>5} "
              f"{'capped':>7} {'ratio':>6}")  # fmt: skip
        for size, dtype, name, tf, mhz, watts, capped, ratio in sustained:
            print(f"{size:>6} {dtype:>9} {name:>24} {tf:>9.1f} {mhz:>7.0f} {watts:>5.0f} "
                  f"{capped:>7.0%} {ratio:>6.2f}")  # fmt: skip


def sustain_rows(size, dtype, torch_fn, runners, flops, seconds):
    """Sustained TFLOP/s, clock, power and ratio of torch.matmul and each runner."""
    from power_probe import Sampler, sustain  # noqa: PLC0415

    sampler = Sampler()
    try:
        windows = [("torch.matmul", sustain(torch_fn, torch.cuda.synchronize, sampler, seconds))]
        for name, fn in runners.items():
            windows.append((name, sustain(fn, torch.cuda.synchronize, sampler, seconds)))
        windows.append(
            ("torch.matmul", sustain(torch_fn, torch.cuda.synchronize, sampler, seconds))
        )
    finally:
        sampler.stop()

    def tflops(w):
        return w.calls * flops / w.seconds / 1e12

    torch_tflops = (tflops(windows[0][1]) + tflops(windows[-1][1])) / 2
    return [
        (size, dtype, name, tflops(w), w.mean_mhz, w.mean_watts, w.power_capped,
         tflops(w) / torch_tflops)
        for name, w in windows
    ]  # fmt: skip


if __name__ == "__main__":
    main()
