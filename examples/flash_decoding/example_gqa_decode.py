"""Flash decoding for grouped-query attention: one query token per sequence, the KV cache
split over ``num_split`` blocks per KV head. Each block attends its slice with the online
softmax and writes a partial output and its log-sum-exp; a second kernel combines the
splits. The query heads of one KV head form the rows of the block's gemms (padded to
``block_H``; the padding rows are computed and dropped)."""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[3, 4])
def gqa_decode_split(batch, heads, kv_heads, seqlen_kv, dim, num_split=4, block_N=64, block_H=16,
                     threads=128):  # fmt: skip
    """Partial outputs ``O_part[b, h, s, :]`` and log2-sum-exp ``LSE[b, h, s]`` per split."""
    groups = heads // kv_heads
    if heads % kv_heads or groups > block_H:
        raise ValueError(
            f"heads {heads} must be a multiple of kv_heads {kv_heads}, groups <= {block_H}"
        )
    scale = (1.0 / dim) ** 0.5 * LOG2E
    split_len = T.ceildiv(seqlen_kv, num_split)
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(
        Q: T.Tensor([batch, heads, dim], dtype),
        K: T.Tensor([batch, seqlen_kv, kv_heads, dim], dtype),
        V: T.Tensor([batch, seqlen_kv, kv_heads, dim], dtype),
        O_part: T.Tensor([batch, heads, num_split, dim], accum),
        LSE: T.Tensor([batch, heads, num_split], accum),
    ):
        with T.Kernel(kv_heads, num_split, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_H, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_H, block_N], accum)
            acc_s_cast = T.alloc_fragment([block_H, block_N], dtype)
            acc_o = T.alloc_fragment([block_H, dim], accum)
            m = T.alloc_fragment([block_H], accum)
            m_prev = T.alloc_fragment([block_H], accum)
            m_use = T.alloc_fragment([block_H], accum)
            rescale = T.alloc_fragment([block_H], accum)
            row_sum = T.alloc_fragment([block_H], accum)
            logsum = T.alloc_fragment([block_H], accum)

            for i, d in T.Parallel(block_H, dim):
                Q_shared[i, d] = T.if_then_else(i < groups, Q[bz, bx * groups + i, d], 0)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(accum))
            start = by * split_len
            for k in T.Pipelined(T.ceildiv(split_len, block_N), num_stages=1):
                kv = start + k * block_N
                T.copy(K[bz, kv : kv + block_N, bx, :], K_shared)
                T.copy(V[bz, kv : kv + block_N, bx, :], V_shared)
                T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True)
                for i, j in T.Parallel(block_H, block_N):
                    pos = k * block_N + j
                    valid = (pos < split_len) & (start + pos < seqlen_kv)
                    acc_s[i, j] = T.if_then_else(valid, acc_s[i, j], -T.infinity(accum))
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block_H):  # no valid key yet: exponents against 0, not -inf
                    m_use[i] = T.if_then_else(m[i] == -T.infinity(accum), 0, m[i])
                    rescale[i] = T.exp2(m_prev[i] * scale - m_use[i] * scale)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m_use[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_H):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                for i, d in T.Parallel(block_H, dim):
                    acc_o[i, d] *= rescale[i]
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o)
            # a split past the end of the cache has no keys: weight 0 in the combine
            for i, d in T.Parallel(block_H, dim):
                if i < groups:
                    O_part[bz, bx * groups + i, by, d] = T.if_then_else(
                        logsum[i] > 0, acc_o[i, d] / logsum[i], 0
                    )
            for i in T.Parallel(block_H):
                if i < groups:
                    LSE[bz, bx * groups + i, by] = T.if_then_else(
                        logsum[i] > 0, T.log2(logsum[i]) + m[i] * scale, -T.infinity(accum)
                    )

    return main


@tilelang.jit(out_idx=[2])
def combine_splits(batch, heads, num_split, dim, threads=128):
    """``O[b, h] = sum_s O_part[b, h, s] * 2^(LSE[b, h, s] - LSE_total[b, h])``."""
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(
        O_part: T.Tensor([batch, heads, num_split, dim], accum),
        LSE: T.Tensor([batch, heads, num_split], accum),
        O: T.Tensor([batch, heads, dim], dtype),
    ):
        with T.Kernel(heads, batch, threads=threads) as (bx, by):
            lse = T.alloc_fragment([num_split], accum)
            lse_max = T.alloc_fragment([1], accum)
            weight_sum = T.alloc_fragment([1], accum)
            weights = T.alloc_fragment([num_split], accum)
            parts = T.alloc_fragment([num_split, dim], accum)
            out = T.alloc_fragment([dim], accum)
            T.copy(LSE[by, bx, :], lse)
            T.reduce_max(lse, lse_max, dim=0)
            for s in T.Parallel(num_split):
                weights[s] = T.exp2(lse[s] - lse_max[0])
            T.reduce_sum(weights, weight_sum, dim=0)
            T.copy(O_part[by, bx, :, :], parts)
            for s, d in T.Parallel(num_split, dim):
                parts[s, d] *= weights[s] / weight_sum[0]
            T.reduce_sum(parts, out, dim=0)
            T.copy(out, O[by, bx, :])

    return main


def gqa_decode(q, k, v, num_split=4):
    """Attention of one query token per sequence (q: [B, H, D]; k, v: [B, S, H_kv, D])."""
    batch, heads, dim = q.shape
    seqlen_kv, kv_heads = k.shape[1], k.shape[2]
    o_part, lse = gqa_decode_split(batch, heads, kv_heads, seqlen_kv, dim, num_split)(q, k, v)
    return combine_splits(batch, heads, num_split, dim)(o_part, lse)


def reference(q, k, v):
    """float64 attention; each query head uses KV head ``h // groups``."""
    groups = q.shape[1] // k.shape[2]
    kk = k.double().repeat_interleave(groups, dim=2).transpose(1, 2)  # [B, H, S, D]
    vv = v.double().repeat_interleave(groups, dim=2).transpose(1, 2)
    return F.scaled_dot_product_attention(q.double().unsqueeze(2), kk, vv).squeeze(2)


def main(batch=2, heads=16, kv_heads=2, seqlen_kv=1000, dim=128, num_split=4, device=None):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q = torch.randn(batch, heads, dim, device=device, dtype=torch.float16)
    k, v = (torch.randn(batch, seqlen_kv, kv_heads, dim, device=device, dtype=torch.float16)
            for _ in range(2))  # fmt: skip
    out = gqa_decode(q, k, v, num_split)
    torch.testing.assert_close(out.double(), reference(q, k, v), rtol=1e-2, atol=1e-2)
    print(f"gqa decode b={batch} h={heads}/{kv_heads} s={seqlen_kv} d={dim} split={num_split} "
          f"on {device}: matches")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv_heads", type=int, default=2)
    parser.add_argument("--seqlen_kv", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--num_split", type=int, default=4)
    a = parser.parse_args()
    main(a.batch, a.heads, a.kv_heads, a.seqlen_kv, a.dim, a.num_split)
