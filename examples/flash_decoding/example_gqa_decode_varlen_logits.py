"""GQA decoding over variable-length KV caches, returning per-block attention logits
(upstream's ``examples/flash_decoding/example_gqa_decode_varlen_logits.py``).

One query token per sequence; the keys/values of all sequences are packed (``cu_seqlens_k``
gives each sequence's rows). Besides the output, the kernel writes ``S``: for every head
and every ``block_N`` keys, the largest softmax weight of that block (the running row
maximum of each block, rescaled once the final maximum and sum are known), and optionally
folds a per-head "sink" logit into the softmax denominator (as ``exp(sink - max)``, the
form upstream's torch reference uses; upstream's kernel adds the raw sink value, a
difference its tolerance hides for sinks near 0). The rescaling loop reads the
per-row ``scores_max[h]`` / ``logsum[h]`` fragments inside a ``(h, block)`` loop: layout
inference runs each row on the threads that hold those rows.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-2, -1])
def flashattn(
    batch,
    heads,
    k_heads,
    max_seqlen_kv,
    total_seqlen_k,
    dim,
    has_sink,
    block_N=128,
    block_H=64,
    num_split=1,
    num_stages=1,
    threads=128,
):
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # log2(e)
    n_blocks = math.ceil(max_seqlen_kv / block_N)
    dtype = T.float16
    accum_dtype = T.float32
    kv_group_num = heads // k_heads
    valid_block_H = min(block_H, kv_group_num)

    @T.prim_func
    def flashattn_gqa_decode_no_split(
        Q: T.Tensor([batch, heads, dim], dtype),
        K: T.Tensor([total_seqlen_k, k_heads, dim], dtype),
        V: T.Tensor([total_seqlen_k, k_heads, dim], dtype),
        cu_seqlens_k: T.Tensor([batch + 1], T.int32),
        s_aux: T.Tensor([heads], T.float32),
        Output: T.Tensor([batch, heads, dim], dtype),
        S: T.Tensor([batch, heads, n_blocks], dtype),
    ):
        with T.Kernel(batch, heads // valid_block_H, num_split, threads=threads) as (bid, hid, bz):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([valid_block_H, dim], dtype)
            acc_s = T.alloc_fragment([block_H, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_H, block_N], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_H], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_H], accum_dtype)
            scores_scale = T.alloc_fragment([block_H], accum_dtype)
            scores_sum = T.alloc_fragment([block_H], accum_dtype)
            logsum = T.alloc_fragment([block_H], accum_dtype)
            S_shared = T.alloc_shared([block_H, n_blocks], accum_dtype)
            S_shared_cast = T.alloc_shared([block_H, n_blocks], dtype)
            s_aux_shared = T.alloc_shared([block_H], T.float32)

            cur_kv_head = hid // (kv_group_num // valid_block_H)
            cur_start_k = cu_seqlens_k[bid]
            cur_seqlen_k = cu_seqlens_k[bid + 1] - cur_start_k

            T.copy(Q[bid, hid * valid_block_H : hid * valid_block_H + block_H, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = T.ceildiv((cur_seqlen_k // num_split), block_N)
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(
                    K[cur_start_k + k * block_N : cur_start_k + (k + 1) * block_N, cur_kv_head, :],
                    K_shared,
                )
                T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(
                        k * block_N + j < cur_seqlen_k, acc_s[i, j], -T.infinity(accum_dtype)
                    )
                T.copy(scores_max, scores_max_prev)
                T.fill(scores_max, -T.infinity(accum_dtype))
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                T.copy(scores_max, S_shared[:, k])
                for i in T.Parallel(block_H):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_H, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(
                    V[cur_start_k + k * block_N : cur_start_k + (k + 1) * block_N, cur_kv_head, :],
                    V_shared,
                )
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            if has_sink:
                T.copy(s_aux[hid * valid_block_H : hid * valid_block_H + block_H], s_aux_shared)
                # the sink is a logit: exp(sink - max) joins the softmax denominator
                for i in T.Parallel(block_H):
                    logsum[i] += T.exp2(s_aux_shared[i] * 1.44269504 - scores_max[i] * scale)
            for i, j in T.Parallel(block_H, dim):
                acc_o[i, j] /= logsum[i]
            # per-row fragments read in a (row, block) loop
            for h, k in T.Parallel(block_H, n_blocks):
                S_shared[h, k] = T.exp2((S_shared[h, k] - scores_max[h]) * scale) / logsum[h]
            T.copy(acc_o[:valid_block_H, :], O_shared)
            T.copy(O_shared, Output[bid, hid * valid_block_H : (hid + 1) * valid_block_H, :])
            T.copy(S_shared, S_shared_cast)
            T.copy(
                S_shared_cast[:valid_block_H, :],
                S[bid, hid * valid_block_H : (hid + 1) * valid_block_H, :],
            )

    return flashattn_gqa_decode_no_split


def ref_attention(q, k_varlen, v_varlen, k_seqlens, block_N, sink=None):
    """Output and, per sequence, the largest softmax weight of each ``block_N`` keys, in
    float64 (the sink, when given, is one more logit in each head's softmax)."""
    batch, heads, dim = q.shape
    group = heads // k_varlen.shape[1]
    out = torch.zeros(batch, heads, dim, dtype=torch.float64)
    blocks = []
    start = 0
    for b, n in enumerate(k_seqlens.tolist()):
        k = k_varlen[start : start + n].double().repeat_interleave(group, dim=1)  # n, heads, dim
        v = v_varlen[start : start + n].double().repeat_interleave(group, dim=1)
        start += n
        logits = torch.einsum("hd,nhd->hn", q[b].double(), k) / math.sqrt(dim)
        row_max = logits.max(dim=1, keepdim=True).values
        weights = torch.exp(logits - row_max)
        total = weights.sum(dim=1, keepdim=True)
        if sink is not None:
            total = total + torch.exp(sink.double()[:, None] - row_max)
        out[b] = torch.einsum("hn,nhd->hd", weights / total, v)
        padded = torch.full(
            (heads, math.ceil(n / block_N) * block_N), -math.inf, dtype=torch.float64
        )
        padded[:, :n] = logits
        block_max = padded.view(heads, -1, block_N).max(dim=2).values
        blocks.append(torch.exp(block_max - row_max) / total)
    return out, blocks


def run(
    batch,
    q_heads,
    kv_heads,
    k_seqlens,
    head_size,
    block_N=128,
    block_H=64,
    test_sink=True,
    device=None,
):
    """One decode step on random inputs; returns (O, S, O_ref, S_ref blocks per sequence)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    k_seqlens = torch.as_tensor(k_seqlens)
    cu_seqlens_k = torch.zeros(batch + 1, dtype=torch.int32)
    cu_seqlens_k[1:] = torch.cumsum(k_seqlens, 0)
    total = int(cu_seqlens_k[-1])
    max_seqlen = int(k_seqlens.max())
    q = torch.randn(batch, q_heads, head_size, dtype=torch.float16)
    k = torch.randn(total, kv_heads, head_size, dtype=torch.float16)
    v = torch.randn(total, kv_heads, head_size, dtype=torch.float16)
    sink = torch.randn(q_heads, dtype=torch.float32) if test_sink else torch.zeros(q_heads)
    kernel = flashattn(
        batch,
        q_heads,
        kv_heads,
        max_seqlen,
        total,
        head_size,
        test_sink,
        block_N=block_N,
        block_H=block_H,
    )
    O, S = kernel(*(t.to(device) for t in (q, k, v, cu_seqlens_k, sink)))
    O_ref, S_ref = ref_attention(q, k, v, k_seqlens, block_N, sink if test_sink else None)
    return O.cpu(), S.cpu(), O_ref, S_ref


def main(batch=2, q_heads=32, kv_heads=8, k_seqlen=8192, head_size=128, block_N=128):
    k_seqlens = torch.randint(k_seqlen // 4, k_seqlen + 1, (batch,))
    O, S, O_ref, S_ref = run(batch, q_heads, kv_heads, k_seqlens, head_size, block_N)
    torch.testing.assert_close(O.double(), O_ref, atol=1e-2, rtol=1e-2)
    for b, blocks in enumerate(S_ref):
        torch.testing.assert_close(
            S[b, :, : blocks.shape[1]].double(), blocks, atol=1e-3, rtol=1e-2
        )
    print("gqa decode varlen logits: matches torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--q_heads", type=int, default=32)
    parser.add_argument("--kv_heads", type=int, default=8)
    parser.add_argument("--k_seqlen", type=int, default=8192)
    parser.add_argument("--head_size", type=int, default=128, choices=[64, 128, 256])
    args = parser.parse_args()
    main(args.batch_size, args.q_heads, args.kv_heads, args.k_seqlen, args.head_size)
