"""DeepSeek multi-head latent attention (MLA), decoding: one query token per sequence.

All ``heads`` query heads share one latent KV head: a key is the ``dim``-wide latent row plus
a ``pe_dim``-wide rotary part, and the value is the latent row itself. A block takes
``block_H`` query heads of one sequence and runs the online softmax over the KV cache in
tiles of ``block_N`` keys (two gemms for the scores, one for the output).

With ``num_split > 1`` the cache is cut into ``num_split`` slices, one block each, writing a
partial output and its log2-sum-exp into ``T.alloc_global`` workspaces; a second
``T.Kernel`` of the same function combines the slices with LSE weights. KV lengths need
not be multiples of ``block_N`` or ``num_split`` (the tail keys are masked).
"""

import argparse

import torch

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[4], pass_configs={tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def flashattn(batch, heads, kv_head_num, seqlen_kv, dim, pe_dim, block_N, block_H, num_split,
              softmax_scale=None, q_reg_cols=0, defer_rowsum=False, num_stages=2):  # fmt: skip
    """``Output[b, h] = softmax([Q|Q_pe][b, h] . [KV|K_pe][b]^T * softmax_scale) . KV[b]``.

    ``q_reg_cols`` (a multiple of 16 below ``dim``; 0: none) latent columns of the block's
    queries are held in registers for the whole loop: their part of the scores is a gemm
    with A in registers (on sm_90a wgmma's RS form, which reads only the key tile from
    shared memory), the other columns stay in ``Q_shared``.

    ``defer_rowsum``: the softmax row sums are kept per score element (a fragment shaped
    like the score tile, rescaled and accumulated elementwise each tile) and reduced over the
    keys once after the loop, instead of a row reduction per tile (with the keys split
    between warpgroups, each such reduction is an exchange through shared memory).
    ``num_stages``: key tiles in the load pipeline (2: two tiles of 64 keys fill shared
    memory next to ``Q_shared``; smaller ``block_N`` or ``q_reg_cols`` leave room for more)."""
    if kv_head_num != 1:
        raise ValueError(f"MLA decoding has one latent KV head, got kv_head_num={kv_head_num}")
    if not (0 <= q_reg_cols < dim and q_reg_cols % 16 == 0):
        raise ValueError(f"q_reg_cols={q_reg_cols} must be a multiple of 16 in [0, dim={dim})")
    if heads % min(block_H, heads):
        raise ValueError(f"heads={heads} must be a multiple of block_H={block_H}")
    if softmax_scale is None:
        softmax_scale = (dim + pe_dim) ** -0.5
    scale = float(softmax_scale * LOG2E)  # scores in log2 units: exp2 instead of exp
    dtype, accum_dtype = T.float16, T.float32
    VALID_BLOCK_H = min(block_H, heads)
    split_len = T.ceildiv(seqlen_kv, num_split)
    # Mask keys past the end of the slice only where a tile can run past it.
    masked = seqlen_kv % block_N != 0 or (num_split > 1 and split_len % block_N != 0)
    neg_inf = -T.infinity(accum_dtype)

    @T.macro
    def attend(Q, Q_pe, KV, K_pe, bid, hid, kv_begin, kv_end, acc_o, logsum, scores_max):
        """Online softmax of the block's heads over keys [kv_begin, kv_end) of sequence bid:
        leaves the unnormalised output, the row sums and the row maxima (log2 units / scale)."""
        Q_shared = T.alloc_shared([block_H, dim - q_reg_cols], dtype)
        Q_pe_shared = T.alloc_shared([block_H, pe_dim], dtype)
        KV_shared = T.alloc_shared([block_N, dim], dtype)
        K_pe_shared = T.alloc_shared([block_N, pe_dim], dtype)
        S_shared = T.alloc_shared([block_H, block_N], dtype)
        acc_s = T.alloc_fragment([block_H, block_N], accum_dtype)
        scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
        scores_scale = T.alloc_fragment([block_H], accum_dtype)
        scores_sum = T.alloc_fragment([block_H], accum_dtype)
        T.annotate_layout({S_shared: tilelang.layout.make_swizzled_layout(S_shared)})

        T.copy(Q[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, q_reg_cols:], Q_shared)
        if q_reg_cols:
            Q_regs = T.alloc_fragment([block_H, q_reg_cols], dtype)
            T.copy(Q[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, :q_reg_cols], Q_regs)
        T.copy(Q_pe[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, :], Q_pe_shared)
        T.fill(acc_o, 0)
        T.fill(logsum, 0)
        T.fill(scores_max, neg_inf)
        if defer_rowsum:
            sums = T.alloc_fragment([block_H, block_N], accum_dtype)
            T.fill(sums, 0)
        for k in T.Pipelined(T.ceildiv(kv_end - kv_begin, block_N), num_stages=num_stages):
            start = kv_begin + k * block_N
            T.copy(KV[bid, start : start + block_N, 0, :], KV_shared)
            T.copy(K_pe[bid, start : start + block_N, 0, :], K_pe_shared)
            T.gemm(Q_shared, KV_shared[:, q_reg_cols:], acc_s, transpose_B=True,
                   policy=T.GemmWarpPolicy.FullCol, clear_accum=True)  # fmt: skip
            T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True,
                   policy=T.GemmWarpPolicy.FullCol)  # fmt: skip
            if q_reg_cols:  # last: its wait (the RS form waits for its group) is the chain's
                T.gemm(Q_regs, KV_shared[:, :q_reg_cols], acc_s, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullCol)  # fmt: skip
            if masked:
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(start + j < kv_end, acc_s[i, j], neg_inf)
            T.copy(scores_max, scores_max_prev)
            T.reduce_max(acc_s, scores_max, dim=1, clear=False)  # max with the previous tiles
            for i in T.Parallel(block_H):
                scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
            for i, j in T.Parallel(block_H, block_N):
                acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
            if defer_rowsum:
                for i, j in T.Parallel(block_H, block_N):
                    sums[i, j] = sums[i, j] * scores_scale[i] + acc_s[i, j]
            else:
                T.reduce_sum(acc_s, scores_sum, dim=1)
            T.copy(acc_s, S_shared)
            if not defer_rowsum:
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] *= scores_scale[i]
            T.gemm(S_shared, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
        if defer_rowsum:
            T.reduce_sum(sums, logsum, dim=1)

    @T.prim_func
    def main_split(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, kv_head_num, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, kv_head_num, pe_dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        glse = T.alloc_global([batch, heads, num_split], accum_dtype)
        Output_partial = T.alloc_global([batch, heads, num_split, dim], accum_dtype)
        # one block per (sequence, head group, slice)
        with T.Kernel(batch, heads // VALID_BLOCK_H, num_split, threads=256) as (bid, hid, bz):
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            T.use_swizzle(10)
            kv_begin = T.min(bz * split_len, seqlen_kv)
            attend(Q, Q_pe, KV, K_pe, bid, hid, kv_begin, T.min(kv_begin + split_len, seqlen_kv),
                   acc_o, logsum, scores_max)  # fmt: skip
            # a slice past the end of the cache has no keys: weight 0 in the combine
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            for i in T.Parallel(block_H):
                logsum[i] = T.if_then_else(
                    logsum[i] > 0, T.log2(logsum[i]) + scores_max[i] * scale, neg_inf
                )
            T.copy(logsum, glse[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, bz])
            T.copy(
                acc_o, Output_partial[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, bz, :]
            )

        # combine: Output = sum_k Output_partial[k] * 2^(glse[k] - log2(sum_k 2^glse[k]))
        with T.Kernel(heads, batch, threads=128) as (hid, bz):
            po_local = T.alloc_fragment([dim], accum_dtype)
            o_accum_local = T.alloc_fragment([dim], accum_dtype)
            lse_local_split = T.alloc_var(accum_dtype)
            lse_logsum_local = T.alloc_var(accum_dtype)
            lse_max_local = T.alloc_var(accum_dtype)
            scale_local = T.alloc_var(accum_dtype)
            T.clear(lse_logsum_local)
            T.clear(o_accum_local)
            lse_max_local = neg_inf
            for k in T.serial(num_split):
                lse_max_local = T.max(lse_max_local, glse[bz, hid, k])
            for k in T.Pipelined(num_split, num_stages=1):
                lse_local_split = glse[bz, hid, k]
                lse_logsum_local += T.exp2(lse_local_split - lse_max_local)
            lse_logsum_local = T.log2(lse_logsum_local) + lse_max_local
            for k in T.serial(num_split):
                for i in T.Parallel(dim):
                    po_local[i] = Output_partial[bz, hid, k, i]
                lse_local_split = glse[bz, hid, k]
                scale_local = T.exp2(lse_local_split - lse_logsum_local)
                for i in T.Parallel(dim):
                    o_accum_local[i] += po_local[i] * scale_local
            for i in T.Parallel(dim):
                Output[bz, hid, i] = o_accum_local[i]

    @T.prim_func
    def main_no_split(
        Q: T.Tensor([batch, heads, dim], dtype),
        Q_pe: T.Tensor([batch, heads, pe_dim], dtype),
        KV: T.Tensor([batch, seqlen_kv, kv_head_num, dim], dtype),
        K_pe: T.Tensor([batch, seqlen_kv, kv_head_num, pe_dim], dtype),
        Output: T.Tensor([batch, heads, dim], dtype),
    ):
        with T.Kernel(heads // VALID_BLOCK_H, batch, threads=256) as (hid, bid):
            O_shared = T.alloc_shared([block_H, dim], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            T.annotate_layout({O_shared: tilelang.layout.make_swizzled_layout(O_shared)})
            attend(Q, Q_pe, KV, K_pe, bid, hid, 0, seqlen_kv, acc_o, logsum, scores_max)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bid, hid * VALID_BLOCK_H : (hid + 1) * VALID_BLOCK_H, :])

    return main_split if num_split > 1 else main_no_split


def ref_program(q, q_pe, kv, k_pe, softmax_scale=None):
    """float64 MLA decoding (q: [B, H, D], q_pe: [B, H, P], kv: [B, S, 1, D], k_pe: [B, S, 1, P])."""
    q, q_pe, kv, k_pe = (x.double() for x in (q, q_pe, kv, k_pe))
    if softmax_scale is None:
        softmax_scale = (q.shape[-1] + q_pe.shape[-1]) ** -0.5
    scores = torch.einsum("bhd,bsd->bhs", q, kv[:, :, 0]) + torch.einsum(
        "bhp,bsp->bhs", q_pe, k_pe[:, :, 0]
    )
    return torch.einsum("bhs,bsd->bhd", (scores * softmax_scale).softmax(-1), kv[:, :, 0])


def make_inputs(batch, heads, kv_ctx, dim, pe_dim, device):
    """Random fp16 (q, q_pe, kv, k_pe) of the shapes ``flashattn`` takes."""

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=torch.float16)

    return (randn(batch, heads, dim), randn(batch, heads, pe_dim),
            randn(batch, kv_ctx, 1, dim), randn(batch, kv_ctx, 1, pe_dim))  # fmt: skip


def main(batch=2, heads=16, kv_heads=1, kv_ctx=300, dim=64, pe_dim=32, num_split=1,
         block_N=64, block_H=None, device=None, q_reg_cols=0, defer_rowsum=False):  # fmt: skip
    """Run ``flashattn`` on random inputs and check it against :func:`ref_program`."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    block_H = block_H or min(64, heads // kv_heads)
    kernel = flashattn(batch, heads, kv_heads, kv_ctx, dim, pe_dim, block_N, block_H, num_split,
                       q_reg_cols=q_reg_cols, defer_rowsum=defer_rowsum)  # fmt: skip
    inputs = make_inputs(batch, heads, kv_ctx, dim, pe_dim, device)
    out = kernel(*inputs)
    torch.testing.assert_close(out.double(), ref_program(*inputs), rtol=1e-2, atol=1e-2)
    print(f"mla decode b={batch} h={heads} kv={kv_ctx} d={dim}+{pe_dim} split={num_split} "
          f"on {device}: matches")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64, help="batch size")
    parser.add_argument("--heads", type=int, default=128, help="q heads number")
    parser.add_argument("--kv_heads", type=int, default=1, help="kv heads number")
    parser.add_argument("--kv_ctx", type=int, default=8192, help="kv context length")
    parser.add_argument("--dim", type=int, default=512, help="head dim")
    parser.add_argument("--pe_dim", type=int, default=64, help="pe head dim")
    parser.add_argument("--num_split", type=int, default=1, help="KV splits")
    a = parser.parse_args()
    main(a.batch, a.heads, a.kv_heads, a.kv_ctx, a.dim, a.pe_dim, a.num_split)
