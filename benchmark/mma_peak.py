"""Peak throughput of ``mma.sync`` on this GPU, next to torch.matmul and our mma.sync GEMM.

    python benchmark/mma_peak.py [--size 8192] [--iters 30] [--no-gemm]

The ceiling any mma.sync GEMM can reach: every warp issues independent
``mma.sync.aligned.m16n8k16`` instructions on registers in a loop (no memory traffic), for
several accumulator counts (instruction-level parallelism), warps per block and blocks per
SM. Built with ``nvcc`` into a small shared library launched on torch's current stream
through ctypes; timed with CUDA events (median). Then torch.matmul and the best mma.sync
configuration of ``benchmark/matmul.py`` (sm_90 target on Hopper: no wgmma) at ``--size``³
fp16, interleaved round by round in the same process, so the ratio of the GEMM to the
instruction's ceiling and to torch.matmul come from the same clocks.

``--sustain S`` then runs the ceiling kernel, torch.matmul and each GEMM back to back for S
seconds each while ``nvidia-smi`` samples the SM clock and power (``power_probe.py``):
under the board's power limit the clock a kernel keeps depends on its energy per FLOP.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmark"))

# One kernel per (accumulators, input type, accumulator type); each warp runs NACC
# independent m16n8k16 chains for `iters` iterations. The A/B registers depend on the
# thread index and the result is stored, so nothing is folded away.
_KERNEL = r"""
#include <cuda_runtime.h>
#include <stdint.h>

template <int NACC, bool BF16>
__global__ void mma_f32(float* out, int iters) {
  uint32_t a0 = threadIdx.x * 0x00010001u, a1 = a0 ^ 0x3c003c00u, a2 = a0 + 7u, a3 = a1 + 3u;
  uint32_t b0 = a0 ^ 0x11111111u, b1 = a1 ^ 0x22222222u;
  float acc[NACC][4];
#pragma unroll
  for (int j = 0; j < NACC; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < NACC; ++j) {
      if (BF16) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < NACC; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <int NACC>
__global__ void mma_f16acc(float* out, int iters) {
  uint32_t a0 = threadIdx.x * 0x00010001u, a1 = a0 ^ 0x3c003c00u, a2 = a0 + 7u, a3 = a1 + 3u;
  uint32_t b0 = a0 ^ 0x11111111u, b1 = a1 ^ 0x22222222u;
  uint32_t acc[NACC][2];
#pragma unroll
  for (int j = 0; j < NACC; ++j) acc[j][0] = acc[j][1] = 0u;
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < NACC; ++j) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
          "{%0,%1};\n"
          : "+r"(acc[j][0]), "+r"(acc[j][1])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  uint32_t s = 0u;
#pragma unroll
  for (int j = 0; j < NACC; ++j) s ^= acc[j][0] ^ acc[j][1];
  out[blockIdx.x * blockDim.x + threadIdx.x] = (float)s;
}

#define LAUNCH(KERNEL)                                                             \
  KERNEL<<<blocks, threads, 0, (cudaStream_t)stream>>>(out, iters);               \
  return (int)cudaGetLastError();

extern "C" int mma_peak_launch(int kind, int nacc, int blocks, int threads, float* out,
                               int iters, void* stream) {
  /* kind: 0 = f16 -> f32, 1 = bf16 -> f32, 2 = f16 -> f16 */
  if (kind == 0 && nacc == 2) { LAUNCH((mma_f32<2, false>)) }
  if (kind == 0 && nacc == 4) { LAUNCH((mma_f32<4, false>)) }
  if (kind == 0 && nacc == 8) { LAUNCH((mma_f32<8, false>)) }
  if (kind == 1 && nacc == 4) { LAUNCH((mma_f32<4, true>)) }
  if (kind == 1 && nacc == 8) { LAUNCH((mma_f32<8, true>)) }
  if (kind == 2 && nacc == 4) { LAUNCH((mma_f16acc<4>)) }
  if (kind == 2 && nacc == 8) { LAUNCH((mma_f16acc<8>)) }
  return -1;
}
"""

_KINDS = {0: "f16 -> f32", 1: "bf16 -> f32", 2: "f16 -> f16"}
_FLOPS_PER_MMA = 2 * 16 * 8 * 16


def build_mma_library(arch: str) -> ctypes.CDLL:
    """The microbenchmark kernels built with nvcc (``benchmark/nvcc_lib.py``)."""
    from nvcc_lib import build_library  # noqa: PLC0415

    library = build_library(_KERNEL, arch, "mma_peak")
    library.mma_peak_launch.restype = ctypes.c_int
    library.mma_peak_launch.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p, ctypes.c_int,
                                                             ctypes.c_void_p]  # fmt: skip
    return library


def time_ms(fn, iters: int) -> float:
    """Median CUDA-event time of ``fn`` (``matmul.time_ms`` with 3 warm-up calls)."""
    import matmul  # noqa: PLC0415

    return matmul.time_ms(fn, iters, warmup=3)


def peak_table(library, iters: int) -> list[tuple[str, float]]:
    """TFLOP/s of each microbenchmark variant."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    loop = 4096
    rows = []
    variants = [(0, n, w, b) for n in (2, 4, 8) for w in (4, 8) for b in (1, 2)]
    variants += [(1, 8, 4, 2), (1, 4, 8, 2), (2, 8, 4, 2), (2, 4, 8, 2)]
    for kind, nacc, warps, per_sm in variants:
        blocks, threads = sms * per_sm, warps * 32
        out = torch.empty(blocks * threads, device="cuda", dtype=torch.float32)
        stream = torch.cuda.current_stream().cuda_stream

        def launch(kind=kind, nacc=nacc, blocks=blocks, threads=threads, out=out, stream=stream):
            rc = library.mma_peak_launch(kind, nacc, blocks, threads, out.data_ptr(), loop,
                                         stream)  # fmt: skip
            if rc != 0:
                raise RuntimeError(f"launch failed ({rc})")

        ms = time_ms(launch, iters)
        flops = blocks * warps * loop * nacc * _FLOPS_PER_MMA
        name = f"{_KINDS[kind]}, {nacc} chains/warp, {warps} warps x {per_sm} blocks/SM"
        rows.append((name, flops / ms / 1e9))
    return rows


def _gemm_runners(size: int, configs: list[str]) -> tuple[dict, float]:
    """``{name: fn}`` for torch.matmul and each config (checked against torch), and FLOPs."""
    import matmul  # noqa: PLC0415

    major = torch.cuda.get_device_capability()[0]
    arch = "sm_90" if major == 9 else matmul.arch_of_device()
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    runners = {"torch.matmul": lambda: torch.matmul(a, b, out=c)}
    for name in configs:
        cfg = next(x for x in matmul.CONFIGS + matmul.EXTRA if x["name"] == name)
        func = matmul.matmul_kernel(size, size, size, cfg["bM"], cfg["bN"], cfg["bK"],
                                    cfg["threads"], cfg["stages"], "float16", "float16",
                                    cfg["raster"])  # fmt: skip
        kernel, _how = matmul.build(func, arch, split=cfg["split"])
        kernel(a, b, c)
        matmul.check(c, a, b, size)
        runners[f"mma.sync {name} ({arch})"] = lambda kernel=kernel: kernel(a, b, c)
    return runners, 2.0 * size**3


def _gemm_rows(
    runners: dict, flops: float, iters: int, rounds: int, cooldown: float = 0.0
) -> list[tuple[str, float]]:
    """TFLOP/s of each runner, timed in ``rounds`` interleaved rounds; with ``cooldown``,
    the GPU idles that many seconds before each timing (every kernel starts cold)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            if cooldown:
                time.sleep(cooldown)
            samples[name].append(time_ms(fn, iters))
    return [(name, flops / statistics.median(ms) / 1e9) for name, ms in samples.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-gemm", action="store_true")
    parser.add_argument("--sustain", type=float, default=0.0, help="seconds per kernel")
    parser.add_argument("--cooldown", type=float, default=0.0, help="idle seconds per timing")
    parser.add_argument("--configs", nargs="+", default=["128x128x32/128t/4s",
                                                         "128x256x32/256t/4s"])  # fmt: skip
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("mma_peak.py needs a CUDA GPU")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    library = build_mma_library(arch)
    print(f"# {torch.cuda.get_device_name()}, {arch}, torch {torch.__version__}")
    print("\n| mma.sync m16n8k16 microbenchmark | TFLOP/s |\n|---|---|")
    peaks = peak_table(library, args.iters)
    for name, tflops in peaks:
        print(f"| {name} | {tflops:.1f} |")
    best = max(t for n, t in peaks if n.startswith("f16 -> f32"))
    print(f"\nmma.sync f16 -> f32 ceiling (best variant): {best:.1f} TFLOP/s")
    if args.no_gemm:
        return
    runners, flops = _gemm_runners(args.size, args.configs)
    rows = _gemm_rows(runners, flops, args.iters, args.rounds)
    if args.cooldown:
        cold = dict(_gemm_rows(runners, flops, args.iters, args.rounds, args.cooldown))
    torch_tflops = rows[0][1]
    print(f"\n| {args.size}³ fp16, interleaved x{args.rounds} | TFLOP/s | / torch | / mma.sync "
          "ceiling |\n|---|---|---|---|")  # fmt: skip
    for name, tflops in rows:
        print(f"| {name} | {tflops:.1f} | {tflops / torch_tflops:.2f} | {tflops / best:.2f} |")
    if args.cooldown:
        print(f"\n| {args.size}³ fp16, {args.cooldown:.0f} s idle before each timing | TFLOP/s "
              "| / torch |\n|---|---|---|")  # fmt: skip
        for name, tflops in cold.items():
            print(f"| {name} | {tflops:.1f} | {tflops / cold['torch.matmul']:.2f} |")
    # the ceiling measured again after the GEMMs (clocks drift with temperature)
    again = max(t for n, t in peak_table(library, args.iters) if n.startswith("f16 -> f32"))
    print(f"\nceiling measured again after the GEMMs: {again:.1f} TFLOP/s")
    if args.sustain > 0:
        sustained_table(library, runners, flops, args.sustain)


def sustained_table(library, runners: dict, flops: float, seconds: float) -> None:
    """Each kernel back to back for ``seconds``: TFLOP/s, mean SM clock and power."""
    from power_probe import Sampler, sustain  # noqa: PLC0415

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    loop, blocks, threads = 4096, 2 * sms, 128
    out = torch.empty(blocks * threads, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    ceiling_flops = blocks * 4 * loop * 8 * _FLOPS_PER_MMA

    def ceiling():
        library.mma_peak_launch(0, 8, blocks, threads, out.data_ptr(), loop, stream)

    work = {"mma.sync ceiling kernel (f16 -> f32, 8 chains, 4 warps x 2)": (ceiling, ceiling_flops)}
    work.update({name: (fn, flops) for name, fn in runners.items()})
    sampler = Sampler()
    try:
        print(f"\n| sustained {seconds:.0f} s each | TFLOP/s | SM MHz | W | power-capped "
              "| TFLOP/s per GHz | TFLOP/J |\n|---|---|---|---|---|---|---|")  # fmt: skip
        for name, (fn, work_flops) in work.items():
            w = sustain(fn, torch.cuda.synchronize, sampler, seconds)
            tflops = w.calls * work_flops / w.seconds / 1e12
            print(f"| {name} | {tflops:.1f} | {w.mean_mhz:.0f} | {w.mean_watts:.0f} | "
                  f"{w.power_capped:.0%} | {tflops / (w.mean_mhz / 1000):.1f} | "
                  f"{tflops / w.mean_watts:.2f} |")  # fmt: skip
    finally:
        sampler.stop()


if __name__ == "__main__":
    main()
