"""Thread-block clusters with TMA multicast vs one-block launches: the README GEMM on sm_90a.

    python benchmark/matmul_cluster.py [--sizes 4096 8192] [--dtypes float16 bfloat16]
                                       [--cluster 0 2 4] [--swizzle 0 8] [--tile 128 256 64]
                                       [--threads 256] [--stages 4 ...] [--iters 50] [--sustain S]
                                       [--x-walks n m] [--sync cta cluster] [--occupancy]

Each row builds the GEMM (``C = A @ B``, blockIdx.x walking N, C in the input dtype, float32
accumulation) with the pass config ``tl.cluster_multicast = C`` (0: off; 2/4: clusters of C
blocks along x that load the shared A tile once, each block multicasting a 1/C row slice,
``tilelang/backends/cuda/passes/cluster_multicast.py``) and ``T.use_swizzle(P)`` (0: none;
with clusters the panels are laid over clusters), checks it against torch and times it
(CUDA events, median), next to torch.matmul. ``--x-walks m`` builds the grid with
blockIdx.x walking M instead, so the blocks of a cluster share (and multicast) the B tile
(32 KB of a 128x256x64 stage) instead of A (16 KB). The "mc" column says whether the multicast was
applied (the ``tl.tma`` notes give the reason when not, e.g. an odd number of column blocks).

``--sync`` builds each cluster row under every listed ``tl.cluster_multicast_sync`` schedule
(``cta``: the default, CUTLASS-style CTA-scope arrivals/waits in the main loop and the staged
TMA-store epilogue; ``cluster``: the first schedule, cluster-scope fences in every iteration
and register stores), rows ``+mcC`` and ``+mcC/cluster``, timed in the same process.
``--occupancy`` adds the column "occ": resident clusters (or blocks) the driver reports for
the kernel (``cuOccupancyMaxActiveClusters`` / ``...ActiveBlocksPerMultiprocessor`` x SMs),
to see whether a cluster launch leaves SMs idle (GPCs whose SM count is not a multiple of C).

``--sustain S`` also runs torch, each configuration and torch again back to back for S
seconds each with ``nvidia-smi`` sampling clock and power (``benchmark/power_probe.py``): on
a power-capped H200 the sustained ratio is the one where less L2 traffic shows.

L2 traffic itself (A's reads should drop by about (C - 1) / C):
``ncu --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_bytes.sum -k main_kernel
python benchmark/matmul_cluster.py --sizes 8192 --dtypes float16 --iters 1``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark"))

from matmul import arch_of_device, check, sustain_rows, time_ms  # noqa: E402

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402


def gemm(M, N, K, bM, bN, bK, threads, stages, dtype, swizzle, x_walks="n"):
    """The README GEMM with C in ``dtype``; ``swizzle``: ``T.use_swizzle`` panel (0: none);
    ``x_walks``: the dimension blockIdx.x walks (``n``: clusters share A; ``m``: B)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        gn, gm = T.ceildiv(N, bN), T.ceildiv(M, bM)
        with T.Kernel(*((gn, gm) if x_walks == "n" else (gm, gn)), threads=threads) as (x, y):
            bx, by = (x, y) if x_walks == "n" else (y, x)
            if swizzle:
                T.use_swizzle(panel_size=swizzle)
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


def _smem_bytes(func, arch, configs) -> int:
    """Dynamic shared memory of the kernel (the lowered kernel's shared.dyn pool)."""
    import re

    from tilelang.backends.cuda import pipeline

    text = str(pipeline.lower(func, {"kind": "cuda", "arch": arch}, configs))
    found = re.findall(r"T\.Tensor\(\((\d+),\), T\.uint8, scope=\"shared\.dyn\"\)", text)
    return max((int(n) for n in found), default=0)


def resident(kern, func, arch, configs, grid, threads, cluster) -> int:
    """Clusters (``cluster`` > 1) or blocks the driver can keep resident at once (a
    negative CUresult when a driver call failed)."""
    import ctypes

    cu = ctypes.CDLL("libcuda.so.1")
    image = kern.artifact.device_binary
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    rc = cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image))
    rc = rc or cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"main_kernel")
    smem = _smem_bytes(func, arch, configs)
    rc = rc or cu.cuFuncSetAttribute(fn, 8, ctypes.c_int(smem))  # MAX_DYNAMIC_SHARED_SIZE
    if rc:
        return -rc
    n = ctypes.c_int(0)
    if cluster > 1:

        class LaunchConfig(ctypes.Structure):
            _fields_ = [(f, ctypes.c_uint) for f in ("gx", "gy", "gz", "bx", "by", "bz", "smem")]
            _fields_ += [("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p)]
            _fields_ += [("num_attrs", ctypes.c_uint)]

        cfg = LaunchConfig(*grid, threads, 1, 1, smem, None, None, 0)
        rc = cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), fn, ctypes.byref(cfg))
    else:
        rc = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(n), fn, ctypes.c_int(threads), ctypes.c_size_t(smem)
        )
        n = ctypes.c_int(n.value * torch.cuda.get_device_properties(0).multi_processor_count)
    cu.cuModuleUnload(mod)
    return n.value if rc == 0 else -rc


def bench(size, dtype, args, arch):
    """Print the rows of one size and dtype; return the sustained rows (``--sustain``)."""
    bM, bN, bK = args.tile
    tdt = getattr(torch, dtype)
    a = torch.randn(size, size, device="cuda", dtype=tdt)
    b = torch.randn(size, size, device="cuda", dtype=tdt)
    c = torch.empty(size, size, device="cuda", dtype=tdt)
    flops = 2 * size**3

    def torch_fn():
        torch.matmul(a, b, out=c)

    torch_ms = time_ms(torch_fn, args.iters)
    print(f"{size:>6} {dtype:>9} {'torch.matmul':>30} {'':>3} {torch_ms:>8.3f} "
          f"{flops / torch_ms / 1e9:>8.1f} {1.0:>6.2f}")  # fmt: skip
    runners = {}
    rows = itertools.product(args.stages, args.x_walks, args.swizzle, args.cluster, args.sync)
    for stages, xw, swz, cl, sync in rows:
        if cl <= 1 and sync != args.sync[0]:
            continue  # one-block launches have no cluster schedule
        name = f"{bM}x{bN}x{bK}/{args.threads}t/{stages}s" + ("/xM" if xw == "m" else "")
        name += (f"+swz{swz}" if swz else "") + (f"+mc{cl}" if cl > 1 else "")
        name += f"/{sync}" if cl > 1 and sync != "cta" else ""
        func = gemm(size, size, size, bM, bN, bK, args.threads, stages, dtype, swz, xw)
        configs = {"tl.cluster_multicast": cl, "tl.cluster_multicast_sync": sync}
        kern = tilelang.compile(func, target={"kind": "cuda", "arch": arch}, pass_configs=configs)
        applied = "tma_load_multicast" in kern.get_kernel_source()
        occ = ""
        if args.occupancy:
            gn, gm = -(-size // bN), -(-size // bM)
            grid = (gn, gm, 1) if xw == "n" else (gm, gn, 1)
            n = resident(kern, func, arch, configs, grid, args.threads + 128, cl if applied else 1)
            occ = f" occ {n}"
        kern(a, b, c)
        check(c, a, b, size)

        def run(kern=kern):
            kern(a, b, c)

        ms = time_ms(run, args.iters)
        runners[name] = run
        print(f"{size:>6} {dtype:>9} {name:>30} {'yes' if applied else 'no':>3} "
              f"{ms:>8.3f} {flops / ms / 1e9:>8.1f} {torch_ms / ms:>6.2f}{occ}")  # fmt: skip
    if args.sustain <= 0:
        return []
    return sustain_rows(size, dtype, torch_fn, runners, flops, args.sustain)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    parser.add_argument("--cluster", type=int, nargs="+", default=[0, 2, 4])
    parser.add_argument("--swizzle", type=int, nargs="+", default=[0, 8])
    parser.add_argument("--tile", type=int, nargs=3, default=[128, 256, 64])
    parser.add_argument("--threads", type=int, default=256)
    parser.add_argument("--stages", type=int, nargs="+", default=[4])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--sustain", type=float, default=0.0, help="seconds per sustained run")
    parser.add_argument("--x-walks", nargs="+", choices=["n", "m"], default=["n"])
    parser.add_argument("--sync", nargs="+", choices=["cta", "cluster"], default=["cta"])
    parser.add_argument("--occupancy", action="store_true", help="resident clusters/blocks")
    args = parser.parse_args()
    arch = arch_of_device()
    print(
        f"{'size':>6} {'dtype':>9} {'config':>30} {'mc':>3} {'ms':>8} {'TFLOP/s':>8} {'ratio':>6}"
    )
    sustained = []
    for size in args.sizes:
        for dtype in args.dtypes:
            sustained += bench(size, dtype, args, arch)
    if sustained:
        print(f"\nsustained ({args.sustain:.0f} s each)")
        print(f"{'size':>6} {'dtype':>9} {'config':>30} {'TFLOP/s':>9} {'SM MHz':>7} {'W':>5} "
              f"{'capped':>7} {'ratio':>6}")  # fmt: skip
        for size, dtype, name, tf, mhz, watts, capped, ratio in sustained:
            print(f"{size:>6} {dtype:>9} {name:>30} {tf:>9.1f} {mhz:>7.0f} {watts:>5.0f} "
                  f"{capped:>7.0%} {ratio:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
