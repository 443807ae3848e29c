"""FlashAttention forward: the upstream-style example kernel vs torch SDPA on the same inputs.

    python benchmark/flash_attention.py [--batch 4] [--heads 16] [--seq 4096] [--dim 128]
        [--variants leading hoist split auto] [--configs 192x128/384/2 ...]
        [--pass-configs KEY=VALUE ...]

CUDA events, median of ``--iters`` runs after warm-up; TFLOP/s counts 4*b*h*s*s*d (half of it
for causal) and the ratio is ours over torch's time inverted (higher is better).
``--variants`` runs every config once per value of the pass config
``tl.pipeline_copy_schedule`` (``leading``: only K's copy pipelined, the schedule before;
``hoist``/``split``/``auto``: every copy, see ``backends/cuda/passes/pipeline_copies.py``);
default: ``auto``. ``--configs`` takes ``bMxbN/threads/stages`` (default 128x128/256/2,
128x64/128/2, 64x64/128/1; at ``--dim 64`` first FlashAttention-3's 192x128/384/2: three
consumer warpgroups of 64 query rows each). More rows per causal setting, 128x128 blocks, 256 threads, 2 stages:
``pipelined`` (``example_mha_fwd_bshd_wgmma_pipelined.py``: upstream's program whose
``T.Pipelined(order=, stage=, group=)`` issues Q @ K^T of block k before the softmax of k
and P @ V of k-1) and ``overlap`` (this example with the pass config ``tl.wgmma_overlap``,
which derives that schedule where the annotations do not apply), and ``serial`` (this
example without either: each gemm waited for where it is issued, the session-5 schedule,
for an A/B in the same process), ``nopp`` (this example with ``tl.ws_pingpong = False``: the
consumer warpgroups do not take turns at the gemms; at ``--dim 64`` also 192x128/384t, whose
three warpgroups take turns round robin by default), ``persist`` (non-causal: this example
with ``tl.persistent_tiles``, one block per SM walking the tiles), ``perwarp``
(``tl.ws_release_per_warp``: one stage release per consumer warp, not per thread; at
``--dim 64`` also 192x128/384t), ``nanmax`` (this
example with ``tl.nan_propagating_max``: float max as a four-instruction select, the form
before ``transform/float_min_max.py``);
``--no-overlap-rows`` leaves them out. More causal rows:
``inorder`` (128x128 blocks, 256 threads, 2 stages, ``tl.heavy_blocks_first = False``): the
blocks in launch order instead of heaviest first (``backends/cuda/passes/
heavy_blocks_first.py``), for an A/B of the block order against the ``auto`` row of the same
config; ``--pass-configs tl.heavy_blocks_first=false`` turns it off for every row. Likewise
``masked`` (``tl.unswitch_uniform_select = False``: the causal mask selected per element in
every K block, not only in the diagonal ones: ``transform/unswitch_uniform_select.py``) and
``neither`` (both off).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples", "flash_attention"))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

import plotting  # noqa: E402
from config_args import parse_pass_configs  # noqa: E402
from example_mha_fwd_bshd import flashattn  # noqa: E402
from example_mha_fwd_bshd_wgmma_pipelined import flashattn as flashattn_pipelined  # noqa: E402

import tilelang  # noqa: E402
from tilelang.profiler import bench  # noqa: E402

CONFIGS = ((128, 128, 2, 256), (128, 64, 2, 128), (64, 64, 1, 128))
#: Head dim 64 also runs FlashAttention-3's tile: 192 query rows on three consumer
#: warpgroups (384 threads + the producer warpgroup, registers 160 / 24).
CONFIGS_D64 = ((192, 128, 2, 384),)


def parse_config(text):
    """``bMxbN/threads/stages`` (e.g. ``192x128/384/2``) as ``(bM, bN, stages, threads)``;
    argparse reports a malformed one with the option's name."""
    try:
        tile, threads, stages = text.split("/")
        bm, bn = tile.split("x")
        config = (int(bm), int(bn), int(stages), int(threads))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected bMxbN/threads/stages, e.g. 192x128/384/2"
        ) from None
    if min(config) <= 0 or config[3] % 32:
        raise argparse.ArgumentTypeError(
            f"{text!r}: sizes must be positive and threads a multiple of 32"
        )
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=("leading", "hoist", "split", "auto"),
        default=["auto"],
        help="copy schedules to compare (pass config tl.pipeline_copy_schedule)",
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        type=parse_config,
        default=None,
        help="bMxbN/threads/stages configs, e.g. 192x128/384/2 (default: 128x128/256/2 "
        "128x64/128/2 64x64/128/1, and 192x128/384/2 at --dim 64)",
    )
    parser.add_argument(
        "--pass-configs",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="extra pass configs for every kernel, e.g. tl.disable_tma_lower=false",
    )
    parser.add_argument(
        "--no-overlap-rows",
        action="store_true",
        help="leave out the pipelined (wgmma_pipelined example) and overlap rows",
    )
    plotting.add_plot_argument(parser)
    args = parser.parse_args()
    extra = parse_pass_configs(args.pass_configs)
    plotting.check(args.plot)
    plot_rows = []
    b, h, s, d = args.batch, args.heads, args.seq, args.dim
    configs = args.configs or (CONFIGS_D64 + CONFIGS if d <= 64 else CONFIGS)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(
        f"{'causal':>7} {'schedule':>8} {'config':>22} {'ms':>9} {'TFLOP/s':>9} {'torch ms':>9} {'ratio':>6}"
    )
    for causal in (False, True):
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        ref_fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)  # noqa: E731, B023
        ref = ref_fn().transpose(1, 2)
        t_ref = bench(ref_fn, warmup=10, rep=args.iters, device="cuda")
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        rows = [(c, var, flashattn, {}) for c in configs for var in args.variants]
        if not args.no_overlap_rows:
            rows.append(((128, 128, 2, 256), "pipelined", flashattn_pipelined, {}))
            rows.append(((128, 128, 2, 256), "overlap", flashattn, {"tl.wgmma_overlap": True}))
            serial = {"tl.pipeline_order": False, "tl.wgmma_wait_sinking": False}
            rows.append(((128, 128, 2, 256), "serial", flashattn, serial))
            # without the consumer warpgroups' turns at the gemms (FA-3's scheduler barrier)
            rows.append(((128, 128, 2, 256), "nopp", flashattn, {"tl.ws_pingpong": False}))
            if not causal:  # one block per SM walking the tiles (not for causal loops)
                persist = {"tl.persistent_tiles": True}
                rows.append(((128, 128, 2, 256), "persist", flashattn, persist))
            # the row max as TIRx's NaN-propagating select (the form before float_min_max)
            rows.append(((128, 128, 2, 256), "nanmax", flashattn, {"tl.nan_propagating_max": True}))
            # one stage release per consumer warp instead of per thread
            per_warp = {"tl.ws_release_per_warp": True}
            rows.append(((128, 128, 2, 256), "perwarp", flashattn, per_warp))
            if d <= 64:  # three warpgroups without their turns (round robin by default)
                rows.append(((192, 128, 2, 384), "nopp", flashattn, {"tl.ws_pingpong": False}))
                rows.append(((192, 128, 2, 384), "perwarp", flashattn, per_warp))
        if causal:  # the work of block bx grows with bx: heaviest first (default) vs launch order
            inorder = {"tl.heavy_blocks_first": False}
            rows.append(((128, 128, 2, 256), "inorder", flashattn, inorder))
            # the mask selected per element in every K block (no uniform-select unswitching)
            masked = {"tl.unswitch_uniform_select": False}
            rows.append(((128, 128, 2, 256), "masked", flashattn, masked))
            rows.append(((128, 128, 2, 256), "neither", flashattn, {**inorder, **masked}))
        for (bm, bn, stages, threads), variant, program, row_configs in rows:
            label = f"{variant:>8} {bm}x{bn}/{threads}t/{stages}s"
            schedule = variant if variant in ("leading", "hoist", "split", "auto") else "auto"
            try:
                tir = program.get_tir(
                    b, h, s, d, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
                )
                kernel = tilelang.compile(
                    tir,
                    out_idx=[3],
                    target="cuda",
                    pass_configs={"tl.pipeline_copy_schedule": schedule, **row_configs, **extra},
                )
                out = kernel(q, k, v)
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err < 1e-2:
                    print(f"{str(causal):>7} {label:>31}  wrong result (rel err {err:.3g})")
                    plot_rows.append(
                        {"group": f"causal={causal}", "label": label.strip(), "ratio": None}
                    )
                    continue
                t = bench(lambda: kernel(q, k, v), warmup=10, rep=args.iters, device="cuda")  # noqa: B023
                plot_rows.append(
                    {"group": f"causal={causal}", "label": label.strip(), "ratio": t_ref / t}
                )
                print(
                    f"{str(causal):>7} {label:>31} {t:9.3f} {flops / t / 1e9:9.1f} {t_ref:9.3f} {t_ref / t:6.2f}"
                )
            except Exception as err:  # noqa: BLE001 - report and go on to the next config
                print(
                    f"{str(causal):>7} {label:>31}  failed: {type(err).__name__}: {str(err)[:120]}"
                )
                plot_rows.append(
                    {"group": f"causal={causal}", "label": label.strip(), "ratio": None}
                )
    if plot_rows:
        plotting.plot_ratios(
            plot_rows, args.plot, title=f"FlashAttention fwd / torch SDPA, b={b} h={h} s={s} d={d}"
        )


if __name__ == "__main__":
    main()
