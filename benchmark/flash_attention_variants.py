"""FlashAttention variants (examples/flash_attention) vs torch SDPA on the same inputs, one process.

    python benchmark/flash_attention_variants.py [--only fwd gqa varlen bwd] [--iters 50]
        [--batch 4] [--heads 16] [--seq 4096] [--sweep] [--bwd-dims 64 128 256] [--bwd-cases ...]
        [--variant NAME:KEY=VALUE,KEY=VALUE ...]

Rows: bhsd forward at head dims 64/128/256; GQA forward (bshd, 32 query heads on 4 K/V heads);
variable-length forward (``cu_seqlens``, lengths drawn in [seq/2, seq]); backward (dQ, dK, dV
of bhsd at 64/128/256, of GQA, and of bshd at 128 with dQ accumulated row-major (float2
atomics) or in ``make_dq_layout``'s order) against SDPA's backward; each non-causal and causal.
References, each where torch offers it: SDPA restricted to the cuDNN backend, SDPA restricted
to the FLASH backend, and for varlen ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention-2
varlen) or ``aten._flash_attention_forward`` with ``cu_seqlens``; varlen also shows padded SDPA
(what a caller without varlen runs). CUDA events, median of ``--iters`` runs after warm-up.
ratio = reference ms / ours ms (above 1: ours faster). A failing row or reference prints FAILED
with the error and the run goes on. Every row checks ours against the first reference that ran
(relative error of the output, or of dQ/dK/dV) before timing. ``--sweep`` adds forward rows
for other block configs, and backward rows (bhsd) for other backward block configs. Every
backward row is warp-specialized on sm_90a (TMA Q/dO and 1-d TMA lse/Delta boxes); the
``ws`` row reads lse/Delta from global memory instead (``stats_from_global`` of
``example_mha_bwd_bhsd.flashattn_bwd``), for comparison. At head dim 256 a second row runs
64 x 64 blocks (``BWD_D256_N64``: every gemm on wgmma, the score gemms 64 x 32 per
warpgroup instead of 64 x 16, dS K on wgmma instead of mma.sync; benchmark/SASS_AUDIT.md).
``--bwd-dims`` / ``--fwd-dims`` limit the bhsd backward / forward rows to those head dims,
``--bwd-cases`` the backward rows to those named (``dk_first``: head dim 128 in upstream's gemm
order, dK issued before dS^T is stored; the default stores dS^T first and issues dQ then dK;
``d256_pds``: head dim 256 with P^T and dS^T read by the gemms from shared, ``pds_shared``;
``dq_tma`` / ``dq_tma_stages3``: head dim 128 with dQ added by one TMA bulk reduction per
block from a float32 shared tile, ``dq_tma_reduce``, 2 / 3 stages).
``--variant`` adds, for every bhsd backward, bhsd forward, GQA forward and varlen forward row,
one built with more pass configs (e.g. ``--variant fences:tl.drop_proxy_fences=false``), timed
in the same process (forward variant rows against one reference only).
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
import traceback

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples", "flash_attention"))

import example_gqa_bwd as gqa_bwd  # noqa: E402
import example_gqa_fwd_bshd as gqa_fwd  # noqa: E402
import example_gqa_fwd_varlen as gqa_varlen  # noqa: E402
import example_mha_bwd_bhsd as bwd_bhsd  # noqa: E402
import example_mha_bwd_bshd as bwd_bshd  # noqa: E402
import example_mha_fwd_bhsd as fwd_bhsd  # noqa: E402
from varlen_utils import make_varlen_inputs, random_seqlens  # noqa: E402

from tilelang.profiler import bench  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "benchmark"))
from config_args import config_value, parse_pass_configs, parse_variants  # noqa: E402, F401

BWD_SWEEP = (  # (block_M, block_N, num_stages, threads, stats_from_global) of the bhsd backward
    (128, 32, 2, 256, False),
    (128, 64, 2, 256, False),
    (64, 64, 2, 128, False),
    (64, 32, 2, 128, False),
    (64, 32, 2, 256, False),
)
#: the backward with lse/Delta read from global memory (no lse/Delta tiles), head dim 128
BWD_WS = (128, 64, 2, 256, True)
#: the default backward with dQ accumulated row-major (float2 atomics), head dim 128
BWD_DQ_ROWS = (128, 64, 2, 256, False, False)
#: head dim 256 with 64 x 64 blocks (the default is 64 x 32), issue 13's candidate
BWD_D256_N64 = (64, 64, 2, 256, False)
#: the default head dim 128 backward in upstream's order: dK issued before dS^T goes to shared
#: (``dq_first=False``; the default stores dS^T, then issues dQ and dK back to back)
BWD_DK_FIRST = (128, 64, 2, 256, False, True, False)
#: head dim 256 with P^T and dS^T stored to shared from the accumulators (``pds_shared``):
#: dV and dK read them there (SS) instead of exchanging register fragments between the
#: warpgroups through shared memory (2 barriers a loop instead of 3, 8 LDS instead of 40)
BWD_D256_PDS = (64, 64, 2, 256, False, True, True, True)
#: the default head dim 128 backward with 3 Q/dO stages (the producer two blocks ahead)
BWD_STAGES3 = (128, 64, 3, 256, False)
#: profiling: the default head dim 128 backward without its dQ atomics (dQ wrong, only dK
#: and dV checked): the time the 32 scalar fp32 reductions per thread and iteration cost
BWD_NO_DQ_ATOMICS = (128, 64, 2, 256, False, True, True, False, False)
#: the default head dim 128 backward with dQ staged in a float32 shared tile and added by one
#: TMA bulk tensor reduction per block (``dq_tma_reduce``; dQ row-major), 2 and 3 stages
BWD_DQ_TMA = (128, 64, 2, 256, False, False, True, False, True, True)
BWD_DQ_TMA3 = (128, 64, 3, 256, False, False, True, False, True, True)
#: ``--bwd-cases`` names: the bhsd rows of ``--bwd-dims``, and the extra rows
BWD_CASES = ("bhsd", "d256_64x64", "d256_pds", "gqa", "ws", "dq_rows", "dk_first", "stages3",
             "no_dq_atomics", "dq_tma", "dq_tma_stages3", "bshd")  # fmt: skip
SWEEP = (  # (block_M, block_N, num_stages, threads)
    (128, 64, 2, 128),
    (128, 128, 2, 256),
    (64, 64, 1, 128),
    (128, 64, 2, 256),
)


def sdpa_backend(name):
    """A context manager restricting SDPA to backend ``name`` ("cudnn" / "flash")."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]
    return sdpa_kernel(backend)


def rel_err(got, want):
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


class Table:
    """Prints one line per row: ours, then each reference with its ratio."""

    def __init__(self, iters, device):
        self.iters, self.device = iters, device
        name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke run)"
        print(f"device: {name}, torch {torch.__version__}")
        print(f"{'row':<44} {'ours ms':>8} {'TFLOP/s':>8}  references (ms, ratio = ref / ours)")

    def time(self, fn):
        return bench(fn, warmup=max(5, self.iters // 5), rep=self.iters, device=self.device)

    def row(self, label, flops, ours, refs, check, tol=1e-2):
        """``ours``: a callable; ``refs``: [(name, callable, context factory)]; ``check(out,
        ref_out)`` -> relative error of ours against the first reference that runs."""
        try:
            out = ours()
        except Exception as err:  # noqa: BLE001 - report and go on to the next row
            print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
            if os.environ.get("FA_BENCH_TRACEBACK"):
                traceback.print_exc()
            return
        parts, checked, t = [], False, None
        for name, fn, ctx in refs:
            try:
                with ctx():
                    want = fn()
                    if not checked:
                        err = check(out, want)
                        checked = True
                        if not err < tol:
                            print(f"{label:<44} WRONG (rel err {err:.3g} vs {name})")
                            return
                    t_ref = self.time(fn)
            except Exception as err:  # noqa: BLE001 - a reference torch lacks here
                parts.append(f"{name}: FAILED {type(err).__name__}: {str(err)[:60]}")
                continue
            if t is None:
                t = self.time(ours)
            parts.append(f"{name} {t_ref:.3f} {t_ref / t:5.2f}")
        if t is None:
            try:
                t = self.time(ours)
            except Exception as err:  # noqa: BLE001
                print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                return
            parts.append("(unchecked: no reference ran)")
        print(f"{label:<44} {t:8.3f} {flops / t * 1e-9:8.1f}  " + " | ".join(parts), flush=True)


def fwd_rows(table, args):
    dev = args.device
    b, h, s = args.batch, args.heads, args.seq
    variants = [("", None), *parse_variants(args.variant)]
    for dim in (d for d in (64, 128, 256) if d in args.fwd_dims):
        for causal in (False, True):
            q, k, v = (torch.randn(b, h, s, dim, device=dev, dtype=torch.float16)
                       for _ in range(3))  # fmt: skip
            flops = 4.0 * b * h * s * s * dim * (0.5 if causal else 1.0)
            configs = [("default", fwd_bhsd.default_config(dim), *variant) for variant in variants]
            if args.sweep:
                configs += [(f"{bm}x{bn}/{th}t/{st}s", dict(block_M=bm, block_N=bn,
                             num_stages=st, threads=th), "", None)
                            for bm, bn, st, th in SWEEP]  # fmt: skip
            for name, config, vname, vconfigs in configs:
                label = f"fwd bhsd d={dim} causal={causal} {name}" + (
                    f" [{vname}]" if vname else ""
                )
                try:
                    jit = with_pass_configs(fwd_bhsd.flashattn, vconfigs)
                    kernel = jit(b, h, s, s, dim, causal, **config)
                except Exception as err:  # noqa: BLE001
                    print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                    continue
                ref = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731, B023
                refs = [("cudnn", ref, lambda: sdpa_backend("cudnn"))]
                if not vname:  # variant rows: cuDNN only (device time)
                    refs.append(("flash", ref, lambda: sdpa_backend("flash")))
                table.row(label, flops, lambda: kernel(q, k, v), refs, rel_err)  # noqa: B023


def gqa_rows(table, args):
    dev = args.device
    b, s, h, groups, dim = args.batch, args.seq, 32, 8, 128
    for causal in (False, True):
        q = torch.randn(b, s, h, dim, device=dev, dtype=torch.float16)
        k, v = (torch.randn(b, s, h // groups, dim, device=dev, dtype=torch.float16)
                for _ in range(2))  # fmt: skip
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        flops = 4.0 * b * h * s * s * dim * (0.5 if causal else 1.0)

        def ref(qt=qt, kt=kt, vt=vt, causal=causal):
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
            return out.transpose(1, 2)

        def ref_repeat(qt=qt, kt=kt, vt=vt, causal=causal):  # K/V materialized per query head
            kr, vr = (x.repeat_interleave(groups, dim=1) for x in (kt, vt))
            return F.scaled_dot_product_attention(qt, kr, vr, is_causal=causal).transpose(1, 2)

        for vname, vconfigs in [("", None), *parse_variants(args.variant)]:
            label = f"fwd gqa h={h} kv={h // groups} d={dim} causal={causal}"
            label += f" [{vname}]" if vname else ""
            try:
                jit = with_pass_configs(gqa_fwd.flashattn, vconfigs)
                kernel = jit(b, h, s, dim, causal, groups, **gqa_fwd.default_config(dim))
            except Exception as err:  # noqa: BLE001
                print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                continue
            refs = [("cudnn", ref, lambda: sdpa_backend("cudnn"))]
            if not vname:  # variant rows: cuDNN only (device time)
                refs += [("flash", ref, lambda: sdpa_backend("flash")),
                         ("flash+repeat_kv", ref_repeat, lambda: sdpa_backend("flash"))]  # fmt: skip
            table.row(label, flops, lambda: kernel(q, k, v), refs, rel_err)  # noqa: B023


def torch_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal):
    """FlashAttention-2 varlen through torch: ``varlen_attn`` where it exists, else the aten
    op. Causal is aligned on the right in both, as ours."""
    try:
        from torch.nn.attention.varlen import varlen_attn

        params = inspect.signature(varlen_attn).parameters
        if "window_size" in params:
            window = (-1, 0) if causal else (-1, -1)
            return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window)
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=causal)
    except Exception:  # noqa: BLE001 - older torch, or another signature: the aten op
        out = torch.ops.aten._flash_attention_forward(
            q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False
        )
        return out[0]


def varlen_rows(table, args):
    dev = args.device
    b, h, dim, smax = max(args.batch, 8), args.heads, 128, args.seq
    gen = torch.Generator().manual_seed(0)
    for causal in (False, True):
        lens = random_seqlens(b, smax, gen, min_seqlen=smax // 2)
        q, k, v, cu_q, cu_k, max_q = make_varlen_inputs(lens, lens, h, h, dim, dev)
        flops = 4.0 * h * sum(n * n for n in lens) * dim * (0.5 if causal else 1.0)
        padded = [torch.zeros(b, h, max_q, dim, device=dev, dtype=torch.float16)
                  for _ in range(3)]  # fmt: skip
        for i, n in enumerate(lens):
            for dst, src in zip(padded, (q, k, v)):
                dst[i, :, :n] = src[cu_q[i] : cu_q[i] + n].transpose(0, 1)

        def ref_varlen(q=q, k=k, v=v, cu_q=cu_q, cu_k=cu_k, m=max_q, causal=causal):
            return torch_varlen(q, k, v, cu_q, cu_k, m, m, causal)

        def ref_padded(p=padded, causal=causal):  # time only: padded keys are not masked
            return F.scaled_dot_product_attention(*p, is_causal=causal)

        per_seq = torch.cat([F.scaled_dot_product_attention(
            *(x[cu_q[i] : cu_q[i] + n].transpose(0, 1) for x in (q, k, v)), is_causal=causal
        ).transpose(0, 1) for i, n in enumerate(lens)])  # fmt: skip

        def check(out, _want, per_seq=per_seq):  # vs per-sequence SDPA (lq == lk)
            return rel_err(out, per_seq)

        for vname, vconfigs in [("", None), *parse_variants(args.variant)]:
            label = f"fwd varlen b={b} s<={smax} d={dim} causal={causal}"
            label += f" [{vname}]" if vname else ""
            try:
                jit = with_pass_configs(gqa_varlen.flashattn, vconfigs)
                kernel = jit(b, 1, q.shape[0], k.shape[0], h, dim, causal,
                             **gqa_varlen.default_config(dim))  # fmt: skip
            except Exception as err:  # noqa: BLE001
                print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                continue
            refs = [("fa2-varlen", ref_varlen, contextlib.nullcontext)]
            if not vname:  # variant rows: FA2 varlen only (device time)
                refs.append(("cudnn-padded", ref_padded, lambda: sdpa_backend("cudnn")))
            table.row(label, flops, lambda: kernel(q, k, v, cu_q, cu_k, max_q), refs, check)  # noqa: B023


def _grad_fn(out_fn, leaves, do):
    """A callable running the backward of ``out_fn(*leaves)`` (its forward done once)."""
    out = out_fn(*leaves)

    def run():
        return torch.autograd.grad(out, leaves, do, retain_graph=True)

    return run


_WITH_CONFIGS: dict = {}  # (jit function, pass configs) -> that function re-jitted with them


def with_pass_configs(jit_fn, configs):
    """``jit_fn`` (a ``@tilelang.jit`` function) with ``configs`` added to its pass configs
    (a forward row's ``--variant``); ``jit_fn`` itself when ``configs`` is empty."""
    if not configs:
        return jit_fn
    import tilelang

    key = (id(jit_fn), tuple(sorted(configs.items())))
    if key not in _WITH_CONFIGS:
        options = dict(jit_fn.options)
        options["pass_configs"] = {**(options.get("pass_configs") or {}), **configs}
        options = {k: v for k, v in options.items() if v is not None}
        _WITH_CONFIGS[key] = tilelang.jit(**options)(jit_fn.fn)
    return _WITH_CONFIGS[key]


_REJITTED: dict = {}  # pass configs -> the bhsd backward kernel's jit built with them


@contextlib.contextmanager
def bwd_pass_configs(configs):
    """The bhsd example's backward kernel compiled with ``configs`` added to its pass configs
    while the block runs (the autograd Function looks ``flashattn_bwd`` up at each call)."""
    if not configs:
        yield
        return
    import tilelang

    original = bwd_bhsd.flashattn_bwd
    key = tuple(sorted(configs.items()))
    if key not in _REJITTED:
        options = dict(original.options)
        options["pass_configs"] = {**(options.get("pass_configs") or {}), **configs}
        options = {k: v for k, v in options.items() if v is not None}
        _REJITTED[key] = tilelang.jit(**options)(original.fn)
    bwd_bhsd.flashattn_bwd = _REJITTED[key]
    try:
        yield
    finally:
        bwd_bhsd.flashattn_bwd = original


def with_bwd_pass_configs(fn, configs):
    """``fn`` run under :func:`bwd_pass_configs` (each call: timing runs it many times)."""
    if not configs:
        return fn

    def run():
        with bwd_pass_configs(configs):
            return fn()

    return run


def bwd_rows(table, args):
    dev = args.device
    b, h, s = args.batch, args.heads, args.seq
    dims = [d for d in (64, 128, 256) if d in args.bwd_dims]
    want = set(args.bwd_cases)
    cases = [("bhsd", dim, 1, None) for dim in dims] if "bhsd" in want else []
    cases += [("bhsd", 256, 1, BWD_D256_N64)] if 256 in dims and "d256_64x64" in want else []
    cases += [("bhsd", 256, 1, BWD_D256_PDS)] if 256 in dims and "d256_pds" in want else []
    cases += [("gqa", 128, 4, None)] if 128 in dims and "gqa" in want else []
    if 128 in dims:
        extra = (("ws", BWD_WS), ("dq_rows", BWD_DQ_ROWS), ("dk_first", BWD_DK_FIRST),
                 ("stages3", BWD_STAGES3), ("no_dq_atomics", BWD_NO_DQ_ATOMICS),
                 ("dq_tma", BWD_DQ_TMA), ("dq_tma_stages3", BWD_DQ_TMA3))  # fmt: skip
        cases += [("bhsd", 128, 1, config) for name, config in extra if name in want]
    if args.sweep:
        cases += [("bhsd", dim, 1, c) for dim in dims for c in BWD_SWEEP]
    variants = [("", None), *parse_variants(args.variant)]
    cases = [(*c, v) for c in cases for v in (variants if c[0] == "bhsd" else variants[:1])]
    default_bwd_config = bwd_bhsd.bwd_config
    for layout, dim, groups, sweep, (vname, vconfigs) in cases:
        for causal in (False, True):
            flops = 5 * 2.0 * b * h * s * s * dim * (0.5 if causal else 1.0)
            label = f"bwd {layout} d={dim} groups={groups} causal={causal}"
            # a sweep row: the autograd Function takes its backward blocks from bwd_config
            bwd_bhsd.bwd_config = default_bwd_config
            if sweep is not None:
                bm, bn, st, th, from_global, *rest = sweep
                dq_layout = rest[0] if rest else True
                dq_first = rest[1] if len(rest) > 1 else True
                pds_shared = rest[2] if len(rest) > 2 else False
                dq_atomics = rest[3] if len(rest) > 3 else True
                dq_tma_reduce = rest[4] if len(rest) > 4 else False
                label += f" {bm}x{bn}/{th}t/{st}s" + (" ws" if from_global else "")
                label += ("" if dq_layout else " dq rows") + ("" if dq_first else " dk first")
                label += " pds" if pds_shared else ""
                label += "" if dq_atomics else " NO dQ atomics (dK/dV checked)"
                label += " dq TMA reduce" if dq_tma_reduce else ""
                config = dict(block_M=bm, block_N=bn, num_stages=st, threads=th,
                              stats_from_global=from_global, dq_layout=dq_layout,
                              dq_first=dq_first, pds_shared=pds_shared,
                              dq_atomics=dq_atomics, dq_tma_reduce=dq_tma_reduce)  # fmt: skip
                bwd_bhsd.bwd_config = lambda dim, config=config: config
            label += f" [{vname}]" if vname else ""
            try:
                if layout == "bhsd":
                    shapes = [(b, h, s, dim)] * 3
                    ours_fn = lambda q, k, v, c=causal: bwd_bhsd.attention(q, k, v, c)  # noqa: E731
                    ref_fn = lambda q, k, v, c=causal: F.scaled_dot_product_attention(  # noqa: E731
                        q, k, v, is_causal=c
                    )
                    do = torch.randn(b, h, s, dim, device=dev, dtype=torch.float16)
                else:
                    shapes = [(b, s, h, dim)] + [(b, s, h // groups, dim)] * 2
                    ours_fn = lambda q, k, v, c=causal, g=groups: gqa_bwd.attention(q, k, v, c, g)  # noqa: E731
                    ref_fn = lambda q, k, v, c=causal: F.scaled_dot_product_attention(  # noqa: E731
                        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=c,
                        enable_gqa=True,
                    ).transpose(1, 2)  # fmt: skip
                    do = torch.randn(b, s, h, dim, device=dev, dtype=torch.float16)
                leaves = [torch.randn(*shape, device=dev, dtype=torch.float16).requires_grad_()
                          for shape in shapes]  # fmt: skip
                with bwd_pass_configs(vconfigs):
                    ours = with_bwd_pass_configs(_grad_fn(ours_fn, leaves, do), vconfigs)
            except Exception as err:  # noqa: BLE001
                print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                continue

            def ref_for(backend, ref_fn=ref_fn, leaves=leaves, do=do):
                with sdpa_backend(backend):
                    return _grad_fn(ref_fn, leaves, do)

            refs = []
            for backend in ("cudnn", "flash"):
                try:
                    refs.append((backend, ref_for(backend), lambda b=backend: sdpa_backend(b)))
                except Exception as err:  # noqa: BLE001 - forward of this backend failed
                    print(
                        f"{'':<44} ({backend} forward FAILED: {type(err).__name__}: {str(err)[:80]})"
                    )

            def check(got, want, skip_dq=sweep is not None and not dq_atomics):
                pairs = list(zip(got, want))[1:] if skip_dq else zip(got, want)
                return max(rel_err(g, w) for g, w in pairs)

            table.row(label, flops, ours, refs, check, tol=2e-2)
    bwd_bhsd.bwd_config = default_bwd_config
    if 128 in dims and "bshd" in want:
        bshd_bwd_rows(table, args)


def _bshd_backward(q, k, v, do, causal, dq_layout, device):
    """A callable running the bshd example's backward kernels (Delta, dK/dV/dQ, dQ to fp16)
    on fixed inputs; the forward (O and the LSE) runs once, here."""
    b, s, h, d = q.shape
    o, lse = bwd_bshd.flashattn_fwd(b, h, s, d, causal)(q, k, v)
    pre = bwd_bshd.flashattn_bwd_preprocess(b, h, s, d)
    if device == "cuda":
        config = bwd_bshd.bwd_config(d)
    else:
        config = dict(block_M=64, block_N=64, threads=128, num_stages=1)
    kernel = bwd_bshd.flashattn_bwd(b, h, s, d, causal, dq_layout=dq_layout, **config)
    post = bwd_bshd.flashattn_bwd_postprocess(b, h, s, d) if dq_layout else None

    def run():
        delta = pre(o, do)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        kernel(q, k, v, do, lse, delta, dq, dk, dv)
        return (post(dq) if dq_layout else dq.to(torch.float16)), dk, dv

    return run


def bshd_bwd_rows(table, args):
    """bshd backward (``example_mha_bwd_bshd``): dQ accumulated row-major (float2 atomics on
    sm_90) or in ``make_dq_layout``'s order (scalar atomics, then the postprocess kernel)."""
    dev = args.device
    b, h, s, dim = args.batch, args.heads, args.seq, 128
    if s % 8:
        return  # make_dq_layout needs whole groups of 8 rows
    for causal in (False, True):
        flops = 5 * 2.0 * b * h * s * s * dim * (0.5 if causal else 1.0)
        q, k, v, do = (torch.randn(b, s, h, dim, device=dev, dtype=torch.float16)
                       for _ in range(4))  # fmt: skip
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]

        def ref_fn(q, k, v, c=causal):
            return F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=c
            ).transpose(1, 2)

        refs = []
        for backend in ("cudnn", "flash"):
            try:
                with sdpa_backend(backend):
                    fn = _grad_fn(ref_fn, leaves, do)
                refs.append((backend, fn, lambda b=backend: sdpa_backend(b)))
            except Exception as err:  # noqa: BLE001 - forward of this backend failed
                print(f"{'':<44} ({backend} forward FAILED: {type(err).__name__}: {str(err)[:80]})")

        def check(got, want):
            return max(rel_err(g, w) for g, w in zip(got, want))

        for dq_layout in (False, True):
            label = f"bwd bshd d={dim} causal={causal} " + ("dq_layout" if dq_layout else "dq rows")
            try:
                ours = _bshd_backward(q, k, v, do, causal, dq_layout, dev)
            except Exception as err:  # noqa: BLE001
                print(f"{label:<44} FAILED {type(err).__name__}: {str(err)[:160]}")
                continue
            table.row(label, flops, ours, refs, check, tol=2e-2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=("fwd", "gqa", "varlen", "bwd"),
                        default=["fwd", "gqa", "varlen", "bwd"])  # fmt: skip
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--sweep", action="store_true", help="forward: also other block configs")
    parser.add_argument("--bwd-dims", type=int, nargs="+", default=[64, 128, 256],
                        help="head dims of the backward rows (64 128 256)")  # fmt: skip
    parser.add_argument("--bwd-cases", nargs="+", choices=BWD_CASES, default=list(BWD_CASES),
                        help="backward rows to run (bhsd: one per --bwd-dims; the others are "
                        "extra configs, gqa and bshd the other examples)")  # fmt: skip
    parser.add_argument("--fwd-dims", type=int, nargs="+", default=[64, 128, 256],
                        help="head dims of the bhsd forward rows (64 128 256)")  # fmt: skip
    parser.add_argument("--variant", nargs="*", default=[], metavar="NAME:KEY=VALUE,...",
                        help="bhsd/GQA/varlen forward and bhsd backward: rows built with "
                        "these pass configs added")  # fmt: skip
    parser.add_argument(
        "--device", default="cuda", help="cpu: a smoke run of the script (tiny shapes)"
    )
    parser.add_argument(
        "--pass-configs", nargs="*", default=[], metavar="KEY=VALUE",
        help="pass configs for every example kernel, as its @tilelang.jit(pass_configs=) would "
        "give them (e.g. tl.wgmma_overlap=true)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.pass_configs:
        configs = parse_pass_configs(args.pass_configs)
        for module in (gqa_bwd, gqa_fwd, gqa_varlen, bwd_bhsd, bwd_bshd, fwd_bhsd):
            for name in dir(module):
                fn = getattr(module, name)
                if hasattr(fn, "options") and hasattr(fn, "get_tir"):  # a @tilelang.jit function
                    fn.options["pass_configs"] = {
                        **(fn.options.get("pass_configs") or {}),
                        **configs,
                    }
        print(f"pass configs: {configs}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (or --device cpu for a smoke run)")
    table = Table(args.iters, args.device)
    groups = {"fwd": fwd_rows, "gqa": gqa_rows, "varlen": varlen_rows, "bwd": bwd_rows}
    for name in args.only:
        try:
            groups[name](table, args)
        except Exception as err:  # noqa: BLE001 - a whole group failed: report, go on
            print(f"{name}: FAILED {type(err).__name__}: {str(err)[:200]}")
            traceback.print_exc()


if __name__ == "__main__":
    main()
