"""DeepSeek MLA decoding: the example kernels (``examples/deepseek_mla``) vs a torch reference.

    python benchmark/mla_decode.py [--batch 64] [--heads 128] [--kv_ctx 8192] [--dim 512]
        [--pe_dim 64] [--splits 1 2 4] [--no-paged] [--block_size 64] [--device cpu]
        [--variant NAME:KEY=VALUE,KEY=VALUE ...] [--program NAME:KEY=VALUE,...]

Decoding reads the whole KV cache once (``batch * kv_ctx * (dim + pe_dim)`` fp16 values) and
does little arithmetic per byte, so the bound is memory bandwidth. The script measures the
device's copy bandwidth in the same run (``dst.copy_(src)`` of 1 GiB: bytes read + written
over time) and reports each kernel's time against the roofline ``KV bytes / bandwidth``
(``of roof`` = roofline time / kernel time; 1.00 is the bound). Rows: torch (fp16 matmuls,
fp32 softmax), the dense kernel per KV split count, and the paged kernel (pages of
``--block_size`` rows in a random page order, every sequence ``kv_ctx`` long, so the same
bytes) per KV split count. Upstream TileLang reports 0.326 ms on an H800/H100-class GPU for
batch 64, 128 heads, 8192 keys, 512 + 64 (no split). CUDA events, median of ``--iters`` runs
after warm-up; each row checks its output against the float64 reference first (``max err``).
``--device cpu`` is a smoke run of the script at small shapes (the CPU backend, wall clock).
``--variant`` adds rows of both kernels built with more pass configs (on top of the examples'
fast math), timed in the same run: e.g. ``--variant
old:tl.reduce_merged_exchange=false`` (issue 13's A/B of the cross-warpgroup reductions,
benchmark/SASS_AUDIT.md). ``--program NAME:KEY=VALUE,...`` adds dense rows (after each
variant's) of the example built with those keyword arguments: program variants, e.g.
``q256:q_reg_cols=256`` (256 latent query columns in registers: their score gemm reads only
the key tile from shared memory, wgmma's RS form on sm_90a), ``rs:defer_rowsum=true``
(row sums reduced once after the loop) or ``n32:block_N=32,num_stages=4`` (tile sizes too).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import tilelang

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples", "deepseek_mla"))

import example_mla_decode as dense  # noqa: E402
import example_mla_decode_paged as paged  # noqa: E402

from tilelang.profiler import bench  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "benchmark"))
from config_args import config_value, parse_pass_configs, parse_variants  # noqa: E402, F401

#: shapes of a ``--device cpu`` smoke run (batch, heads, kv_ctx, dim, pe_dim, block_H)
CPU_SHAPES = dict(batch=2, heads=16, kv_ctx=256, dim=64, pe_dim=32, block_H=16)


def torch_mla(q, q_pe, kv, k_pe, scale):
    """fp16 matmuls, fp32 softmax: what a plain torch implementation does."""
    latent = kv[:, :, 0]
    scores = torch.matmul(q, latent.transpose(1, 2))
    scores += torch.matmul(q_pe, k_pe[:, :, 0].transpose(1, 2))
    probs = torch.softmax(scores.float() * scale, dim=-1).to(q.dtype)
    return torch.matmul(probs, latent)


def kv_cache_bytes(batch, kv_ctx, dim, pe_dim, elem_bytes=2) -> int:
    """Bytes of the KV cache one decoding step reads (latent + rope part, fp16)."""
    return batch * kv_ctx * (dim + pe_dim) * elem_bytes


def copy_bandwidth(iters, device="cuda", numel=1 << 29) -> float:
    """Bytes per second of a device-to-device copy of ``numel`` fp16 values (read + write)."""
    src = torch.empty(numel, dtype=torch.float16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), warmup=5, rep=iters, device=device)
    return 2 * src.numel() * src.element_size() / (ms * 1e-3)


def format_rows(rows, kv_bytes, roof_ms, t_torch) -> list[str]:
    """The table: one line per ``(name, ms, max err)`` row with its bandwidth, its fraction of
    the roofline (roofline ms / ms) and its speed-up over torch."""
    out = [f"{'kernel':<30}{'ms':>9}{'GB/s':>9}{'of roof':>9}{'vs torch':>10}{'max err':>10}"]
    for name, t, err in rows:
        out.append(f"{name:<30}{t:9.3f}{kv_bytes / t / 1e6:9.0f}{roof_ms / t:9.2f}"
                   f"{t_torch / t:10.2f}{err:10.1e}")  # fmt: skip
    return out


def variant_kernel(jitted, out_idx, configs, *args, **kwargs):
    """``jitted``'s kernel for ``args`` compiled with its own pass configs plus ``configs``."""
    base = dict(jitted.pass_configs or {})
    return tilelang.compile(jitted.get_tir(*args, **kwargs), out_idx=out_idx,
                            pass_configs={**base, **configs})  # fmt: skip


def _max_err(out, ref) -> float:
    return (out.double().cpu() - ref.double().cpu()).abs().max().item()


def run(args) -> list[str]:
    """Measure every row (see the module doc) and return the printed lines."""
    dev = args.device
    b, h, s, d, p = args.batch, args.heads, args.kv_ctx, args.dim, args.pe_dim
    scale = (d + p) ** -0.5
    torch.manual_seed(0)
    inputs = dense.make_inputs(b, h, s, d, p, dev)
    kv_bytes = kv_cache_bytes(b, s, d, p)
    bw = copy_bandwidth(args.iters, dev, numel=(1 << 29) if dev == "cuda" else (1 << 22))
    roof_ms = kv_bytes / bw * 1e3
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu (smoke run)"
    lines = [f"MLA decode b={b} h={h} kv={s} d={d}+{p}; {name}",
             f"KV cache {kv_bytes / 1e6:.1f} MB; copy bandwidth {bw / 1e12:.3f} TB/s -> "
             f"roofline {roof_ms:.4f} ms"]  # fmt: skip
    for line in lines:
        print(line, flush=True)

    def timed(fn):
        return bench(fn, warmup=max(2, args.iters // 5), rep=args.iters, device=dev)

    ref = dense.ref_program(*inputs)
    t_torch = timed(lambda: torch_mla(*inputs, scale))
    rows = [("torch", t_torch, _max_err(torch_mla(*inputs, scale), ref))]
    variants = [("", None), *parse_variants(args.variant)]
    programs = [("", {}), *parse_variants(args.program)]
    for split in args.splits:
        for vname, configs in variants:
            for pname, options in programs:
                # a program variant may also set block_N / block_H (keyword arguments)
                tiles = {"block_N": args.block_N, "block_H": args.block_H, **options}
                dims = (b, h, 1, s, d, p, tiles.pop("block_N"), tiles.pop("block_H"), split)
                if configs is None:
                    kernel = dense.flashattn(*dims, **tiles)
                else:
                    kernel = variant_kernel(dense.flashattn, [4], configs, *dims, **tiles)
                err = _max_err(kernel(*inputs), ref)
                tag = "".join(f" {n}" for n in (vname, pname) if n)
                rows.append((f"tilelang split={split}{tag}", timed(lambda k=kernel: k(*inputs)),
                             err))  # fmt: skip
    if args.paged:
        bs = args.block_size
        pad = -(-s // bs) * bs
        pinputs = paged.make_inputs(b, h, pad, d, p, bs, [s] * b, dev, seed=0)
        pref = paged.ref_program(*pinputs, bs)
        for split in args.splits:
            for vname, configs in variants:
                dims = (b, h, 1, pad, d, p, args.block_N, args.block_H, split, bs)
                if configs is None:
                    kernel = paged.mla_decode_paged(*dims)
                else:
                    kernel = variant_kernel(paged.mla_decode_paged, [6], configs, *dims)
                err = _max_err(kernel(*pinputs), pref)
                tag = f" {vname}" if vname else ""
                rows.append((f"tilelang paged{bs} split={split}{tag}",
                             timed(lambda k=kernel: k(*pinputs)), err))  # fmt: skip
    table = format_rows(rows, kv_bytes, roof_ms, t_torch)
    for line in table:
        print(line, flush=True)
    return lines + table


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None, help="default 64 (cpu: 2)")
    parser.add_argument("--heads", type=int, default=None, help="default 128 (cpu: 16)")
    parser.add_argument("--kv_ctx", type=int, default=None, help="default 8192 (cpu: 256)")
    parser.add_argument("--dim", type=int, default=None, help="default 512 (cpu: 64)")
    parser.add_argument("--pe_dim", type=int, default=None, help="default 64 (cpu: 32)")
    parser.add_argument("--block_N", type=int, default=64)
    parser.add_argument("--block_H", type=int, default=None, help="default 64 (cpu: 16)")
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--paged", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the paged kernel (default: on)")  # fmt: skip
    parser.add_argument("--block_size", type=int, default=64, help="rows per KV page")
    parser.add_argument("--iters", type=int, default=None, help="default 50 (cpu: 3)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--program", nargs="*", default=[], metavar="NAME:KEY=VALUE,...",
                        help="more dense rows, the example's flashattn with these keyword "
                             "arguments (e.g. q256:q_reg_cols=256,defer_rowsum=true)")  # fmt: skip
    parser.add_argument("--variant", nargs="*", default=[], metavar="NAME:KEY=VALUE,...",
                        help="more rows, built with these pass configs added")  # fmt: skip
    args = parser.parse_args(argv)
    gpu = dict(batch=64, heads=128, kv_ctx=8192, dim=512, pe_dim=64, block_H=64, iters=50)
    defaults = gpu if args.device == "cuda" else {**CPU_SHAPES, "iters": 3}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.block_size % args.block_N:
        parser.error(f"--block_N {args.block_N} must divide --block_size {args.block_size}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("mla_decode.py needs a CUDA GPU (or --device cpu for a smoke run)")
    return run(args)


if __name__ == "__main__":
    main()
