"""DeepSeek MLA decoding over a paged KV cache.

The cache holds pages of ``block_size`` rows; ``block_table[b, p]`` is the page holding
positions ``[p * block_size, (p + 1) * block_size)`` of sequence ``b`` and
``cache_seqlens[b]`` its length (at least 1; positions past it are masked, but the rows of
the last page must hold finite values, as in FlashMLA). Each block of ``block_H`` query
heads walks its sequence in tiles of ``block_N`` keys (``block_N`` divides ``block_size``,
so a tile lies in one page). With ``num_split > 1`` the tiles of a sequence are dealt to
``num_split`` blocks, whose partial outputs and log2-sum-exp go to ``T.alloc_global``
workspaces that a second kernel combines.
"""

import argparse

import torch

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[6], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def mla_decode_paged(batch, h_q, h_kv, max_seqlen_pad, dv, dpe, block_N, block_H, num_split,
                     block_size, softmax_scale=None):  # fmt: skip
    """``Output[b, h]``: attention of query ``b`` over the first ``cache_seqlens[b]`` keys."""
    if h_kv != 1:
        raise ValueError(f"MLA decoding has one latent KV head, got h_kv={h_kv}")
    if block_size % block_N or max_seqlen_pad % block_size:
        raise ValueError(
            f"block_N={block_N} must divide block_size={block_size}, which must divide "
            f"max_seqlen_pad={max_seqlen_pad}"
        )
    if h_q % min(block_H, h_q):
        raise ValueError(f"h_q={h_q} must be a multiple of block_H={block_H}")
    if softmax_scale is None:
        softmax_scale = (dv + dpe) ** -0.5
    scale = float(softmax_scale * LOG2E)
    dtype, accum_dtype = T.float16, T.float32
    VALID_BLOCK_H = min(block_H, h_q)
    pages = max_seqlen_pad // block_size
    neg_inf = -T.infinity(accum_dtype)

    @T.macro
    def attend(Q, Q_pe, KV, K_pe, block_table, seqlen, bid, hid, first_tile, tiles,
               acc_o, logsum, scores_max):  # fmt: skip
        """Online softmax over ``tiles`` tiles from ``first_tile`` of sequence ``bid``."""
        Q_shared = T.alloc_shared([block_H, dv], dtype)
        Q_pe_shared = T.alloc_shared([block_H, dpe], dtype)
        KV_shared = T.alloc_shared([block_N, dv], dtype)
        K_pe_shared = T.alloc_shared([block_N, dpe], dtype)
        S_shared = T.alloc_shared([block_H, block_N], dtype)
        acc_s = T.alloc_fragment([block_H, block_N], accum_dtype)
        acc_s_cast = T.alloc_fragment([block_H, block_N], dtype)
        scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
        scores_scale = T.alloc_fragment([block_H], accum_dtype)
        scores_sum = T.alloc_fragment([block_H], accum_dtype)

        T.copy(Q[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, :], Q_shared)
        T.copy(Q_pe[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, :], Q_pe_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, neg_inf)
        for k in T.Pipelined(tiles, num_stages=2):
            pos = (first_tile + k) * block_N  # logical position of the tile's first key
            row = block_table[bid, pos // block_size] * block_size + pos % block_size
            T.copy(KV[row : row + block_N, 0, :], KV_shared)
            T.copy(K_pe[row : row + block_N, 0, :], K_pe_shared)
            T.clear(acc_s)
            T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
            T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True,
                   policy=T.GemmWarpPolicy.FullCol)  # fmt: skip
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.if_then_else(pos + j < seqlen, acc_s[i, j], neg_inf)
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)
            for i in T.Parallel(block_H):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            T.reduce_sum(acc_s, scores_sum, dim=1)
            T.copy(acc_s, S_shared)
            T.copy(S_shared, acc_s_cast)
            for i in T.Parallel(block_H):
                logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(block_H, dv):
                acc_o[i, j] *= scores_scale[i]
            T.gemm(acc_s_cast, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)

    @T.prim_func
    def main_split(
        Q: T.Tensor([batch, h_q, dv], dtype),
        Q_pe: T.Tensor([batch, h_q, dpe], dtype),
        KV: T.Tensor([batch * max_seqlen_pad, h_kv, dv], dtype),
        K_pe: T.Tensor([batch * max_seqlen_pad, h_kv, dpe], dtype),
        block_table: T.Tensor([batch, pages], T.int32),
        cache_seqlens: T.Tensor([batch], T.int32),
        Output: T.Tensor([batch, h_q, dv], dtype),
    ):
        glse = T.alloc_global([batch, h_q, num_split], accum_dtype)
        Output_partial = T.alloc_global([batch, h_q, num_split, dv], accum_dtype)
        with T.Kernel(batch, h_q // VALID_BLOCK_H, num_split, threads=256) as (bx, by, bz):
            acc_o = T.alloc_fragment([block_H, dv], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            T.use_swizzle(10)
            seqlen = cache_seqlens[bx]
            total = T.ceildiv(seqlen, block_N)
            per_split = total // num_split
            extra = total % num_split  # the first `extra` splits take one tile more
            tiles = per_split + T.if_then_else(bz < extra, 1, 0)
            first = per_split * bz + T.min(bz, extra)
            attend(Q, Q_pe, KV, K_pe, block_table, seqlen, bx, by, first, tiles,
                   acc_o, logsum, scores_max)  # fmt: skip
            for i, j in T.Parallel(block_H, dv):  # an empty split: weight 0 in the combine
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            for i in T.Parallel(block_H):
                logsum[i] = T.if_then_else(
                    logsum[i] > 0, T.log2(logsum[i]) + scores_max[i] * scale, neg_inf
                )
            T.copy(logsum, glse[bx, by * VALID_BLOCK_H : (by + 1) * VALID_BLOCK_H, bz])
            T.copy(acc_o, Output_partial[bx, by * VALID_BLOCK_H : (by + 1) * VALID_BLOCK_H, bz, :])

        with T.Kernel(h_q, batch, threads=128) as (by, bz):
            parts = T.alloc_fragment([num_split, dv], accum_dtype)
            lse = T.alloc_fragment([num_split], accum_dtype)
            lse_max = T.alloc_fragment([1], accum_dtype)
            weight_sum = T.alloc_fragment([1], accum_dtype)
            out = T.alloc_fragment([dv], accum_dtype)
            T.copy(glse[bz, by, :], lse)
            T.reduce_max(lse, lse_max, dim=0)
            for s in T.Parallel(num_split):
                lse[s] = T.exp2(lse[s] - lse_max[0])
            T.reduce_sum(lse, weight_sum, dim=0)
            T.copy(Output_partial[bz, by, :, :], parts)
            for s, d in T.Parallel(num_split, dv):
                parts[s, d] *= lse[s] / weight_sum[0]
            T.reduce_sum(parts, out, dim=0)
            T.copy(out, Output[bz, by, :])

    @T.prim_func
    def main_no_split(
        Q: T.Tensor([batch, h_q, dv], dtype),
        Q_pe: T.Tensor([batch, h_q, dpe], dtype),
        KV: T.Tensor([batch * max_seqlen_pad, h_kv, dv], dtype),
        K_pe: T.Tensor([batch * max_seqlen_pad, h_kv, dpe], dtype),
        block_table: T.Tensor([batch, pages], T.int32),
        cache_seqlens: T.Tensor([batch], T.int32),
        Output: T.Tensor([batch, h_q, dv], dtype),
    ):
        with T.Kernel(batch, h_q // VALID_BLOCK_H, threads=256) as (bx, by):
            acc_o = T.alloc_fragment([block_H, dv], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            seqlen = cache_seqlens[bx]
            attend(Q, Q_pe, KV, K_pe, block_table, seqlen, bx, by, 0,
                   T.ceildiv(seqlen, block_N), acc_o, logsum, scores_max)  # fmt: skip
            for i, j in T.Parallel(block_H, dv):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bx, by * VALID_BLOCK_H : (by + 1) * VALID_BLOCK_H, :])

    return main_split if num_split > 1 else main_no_split


def ref_program(q, q_pe, kv, k_pe, block_table, cache_seqlens, block_size, softmax_scale=None):
    """float64 reference: gathers each sequence's pages, then dense attention."""
    if softmax_scale is None:
        softmax_scale = (q.shape[-1] + q_pe.shape[-1]) ** -0.5
    out = torch.empty(q.shape, dtype=torch.float64)
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        rows = torch.cat(
            [torch.arange(int(p) * block_size, (int(p) + 1) * block_size) for p in block_table[b]]
        )[:n]
        keys = torch.cat([kv[rows, 0], k_pe[rows, 0]], -1).double().cpu()
        query = torch.cat([q[b], q_pe[b]], -1).double().cpu()
        attn = (query @ keys.T * softmax_scale).softmax(-1)
        out[b] = attn @ kv[rows, 0].double().cpu()
    return out


def make_inputs(batch, h_q, max_seqlen_pad, dv, dpe, block_size, seqlens, device, seed=None):
    """Random fp16 q/q_pe and a paged cache with a random page permutation."""
    gen = torch.Generator().manual_seed(seed) if seed is not None else None

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float16).to(device)

    pages = max_seqlen_pad // block_size
    table = torch.randperm(batch * pages, generator=gen).view(batch, pages).to(torch.int32)
    seqlens = torch.tensor(seqlens, dtype=torch.int32)
    return (randn(batch, h_q, dv), randn(batch, h_q, dpe),
            randn(batch * max_seqlen_pad, 1, dv), randn(batch * max_seqlen_pad, 1, dpe),
            table.to(device), seqlens.to(device))  # fmt: skip


def main(batch=2, h_q=16, seqlens=(150, 37), max_seqlen_pad=256, dv=64, dpe=32, num_split=2,
         block_N=64, block_H=None, block_size=64, device=None):  # fmt: skip
    """Run the paged kernel on random inputs and check it against :func:`ref_program`."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    block_H = block_H or min(64, h_q)
    kernel = mla_decode_paged(batch, h_q, 1, max_seqlen_pad, dv, dpe, block_N, block_H,
                              num_split, block_size)  # fmt: skip
    inputs = make_inputs(batch, h_q, max_seqlen_pad, dv, dpe, block_size, seqlens, device)
    out = kernel(*inputs)
    ref = ref_program(*inputs, block_size)
    torch.testing.assert_close(out.double().cpu(), ref, rtol=1e-2, atol=1e-2)
    print(f"paged mla decode b={batch} h={h_q} seqlens={list(seqlens)} split={num_split} "
          f"on {device}: matches")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--h_q", type=int, default=128)
    parser.add_argument("--cache_seqlen", type=int, default=8192)
    parser.add_argument("--dv", type=int, default=512)
    parser.add_argument("--dpe", type=int, default=64)
    parser.add_argument("--block_size", type=int, default=64)
    parser.add_argument("--num_split", type=int, default=1)
    a = parser.parse_args()
    pad = -(-a.cache_seqlen // a.block_size) * a.block_size
    main(a.batch, a.h_q, [a.cache_seqlen] * a.batch, pad, a.dv, a.dpe, a.num_split,
         block_size=a.block_size)  # fmt: skip
