"""Block-sparse FlashAttention forward (bhsd layout): a boolean block mask
``BlockSparseMask[b, h, q_block, k_block]`` says which ``block x block`` tiles of the score
matrix exist; each query tile runs the online softmax over its selected key tiles only
(optionally causal inside them). A query row that selects no key has output 0.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[4])
def blocksparse_flashattn(batch, heads, seq_len, dim, is_causal, block=64, num_stages=1,
                          threads=128, dtype="float16"):  # fmt: skip
    """Kernel factory: ``kernel(Q, K, V, BlockSparseMask) -> O``; Q/K/V/O are
    ``(batch, heads, seq_len, dim)``, the mask ``(batch, heads, n, n)`` bool with
    ``n = ceil(seq_len / block)``."""
    block_M = block_N = block
    downsample_len = math.ceil(seq_len / block)
    scale = (1.0 / dim) ** 0.5 * LOG2E
    shape = (batch, heads, seq_len, dim)
    mask_shape = (batch, heads, downsample_len, downsample_len)
    accum_dtype = "float"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        BlockSparseMask: T.Tensor(mask_shape, "bool"),
        Output: T.Tensor(shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            O_shared = T.alloc_shared((block_M, dim), dtype)
            acc_s = T.alloc_fragment((block_M, block_N), accum_dtype)
            acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum_dtype)
            scores_max = T.alloc_fragment((block_M,), accum_dtype)
            scores_max_prev = T.alloc_fragment((block_M,), accum_dtype)
            scores_scale = T.alloc_fragment((block_M,), accum_dtype)
            scores_sum = T.alloc_fragment((block_M,), accum_dtype)
            logsum = T.alloc_fragment((block_M,), accum_dtype)
            block_mask = T.alloc_fragment((downsample_len,), "bool")

            T.copy(Q[bz, by, bx * block_M, 0], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))
            T.copy(BlockSparseMask[bz, by, bx, 0], block_mask)

            loop_range = T.min(bx + 1, downsample_len) if is_causal else downsample_len
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                if block_mask[k]:
                    T.copy(K[bz, by, k * block_N, 0], K_shared)
                    # keys past seq_len (the last tile's zero-filled rows) never count
                    for i, j in T.Parallel(block_M, block_N):
                        visible = k * block_N + j < seq_len
                        if is_causal:
                            visible = visible and bx * block_M + i >= k * block_N + j
                        acc_s[i, j] = T.if_then_else(visible, 0, -T.infinity(accum_dtype))
                    T.gemm(Q_shared, K_shared, acc_s, transpose_B=True,
                           policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
                    T.copy(scores_max, scores_max_prev)
                    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                    for i in T.Parallel(block_M):
                        scores_max[i] = T.if_then_else(
                            scores_max[i] == -T.infinity(accum_dtype), 0, scores_max[i]
                        )
                        scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                    T.reduce_sum(acc_s, scores_sum, dim=1)
                    for i in T.Parallel(block_M):
                        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                    T.copy(acc_s, acc_s_cast)
                    for i, j in T.Parallel(block_M, dim):
                        acc_o[i, j] *= scores_scale[i]
                    T.copy(V[bz, by, k * block_N, 0], V_shared)
                    T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            # a row that selected no key block has logsum 0 and acc_o 0: its output is 0
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] = T.if_then_else(logsum[i] > 0, acc_o[i, j] / logsum[i], 0)
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M, 0])

    return main


def get_sparse_attn_mask_from_topk(x, topk, use_dense_for_last_block=False):
    """Block mask keeping each query block's ``topk`` highest-scoring key blocks
    (lower triangle only, for causal attention)."""
    index = torch.topk(x, topk, dim=-1).indices
    mask = torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(-1, index, True)
    if use_dense_for_last_block:
        mask[:, :, -2:, :] = True
    return mask.tril_()


def ref_program(Q, K, V, block_mask, block, is_causal):
    """Float64 reference: the block mask expanded to a token mask (rows with no visible key
    give 0)."""
    seq_len, dim = Q.shape[2], Q.shape[3]
    full = block_mask.repeat_interleave(block, -1).repeat_interleave(block, -2)
    full = full[..., :seq_len, :seq_len]
    if is_causal:
        full = full & torch.ones(seq_len, seq_len, dtype=torch.bool, device=Q.device).tril()
    scores = torch.einsum("bhsd,bhtd->bhst", Q.double(), K.double()) * dim**-0.5
    scores = scores.masked_fill(~full, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhst,bhtd->bhsd", probs, V.double())


def main(batch=1, heads=2, seq_len=256, dim=64, topk=2, is_causal=True, block=64, device=None):
    """Top-k block-sparse attention on random inputs, checked against ``ref_program``."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v = (torch.randn(batch, heads, seq_len, dim, device=device, dtype=torch.float16)
               for _ in range(3))  # fmt: skip
    n = math.ceil(seq_len / block)
    x_ds = torch.randn(batch, heads, n, n, device=device)
    x_ds[:, :, :, 0] = 100  # every query block keeps key block 0
    block_mask = get_sparse_attn_mask_from_topk(x_ds, min(topk, n))
    if not is_causal:
        block_mask |= torch.rand(batch, heads, n, n, device=device) < 0.3
    kernel = blocksparse_flashattn(batch, heads, seq_len, dim, is_causal, block)
    out = kernel(q, k, v, block_mask)
    ref = ref_program(q, k, v, block_mask, block, is_causal)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(f"block-sparse attention b={batch} h={heads} s={seq_len} d={dim} topk={topk} "
          f"causal={is_causal} on {device}: matches torch")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=256)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--topk", type=int, default=2)
    parser.add_argument("--non_causal", action="store_true")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.topk, not args.non_causal)
