"""The ported upstream examples vs an eager torch baseline, on a GPU.

    python benchmark/examples_ported.py [--only cast grouped_gemm ...] [--iters 50] [--small]

Each row: one example's kernel (compiled once, outside the timing) and a torch program that
computes the same thing in the same dtype (fp16/fp32 GEMMs, no float64), timed with CUDA
events (median of ``--iters`` after ``--warmup``); ``speedup`` is torch time / tilelang
time. Baselines: cast -- the example's ``ref_program``; grouped GEMM -- one ``torch.mm`` per
group; attention sink -- fp16 GEMMs + fp32 softmax over ``[scores, sink]``; block-sparse
attention -- dense ``scaled_dot_product_attention`` with the expanded boolean mask; stream-K
-- ``torch.matmul``; fused MoE -- routing + one SwiGLU MLP per expert. ``--small`` runs tiny
shapes (also on a CPU, wall clock) to smoke-test the script.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _example(relpath):
    path = ROOT / "examples" / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn, iters, warmup, device):
    """Median milliseconds of ``fn()``: CUDA events on a GPU, wall clock on a CPU."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def bench_cast(dev, small):
    mod = _example("cast/example_per_token_cast_to_fp8.py")
    M, N = (33, 300) if small else (8192, 7168)
    x = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
    kernel = mod.per_token_cast_to_fp8(M, N, 8, 128, "bfloat16")
    return f"{M}x{N} bf16", lambda: kernel(x), lambda: mod.ref_program(x)


def bench_grouped_gemm(dev, small):
    mod = _example("grouped_gemm/example_grouped_gemm_fwd.py")
    sizes, K, N = ([20, 70, 3], 64, 48) if small else ([1024, 300, 2048, 77, 4000], 4096, 4096)
    a, b, *tables = mod.construct_inputs(sizes, K, N, False, 64, dev)
    kernel = mod.grouped_gemm(tuple(sizes), K, N, 64, 128, 32, num_stages=3)
    return (f"sizes={sizes} K={K} N={N}", lambda: kernel(a, b, *tables),
            lambda: mod.torch_gmm(a, b, sizes))  # fmt: skip


def bench_attention_sink(dev, small):
    mod = _example("attention_sink/example_mha_sink_fwd_bhsd.py")
    b, h, sq, skv, d = (1, 2, 40, 70, 32) if small else (4, 32, 2048, 2048, 128)
    blk = 32 if small else 128
    q = torch.randn(b, h, sq, d, device=dev, dtype=torch.float16)
    k, v = (torch.randn(b, h, skv, d, device=dev, dtype=torch.float16) for _ in range(2))
    sinks = torch.randn(h, device=dev, dtype=torch.float16)
    kernel = mod.flashattn(b, h, sq, skv, d, block_M=blk, block_N=blk, num_stages=2,
                           threads=128 if small else 256)  # fmt: skip
    causal = torch.ones(sq, skv, dtype=torch.bool, device=dev).tril(skv - sq)

    def torch_sink():
        s = (q @ k.transpose(-1, -2)).float() * d**-0.5
        s = s.masked_fill(~causal, float("-inf"))
        s = torch.cat([s, sinks.float().view(1, h, 1, 1).expand(b, h, sq, 1)], -1)
        return torch.softmax(s, -1)[..., :-1].half() @ v

    return f"b={b} h={h} sq={sq} skv={skv} d={d}", lambda: kernel(q, k, v, sinks), torch_sink


def bench_blocksparse_attention(dev, small):
    mod = _example("blocksparse_attention/example_tilelang_block_sparse_attn.py")
    b, h, s, d, blk, topk = (1, 2, 100, 32, 32, 2) if small else (2, 32, 4096, 128, 64, 8)
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.float16) for _ in range(3))
    n = math.ceil(s / blk)
    x_ds = torch.randn(b, h, n, n, device=dev)
    x_ds[..., 0] = 100
    mask = mod.get_sparse_attn_mask_from_topk(x_ds, topk)
    kernel = mod.blocksparse_flashattn(b, h, s, d, True, blk)
    full = mask.repeat_interleave(blk, -1).repeat_interleave(blk, -2)[..., :s, :s]
    full &= torch.ones(s, s, dtype=torch.bool, device=dev).tril()
    return (f"b={b} h={h} s={s} d={d} topk={topk}/{n}", lambda: kernel(q, k, v, mask),
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=full))  # fmt: skip


def bench_gemm_streamk(dev, small):
    mod = _example("gemm_streamk/example_tilelang_gemm_streamk.py")
    M, N, K = (40, 100, 64) if small else (256, 1024, 8192)
    programs = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 4
    a = torch.rand(M, K, device=dev, dtype=torch.float16) - 0.5
    b = torch.rand(N, K, device=dev, dtype=torch.float16) - 0.5
    c = torch.zeros(M, N, device=dev)
    kernel = mod.tl_matmul_streamk(M, N, K, programs, 16, 32 if small else 128, 32)
    return (f"{M}x{N}x{K} on {programs} programs",
            lambda: (c.zero_(), kernel(a, b, c)), lambda: a @ b.T)  # fmt: skip


def bench_fusedmoe(dev, small):
    mod = _example("fusedmoe/example_fusedmoe_tilelang.py")
    T_, H, D, E, k = (40, 64, 48, 4, 2) if small else (4096, 2048, 1024, 16, 4)
    x, router, Wg, Wu, Wd = mod.make_inputs(T_, H, D, E, dev)

    def torch_moe():
        w, experts = torch.topk(torch.softmax(x.float() @ router.float().T, -1), k, -1)
        out = torch.zeros(T_, H, device=dev, dtype=torch.float32)
        for e in range(E):
            tok, slot = torch.nonzero(experts == e, as_tuple=True)
            h = F.silu(x[tok] @ Wg[e].T) * (x[tok] @ Wu[e].T)
            out.index_add_(0, tok, (h @ Wd[e].T).float() * w[tok, slot, None])
        return out.half()

    mod.moe_forward(x, router, Wg, Wu, Wd, k)  # compile outside the timing
    return (f"tokens={T_} H={H} D={D} E={E} top{k}",
            lambda: mod.moe_forward(x, router, Wg, Wu, Wd, k), torch_moe)  # fmt: skip


BENCHES = {
    "cast": bench_cast,
    "grouped_gemm": bench_grouped_gemm,
    "attention_sink": bench_attention_sink,
    "blocksparse_attention": bench_blocksparse_attention,
    "gemm_streamk": bench_gemm_streamk,
    "fusedmoe": bench_fusedmoe,
}


def main():
    """Parse the flags, run the chosen benchmarks and print one table row each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(BENCHES), default=list(BENCHES))
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu" and not args.small:
        parser.error("no CUDA GPU: only --small runs on a CPU")
    rows = []
    for name in args.only:
        shape, tl_fn, torch_fn = BENCHES[name](dev, args.small)
        tl_ms = _time(tl_fn, args.iters, args.warmup, dev)
        torch_ms = _time(torch_fn, args.iters, args.warmup, dev)
        rows.append((name, shape, tl_ms, torch_ms))
    print(f"{'example':<22} {'shape':<40} {'tilelang ms':>12} {'torch ms':>10} {'speedup':>8}")
    for name, shape, tl_ms, torch_ms in rows:
        print(f"{name:<22} {shape:<40} {tl_ms:>12.4f} {torch_ms:>10.4f} {torch_ms / tl_ms:>8.2f}")


if __name__ == "__main__":
    main()
