"""Variable-length GQA attention backward with TMA reductions, as upstream TileLang's example:
sequences packed along one axis (``cu_seqlens``, ``[total, heads, dim]``), ``heads`` query
heads on ``heads // groups`` K/V heads, Q/K head dim ``dim_qk`` and V's ``dim_v``.

Kernels: the forward (``O`` and the base-2 log-sum-exp per query row, stored ``[batch, heads,
N_CTX]``, zero past a sequence), ``Delta = rowsum(O * dO)`` (the same layout), and one block
per (query head, K/V block of a sequence). The atomic variant adds dQ (each query block), dK
and dV (once) from float32 shared tiles with ``T.atomic_add(global, shared, use_tma=True)``:
a TMA box may reach into the next sequence's rows, which receive zeros (P^T and dS^T are
masked outside the sequence). The split variant adds dQ element by element into a head-major
accumulator (``make_dq_layout``) and writes one dK/dV slice per query head of a group.

``use_tma=True`` needs CUDA sm_90+ (a compile error elsewhere, as upstream); on the CPU
backend (``device="cpu"``) the kernels are built with ``use_tma=False`` (ordinary atomics).
``attention(q, k, v, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
max_seqlen_k, causal, groups, use_atomic)`` takes padded ``[batch, N_CTX, heads, dim]``
tensors, as upstream (causal: queries and keys aligned at the sequence's start).

    python examples/flash_attention/example_gqa_bwd_tma_reduce_varlen.py --h 32 --groups 16
"""

import argparse

import torch
import torch.nn.functional as F
from example_gqa_bwd import _check_groups, _grads
from example_gqa_bwd_tma_reduce import bwd_config

import tilelang
import tilelang.language as T

LOG2E = 1.44269504
NEG = -1e30  # masked scores: finite, so fully masked rows give no NaN


def generate_random_padding_mask(max_seqlen, batch_size, device, mode="random", generator=None):
    """``[batch, max_seqlen]`` bool mask of each sequence's valid positions (upstream's)."""
    if mode not in ("full", "random", "third"):
        raise ValueError(f"mode must be 'full', 'random' or 'third', got {mode!r}")
    if mode == "full":
        lengths = torch.full((batch_size, 1), max_seqlen)
    else:
        low = max(1, max_seqlen - 20) if mode == "random" else max(1, max_seqlen // 3)
        lengths = torch.randint(low, max_seqlen + 1, (batch_size, 1), generator=generator)
    return torch.arange(max_seqlen).unsqueeze(0) < lengths.to(device=device).cpu()


def _tile_config(device, gpu):
    return gpu if device.type == "cuda" else dict(block_M=64, block_N=32, threads=128,
                                                  num_stages=1)  # fmt: skip


@tilelang.jit(out_idx=[5, 6])
def flashattn_fwd(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v, is_causal,
                  block_M, block_N, groups=1, threads=256):  # fmt: skip
    """``kernel(Q, K, V, cu_seqlens_q, cu_seqlens_k) -> (O, lse)``."""
    _check_groups(heads, groups)
    scale = (1.0 / dim_qk) ** 0.5 * LOG2E
    head_kv = heads // groups
    dtype, accum = "float16", "float"

    @T.prim_func
    def flash_fwd(
        Q: T.Tensor([total_q, heads, dim_qk], dtype),
        K: T.Tensor([total_kv, head_kv, dim_qk], dtype),
        V: T.Tensor([total_kv, head_kv, dim_v], dtype),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch + 1], "int32"),
        Output: T.Tensor([total_q, heads, dim_v], dtype),
        lse: T.Tensor([batch, heads, N_CTX], accum),
    ):
        with T.Kernel(T.ceildiv(max_seq_len, block_M), heads, batch, threads=threads) as (
            bx,
            by,
            bz,
        ):
            Q_shared = T.alloc_shared([block_M, dim_qk], dtype)
            K_shared = T.alloc_shared([block_N, dim_qk], dtype)
            V_shared = T.alloc_shared([block_N, dim_v], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim_v], accum)
            m = T.alloc_fragment([block_M], accum)
            m_prev = T.alloc_fragment([block_M], accum)
            rescale = T.alloc_fragment([block_M], accum)
            row_sum = T.alloc_fragment([block_M], accum)
            logsum = T.alloc_fragment([block_M], accum)

            q_start = cu_seqlens_q[bz]
            k_start = cu_seqlens_k[bz]
            q_len = cu_seqlens_q[bz + 1] - q_start
            k_len = cu_seqlens_k[bz + 1] - k_start
            for i, d in T.Parallel(block_M, dim_qk):
                Q_shared[i, d] = T.if_then_else(bx * block_M + i < q_len,
                                                Q[q_start + bx * block_M + i, by, d], 0)  # fmt: skip
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, T.cast(NEG, accum))
            for k in T.Pipelined(T.ceildiv(k_len, block_N), num_stages=1):
                for i, d in T.Parallel(block_N, dim_qk):
                    K_shared[i, d] = T.if_then_else(k * block_N + i < k_len,
                                                    K[k_start + k * block_N + i, by // groups, d], 0)  # fmt: skip
                for i, j in T.Parallel(block_M, block_N):
                    inside = bx * block_M + i < q_len and k * block_N + j < k_len
                    if is_causal:
                        inside = inside and bx * block_M + i >= k * block_N + j
                    acc_s[i, j] = T.if_then_else(inside, T.cast(0, accum), T.cast(NEG, accum))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, d in T.Parallel(block_N, dim_v):
                    V_shared[i, d] = T.if_then_else(k * block_N + i < k_len,
                                                    V[k_start + k * block_N + i, by // groups, d], 0)  # fmt: skip
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(block_M, dim_v):
                    acc_o[i, j] *= rescale[i]
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
            for i, d in T.Parallel(block_M, dim_v):
                if bx * block_M + i < q_len:
                    Output[q_start + bx * block_M + i, by, d] = acc_o[i, d] / logsum[i]
            for i in T.Parallel(block_M):
                if bx * block_M + i < N_CTX:  # zero past the sequence: no NaN into dS
                    lse[bz, by, bx * block_M + i] = T.if_then_else(
                        bx * block_M + i < q_len, T.log2(logsum[i]) + m[i] * scale, 0
                    )

    return flash_fwd


@tilelang.jit(out_idx=[3])
def flashattn_bwd_preprocess(batch, heads, total_q, N_CTX, max_seq_len, dim_v, blk=32):
    """``kernel(O, dO, cu_seqlens_q) -> Delta``, ``[batch, heads, N_CTX]``, zero past a
    sequence."""
    shape = [total_q, heads, dim_v]
    dtype, accum = "float16", "float"

    @T.prim_func
    def flash_bwd_prep(
        O: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        Delta: T.Tensor([batch, heads, N_CTX], accum),
    ):
        with T.Kernel(heads, T.ceildiv(max_seq_len, blk), batch) as (bx, by, bz):
            acc = T.alloc_fragment([blk, dim_v], accum)
            delta = T.alloc_fragment([blk], accum)
            q_start = cu_seqlens_q[bz]
            q_len = cu_seqlens_q[bz + 1] - q_start
            for i, j in T.Parallel(blk, dim_v):
                acc[i, j] = T.if_then_else(
                    by * blk + i < q_len,
                    T.cast(O[q_start + by * blk + i, bx, j], accum)
                    * T.cast(dO[q_start + by * blk + i, bx, j], accum),
                    0,
                )
            T.reduce_sum(acc, delta, dim=1)
            for i in T.Parallel(blk):
                if by * blk + i < N_CTX:
                    Delta[bz, bx, by * blk + i] = T.if_then_else(by * blk + i < q_len, delta[i], 0)

    return flash_bwd_prep


def make_dq_layout(dQ):
    """Packed ``[total, heads, dim]`` stored head-major (the split variant's dQ)."""
    return T.Layout(dQ.shape, lambda l, h, d: [h, l, d])


@tilelang.jit(out_idx=[1])
def flashattn_bwd_postprocess(total_q, heads, dim_qk, blk=64):
    """The split variant's float32 dQ (``make_dq_layout`` order) -> packed float16."""
    shape = [total_q, heads, dim_qk]

    @T.prim_func
    def flash_bwd_post(dQ: T.Tensor(shape, "float"), dQ_out: T.Tensor(shape, "float16")):
        with T.Kernel(T.ceildiv(total_q, blk), heads, threads=128) as (bx, by):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(dQ[bx * blk : (bx + 1) * blk, by, :], dQ_out[bx * blk : (bx + 1) * blk, by, :])

    return flash_bwd_post


def _bwd_program(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v, is_causal,
                 block_M, block_N, threads, num_stages, groups, split, use_tma):  # fmt: skip
    _check_groups(heads, groups)
    sm_scale = (1.0 / dim_qk) ** 0.5
    scale = sm_scale * LOG2E
    head_kv = heads // groups
    q_shape = [total_q, heads, dim_qk]
    k_shape = [total_kv, head_kv, dim_qk]
    v_shape = [total_kv, head_kv, dim_v]
    dtype, accum = "float16", "float"
    dkv_dtype = dtype if split else accum
    dk_shape = [groups, *k_shape] if split else k_shape
    dv_shape = [groups, *v_shape] if split else v_shape

    @T.prim_func
    def flash_bwd(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(k_shape, dtype),
        V: T.Tensor(v_shape, dtype),
        dO: T.Tensor([total_q, heads, dim_v], dtype),
        lse: T.Tensor([batch, heads, N_CTX], accum),
        Delta: T.Tensor([batch, heads, N_CTX], accum),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch + 1], "int32"),
        dQ: T.Tensor(q_shape, accum),
        dK: T.Tensor(dk_shape, dkv_dtype),
        dV: T.Tensor(dv_shape, dkv_dtype),
    ):
        with T.Kernel(heads, T.ceildiv(max_seq_len, block_M), batch, threads=threads) as (
            bx,
            by,
            bz,
        ):
            K_shared = T.alloc_shared([block_M, dim_qk], dtype)
            V_shared = T.alloc_shared([block_M, dim_v], dtype)
            dsT_shared = T.alloc_shared([block_M, block_N], dtype)
            q = T.alloc_shared([block_N, dim_qk], dtype)
            do = T.alloc_shared([block_N, dim_v], dtype)
            lse_shared = T.alloc_shared([block_N], accum)
            delta = T.alloc_shared([block_N], accum)
            qkT = T.alloc_fragment([block_M, block_N], accum)
            dsT = T.alloc_fragment([block_M, block_N], accum)
            qkT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dsT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dq = T.alloc_fragment([block_N, dim_qk], accum)
            dv = T.alloc_fragment([block_M, dim_v], accum)
            dk = T.alloc_fragment([block_M, dim_qk], accum)
            dv_shared = T.alloc_shared([block_M, dim_v], dkv_dtype)
            dk_shared = T.alloc_shared([block_M, dim_qk], dkv_dtype)
            if not split:
                dq_shared = T.alloc_shared([block_N, dim_qk], accum)
            else:
                T.annotate_layout({dQ: make_dq_layout(dQ)})

            q_start = cu_seqlens_q[bz]
            k_start = cu_seqlens_k[bz]
            q_len = cu_seqlens_q[bz + 1] - q_start
            k_len = cu_seqlens_k[bz + 1] - k_start
            # rows past the sequence belong to the next one (or are zero past the tensor):
            # P^T and dS^T are masked there, so dQ/dK/dV get zeros for them
            T.copy(K[k_start + by * block_M : k_start + (by + 1) * block_M, bx // groups, :],
                   K_shared)  # fmt: skip
            T.copy(V[k_start + by * block_M : k_start + (by + 1) * block_M, bx // groups, :],
                   V_shared)  # fmt: skip
            T.clear(dv)
            T.clear(dk)
            loop_st = T.min(by * block_M // block_N, q_len // block_N) if is_causal else 0
            loop_ed = T.ceildiv(q_len, block_N)
            for k in T.Pipelined(loop_st, loop_ed, num_stages=num_stages):
                T.copy(Q[q_start + k * block_N : q_start + (k + 1) * block_N, bx, :], q)
                T.gemm(K_shared, q, qkT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
                T.copy(lse[bz, bx, k * block_N : (k + 1) * block_N], lse_shared)
                for i, j in T.Parallel(block_M, block_N):
                    inside = by * block_M + i < k_len and k * block_N + j < q_len
                    if is_causal:
                        inside = inside and by * block_M + i <= k * block_N + j
                    qkT[i, j] = T.if_then_else(inside, T.exp2(qkT[i, j] * scale - lse_shared[j]), 0)
                T.copy(dO[q_start + k * block_N : q_start + (k + 1) * block_N, bx, :], do)
                T.gemm(V_shared, do, dsT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
                T.copy(qkT, qkT_cast)
                T.gemm(qkT_cast, do, dv, policy=T.GemmWarpPolicy.FullRow)  # dV += P^T dO
                T.copy(Delta[bz, bx, k * block_N : (k + 1) * block_N], delta)
                for i, j in T.Parallel(block_M, block_N):
                    dsT[i, j] = qkT[i, j] * (dsT[i, j] - delta[j]) * sm_scale  # dS^T
                T.copy(dsT, dsT_cast)
                T.copy(dsT_cast, dsT_shared)
                T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                T.gemm(dsT_cast, q, dk, policy=T.GemmWarpPolicy.FullRow)  # dK += dS^T Q
                if split:
                    for i, j in T.Parallel(block_N, dim_qk):
                        if k * block_N + i < q_len:
                            T.atomic_add(dQ[q_start + k * block_N + i, bx, j], dq[i, j])
                else:
                    T.copy(dq, dq_shared)
                    T.atomic_add(dQ[q_start + k * block_N : q_start + (k + 1) * block_N, bx, :],
                                 dq_shared, use_tma=use_tma)  # fmt: skip
            T.copy(dv, dv_shared)
            T.copy(dk, dk_shared)
            if split:
                for i, d in T.Parallel(block_M, dim_v):
                    if by * block_M + i < k_len:
                        dV[bx % groups, k_start + by * block_M + i, bx // groups, d] = dv_shared[
                            i, d
                        ]
                for i, d in T.Parallel(block_M, dim_qk):
                    if by * block_M + i < k_len:
                        dK[bx % groups, k_start + by * block_M + i, bx // groups, d] = dk_shared[
                            i, d
                        ]
            else:
                T.atomic_add(dV[k_start + by * block_M : k_start + (by + 1) * block_M, bx // groups, :],
                             dv_shared, use_tma=use_tma)  # fmt: skip
                T.atomic_add(dK[k_start + by * block_M : k_start + (by + 1) * block_M, bx // groups, :],
                             dk_shared, use_tma=use_tma)  # fmt: skip

    return flash_bwd


@tilelang.jit
def flashattn_bwd_atomic_add(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v,
                             is_causal, block_M, block_N, threads=256, num_stages=2, groups=1,
                             use_tma=True):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, cu_seqlens_q, cu_seqlens_k, dQ, dK, dV)``; dQ/dK/dV
    float32 packed, zeroed by the caller, added by TMA reductions (``use_tma``)."""
    return _bwd_program(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v,
                        is_causal, block_M, block_N, threads, num_stages, groups, False, use_tma)  # fmt: skip


@tilelang.jit
def flashattn_bwd_split(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v,
                        is_causal, block_M, block_N, threads=256, num_stages=2, groups=1):  # fmt: skip
    """As the atomic variant; dQ in ``make_dq_layout``'s order, dK/dV float16 ``[groups,
    total_kv, head_kv, dim]`` (sum over the first axis afterwards; zero them first)."""
    return _bwd_program(batch, total_q, total_kv, N_CTX, heads, max_seq_len, dim_qk, dim_v,
                        is_causal, block_M, block_N, threads, num_stages, groups, True, False)  # fmt: skip


def _valid(seqlens, n_ctx, device):
    return torch.arange(n_ctx, device=device).unsqueeze(0) < seqlens.to(device).unsqueeze(1)


def _unpad(x, mask):
    """Rows of the padded ``[batch, n_ctx, ...]`` where ``mask`` holds, packed; their indices."""
    indices = mask.flatten().nonzero().flatten()
    return x.reshape(-1, *x.shape[2:])[indices], indices


def _pad(x, indices, batch, n_ctx):
    out = x.new_zeros(batch * n_ctx, *x.shape[1:])
    out[indices] = x
    return out.reshape(batch, n_ctx, *x.shape[1:])


class _attention(torch.autograd.Function):
    """Variable-length GQA attention over padded tensors: the kernels above on the packed rows."""

    @staticmethod
    def forward(ctx, q, k, v, seqlens_q, seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                max_seqlen_k, causal, groups=1, use_atomic=True):  # fmt: skip
        batch, n_ctx, heads, dim_qk = q.shape
        dim_v = v.shape[-1]
        q_unpad, indices_q = _unpad(q, _valid(seqlens_q, n_ctx, q.device))
        k_unpad, indices_k = _unpad(k, _valid(seqlens_k, n_ctx, k.device))
        v_unpad, _ = _unpad(v, _valid(seqlens_k, n_ctx, v.device))
        config = _tile_config(q.device, dict(block_M=128, block_N=64, threads=256))
        kernel = flashattn_fwd(batch, q_unpad.shape[0], k_unpad.shape[0], n_ctx, heads,
                               int(max_seqlen_q), dim_qk, dim_v, causal, config["block_M"],
                               config["block_N"], groups, threads=config["threads"])  # fmt: skip
        o_unpad, lse = kernel(q_unpad, k_unpad, v_unpad, cu_seqlens_q, cu_seqlens_k)
        ctx.save_for_backward(q_unpad, k_unpad, v_unpad, o_unpad, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.shape, ctx.causal, ctx.use_atomic = (batch, n_ctx), causal, use_atomic
        ctx.max_seqlen_q, ctx.indices_q, ctx.indices_k = int(max_seqlen_q), indices_q, indices_k
        ctx.seqlens_q = seqlens_q
        return _pad(o_unpad, indices_q, batch, n_ctx)

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        batch, n_ctx = ctx.shape
        total_q, heads, dim_qk = q.shape
        total_kv, head_kv, dim_v = v.shape
        groups = heads // head_kv
        do, _ = _unpad(do.contiguous(), _valid(ctx.seqlens_q, n_ctx, do.device))
        do = do.contiguous()
        prep = flashattn_bwd_preprocess(batch, heads, total_q, n_ctx, ctx.max_seqlen_q, dim_v)
        delta = prep(o, do, cu_seqlens_q)
        config = _tile_config(q.device, bwd_config(dim_qk, dim_v))
        args = (batch, total_q, total_kv, n_ctx, heads, ctx.max_seqlen_q, dim_qk, dim_v,
                ctx.causal)  # fmt: skip
        dq = torch.zeros_like(q, dtype=torch.float32)
        if ctx.use_atomic:
            use_tma = q.device.type == "cuda"  # TMA reductions on CUDA (sm_90+), as upstream
            kernel = flashattn_bwd_atomic_add(*args, groups=groups, use_tma=use_tma, **config)
            dk = torch.zeros_like(k, dtype=torch.float32)
            dv = torch.zeros_like(v, dtype=torch.float32)
            kernel(q, k, v, do, lse, delta, cu_seqlens_q, cu_seqlens_k, dq, dk, dv)
            dq, dk, dv = dq.half(), dk.half(), dv.half()
        else:
            kernel = flashattn_bwd_split(*args, groups=groups, **config)
            dk = k.new_zeros((groups, *k.shape))
            dv = v.new_zeros((groups, *v.shape))
            kernel(q, k, v, do, lse, delta, cu_seqlens_q, cu_seqlens_k, dq, dk, dv)
            dq = flashattn_bwd_postprocess(total_q, heads, dim_qk)(dq)
            dk, dv = dk.sum(0), dv.sum(0)
        dq = _pad(dq, ctx.indices_q, batch, n_ctx)
        dk = _pad(dk, ctx.indices_k, batch, n_ctx)
        dv = _pad(dv, ctx.indices_k, batch, n_ctx)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None


attention = _attention.apply


def ref_program(Q, K, V, padding_mask, is_causal, groups=1):
    """Padded GQA attention in float64: keys outside ``padding_mask`` masked, outputs there
    zero; causal aligned at the start (as upstream's reference)."""
    q = Q.double().transpose(1, 2)
    k, v = (x.double().repeat_interleave(groups, dim=2).transpose(1, 2) for x in (K, V))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    n = scores.shape[-1]
    mask = padding_mask.to(scores.device)[:, None, None, :]
    if is_causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=scores.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)
    return out.masked_fill(~padding_mask.to(out.device)[:, :, None, None], 0.0)


def main(BATCH=1, H=32, N_CTX=256, D_HEAD_QK=192, D_HEAD_V=128, groups=16, causal=False,
         use_atomic=True, device=None, seed=0):  # fmt: skip
    """Random sequence lengths (``generate_random_padding_mask``); O, dQ, dK, dV checked
    against float64 autograd on the valid rows; on CUDA the backward timed against the
    float64-free torch reference (unpadding included, as upstream)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)
    head_kv = H // groups
    q = torch.randn(BATCH, N_CTX, H, D_HEAD_QK, generator=gen).half().to(device)
    k = torch.randn(BATCH, N_CTX, head_kv, D_HEAD_QK, generator=gen).half().to(device)
    v = torch.randn(BATCH, N_CTX, head_kv, D_HEAD_V, generator=gen).half().to(device)
    do = torch.randn(BATCH, N_CTX, H, D_HEAD_V, generator=gen).half().to(device)
    padding_mask = generate_random_padding_mask(N_CTX, BATCH, device, generator=gen)
    seqlens = padding_mask.sum(dim=-1, dtype=torch.int32).to(device)
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    max_seqlen = int(seqlens.max())
    do = do.masked_fill(~padding_mask.to(device)[:, :, None, None], 0)

    def ours_fn(a, b, c):
        return attention(a, b, c, seqlens, seqlens, cu_seqlens, cu_seqlens, max_seqlen,
                         max_seqlen, causal, groups, use_atomic)  # fmt: skip

    ours = _grads(ours_fn, (q, k, v), do)
    ref = _grads(lambda a, b, c: ref_program(a, b, c, padding_mask, causal, groups),
                 [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("O", "dQ", "dK", "dV"), ours, ref):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
    print(f"gqa varlen bwd (TMA reduce) b={BATCH} h={H} groups={groups} n_ctx={N_CTX} "
          f"d_qk={D_HEAD_QK} d_v={D_HEAD_V} causal={causal} atomic={use_atomic} on {device}: "
          "O, dQ, dK, dV match")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        flops = 2.0 * BATCH * H * N_CTX * N_CTX * (3 * D_HEAD_QK + 2 * D_HEAD_V)
        flops *= 0.5 if causal else 1.0
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        o = ours_fn(*leaves)
        t = bench(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True),
                  warmup=10, rep=50, device=device)  # fmt: skip
        o_ref = ref_program(*(x.float() for x in leaves), padding_mask, causal, groups)
        t_ref = bench(lambda: torch.autograd.grad(o_ref, leaves, do.double(), retain_graph=True),
                      warmup=10, rep=50, device=device)  # fmt: skip
        print(f"backward (unpadding included): tilelang {t:.3f} ms "
              f"({flops / t * 1e-9:.1f} TFLOP/s), torch reference {t_ref:.3f} ms")  # fmt: skip
    return ours


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8, help="Batch size")
    parser.add_argument("--h", type=int, default=32, help="Number of heads")
    parser.add_argument("--n_ctx", type=int, default=1024, help="Context size")
    parser.add_argument("--d_head_qk", type=int, default=192, help="Head dimension for Q/K")
    parser.add_argument("--d_head_v", type=int, default=128, help="Head dimension for V")
    parser.add_argument("--causal", action="store_true", help="Causal flag")
    parser.add_argument("--groups", type=int, default=16, help="groups")
    parser.add_argument("--use_atomic", action="store_true", default=False,
                        help="Use atomic add for dK/dV")  # fmt: skip
    parser.add_argument("--use_split", action="store_true", default=False,
                        help="Use split for dK/dV")  # fmt: skip
    args = parser.parse_args()
    use_atomic = not args.use_split  # atomics unless --use_split, as upstream
    main(args.batch, args.h, args.n_ctx, args.d_head_qk, args.d_head_v, args.groups,
         args.causal, use_atomic)  # fmt: skip
