"""Variable-length multi-head attention forward (``cu_seqlens``), as upstream TileLang's
example: the GQA varlen kernel of ``example_gqa_fwd_varlen.py`` with one query head per K/V
head. Q/K/V are packed ``(total_tokens, heads, dim)``; see that file for the masking rules.

    python examples/flash_attention/example_mha_fwd_varlen.py --batch 4 --seq_len 1000 --is_causal
"""

import argparse
import itertools

import torch
from example_gqa_fwd_varlen import default_config, varlen_program
from varlen_utils import make_varlen_inputs, random_seqlens, ref_program_varlen

import tilelang


def get_configs():
    """The configs ``--tune`` tries (block_M, block_N, num_stages, threads)."""
    space = dict(block_M=[64, 128], block_N=[64, 128], num_stages=[1, 2], threads=[128, 256])
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


@tilelang.jit(out_idx=[6])
def flashattn(batch_size, UQ, UKV, heads, dim, is_causal, block_M=64, block_N=64, num_stages=1,
              threads=128):  # fmt: skip
    """``kernel(Q_unpad, K_unpad, V_unpad, cu_seqlens_q, cu_seqlens_k, max_seqlen_q) -> O``;
    Q/K/V/O ``(UQ or UKV, heads, dim)`` float16."""
    return varlen_program(batch_size, 1, UQ, UKV, heads, dim, is_causal, block_M, block_N,
                          num_stages, threads)  # fmt: skip


def main(batch=8, heads=64, seq_len=2048, dim=128, causal=False, tune=False, device=None,
         seed=0, **config):  # fmt: skip
    """Random query and key lengths in ``[seq_len - 20, seq_len]`` per sequence (as upstream's
    padding masks), checked against the per-sequence float64 reference; on CUDA also timed.
    ``tune``: pick the config with the autotuner (CUDA)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    lens_q = random_seqlens(batch, seq_len, gen, min_seqlen=max(1, seq_len - 20))
    lens_k = random_seqlens(batch, seq_len, gen, min_seqlen=max(1, seq_len - 20))
    q, k, v, cu_q, cu_k, max_q = make_varlen_inputs(lens_q, lens_k, heads, heads, dim, device)
    args = (batch, q.shape[0], k.shape[0], heads, dim, causal)
    if tune:
        with tilelang.autotuner.set_autotune_inputs(q, k, v, cu_q, cu_k, max_q):
            kernel = tilelang.autotune(configs=get_configs(), warmup=10, rep=20)(flashattn)(*args)
        print(f"best config: {kernel.config}, {kernel.latency:.3f} ms")
    else:
        if not config:
            config = default_config(dim) if device == "cuda" else {}
        kernel = flashattn(*args, **config)
    out = kernel(q, k, v, cu_q, cu_k, max_q)
    ref = ref_program_varlen(q, k, v, cu_q, cu_k, causal)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(f"mha fwd varlen b={batch} h={heads} lens_q={lens_q} lens_k={lens_k} d={dim} "
          f"causal={causal} on {device}: matches")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        pairs = sum(a * b for a, b in zip(lens_q, lens_k))
        flops = 4.0 * heads * pairs * dim * (0.5 if causal else 1.0)
        t = bench(lambda: kernel(q, k, v, cu_q, cu_k, max_q), warmup=25, rep=100, device=device)
        print(f"tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s)")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8, help="batch size")
    parser.add_argument("--heads", type=int, default=64, help="heads")
    parser.add_argument("--seq_len", type=int, default=2048, help="sequence length")
    parser.add_argument("--dim", type=int, default=128, help="dim")
    parser.add_argument("--is_causal", action="store_true", default=False, help="causal attention")
    parser.add_argument("--tune", action="store_true", default=False, help="tune the kernel")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.is_causal, args.tune)
