"""DeepSeek MLA decoding: the example kernel (``examples/deepseek_mla``) vs a torch reference.

    python benchmark/mla_decode.py [--batch 64] [--heads 128] [--kv_ctx 8192] [--dim 512]
        [--pe_dim 64] [--splits 1 2 4] [--paged]

Decoding reads the whole KV cache once (``batch * kv_ctx * (dim + pe_dim)`` fp16 values) and
does little arithmetic per byte, so the bound is memory bandwidth. The script measures the
device's copy bandwidth in the same run (``dst.copy_(src)`` of 1 GiB: bytes read + written
over time) and reports each kernel's time against the roofline ``KV bytes / bandwidth``.
Upstream TileLang reports 0.326 ms on an H800/H100-class GPU for batch 64, 128 heads, 8192
keys, 512 + 64 (no split). CUDA events, median of ``--iters`` runs after warm-up.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples", "deepseek_mla"))

import example_mla_decode as dense  # noqa: E402
import example_mla_decode_paged as paged  # noqa: E402

from tilelang.profiler import bench  # noqa: E402


def torch_mla(q, q_pe, kv, k_pe, scale):
    """fp16 matmuls, fp32 softmax: what a plain torch implementation does."""
    latent = kv[:, :, 0]
    scores = torch.matmul(q, latent.transpose(1, 2))
    scores += torch.matmul(q_pe, k_pe[:, :, 0].transpose(1, 2))
    probs = torch.softmax(scores.float() * scale, dim=-1).to(q.dtype)
    return torch.matmul(probs, latent)


def copy_bandwidth(iters) -> float:
    """Bytes per second of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), warmup=5, rep=iters, device="cuda")
    return 2 * src.numel() * src.element_size() / (ms * 1e-3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--heads", type=int, default=128)
    parser.add_argument("--kv_ctx", type=int, default=8192)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--pe_dim", type=int, default=64)
    parser.add_argument("--block_N", type=int, default=64)
    parser.add_argument("--block_H", type=int, default=64)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--paged", action="store_true", help="also time the paged kernel")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("mla_decode.py needs a CUDA GPU")
    b, h, s, d, p = args.batch, args.heads, args.kv_ctx, args.dim, args.pe_dim
    scale = (d + p) ** -0.5
    torch.manual_seed(0)
    inputs = dense.make_inputs(b, h, s, d, p, "cuda")
    kv_bytes = b * s * (d + p) * 2
    bw = copy_bandwidth(args.iters)
    roof_ms = kv_bytes / bw * 1e3
    print(f"MLA decode b={b} h={h} kv={s} d={d}+{p}; {torch.cuda.get_device_name()}")
    print(f"KV cache {kv_bytes / 1e6:.0f} MB; copy bandwidth {bw / 1e12:.2f} TB/s -> "
          f"roofline {roof_ms:.3f} ms")  # fmt: skip

    ref = dense.ref_program(*inputs).to("cuda")
    t_torch = bench(lambda: torch_mla(*inputs, scale), warmup=5, rep=args.iters, device="cuda")
    err = (torch_mla(*inputs, scale).double() - ref).abs().max().item()
    rows = [("torch", t_torch, err)]
    for split in args.splits:
        kernel = dense.flashattn(b, h, 1, s, d, p, args.block_N, args.block_H, split)
        err = (kernel(*inputs).double() - ref).abs().max().item()
        t = bench(lambda k=kernel: k(*inputs), warmup=10, rep=args.iters, device="cuda")
        rows.append((f"tilelang split={split}", t, err))
    if args.paged:
        block_size = 64
        pinputs = paged.make_inputs(b, h, s, d, p, block_size, [s] * b, "cuda", seed=0)
        pref = paged.ref_program(*pinputs, block_size).to("cuda")
        for split in args.splits:
            kernel = paged.mla_decode_paged(b, h, 1, s, d, p, args.block_N, args.block_H,
                                            split, block_size)  # fmt: skip
            err = (kernel(*pinputs).double() - pref).abs().max().item()
            t = bench(lambda k=kernel: k(*pinputs), warmup=10, rep=args.iters, device="cuda")
            rows.append((f"tilelang paged split={split}", t, err))
    print(f"{'kernel':<28}{'ms':>9}{'GB/s':>9}{'of roof':>9}{'vs torch':>10}{'max err':>10}")
    for name, t, err in rows:
        print(f"{name:<28}{t:9.3f}{kv_bytes / t / 1e6:9.0f}{roof_ms / t:9.2f}"
              f"{t_torch / t:10.2f}{err:10.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
