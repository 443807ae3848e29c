"""Helpers of the variable-length (``cu_seqlens``) attention examples: random packed inputs
and a float64 reference that runs each sequence on its own."""

import torch
import torch.nn.functional as F


def random_seqlens(batch, max_seqlen, generator=None, min_seqlen=1):
    """``batch`` lengths drawn uniformly from ``[min_seqlen, max_seqlen]`` (int list)."""
    lens = torch.randint(min_seqlen, max_seqlen + 1, (batch,), generator=generator)
    return [int(x) for x in lens]


def cu_seqlens_of(seqlens, device):
    """Prefix sums ``[0, l0, l0 + l1, ...]`` as the int32 tensor the kernels take."""
    cu = torch.zeros(len(seqlens) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(seqlens, dtype=torch.int64), 0).to(torch.int32)
    return cu.to(device)


def make_varlen_inputs(seqlens_q, seqlens_k, heads, head_kv, dim, device, dtype=torch.float16):
    """Packed ``q (sum(seqlens_q), heads, dim)``, ``k``/``v`` ``(sum(seqlens_k), head_kv,
    dim)``, ``cu_seqlens_q``, ``cu_seqlens_k`` and ``max_seqlen_q``."""
    q = torch.randn(sum(seqlens_q), heads, dim, dtype=dtype, device=device)
    k, v = (torch.randn(sum(seqlens_k), head_kv, dim, dtype=dtype, device=device)
            for _ in range(2))  # fmt: skip
    cu_q, cu_k = cu_seqlens_of(seqlens_q, device), cu_seqlens_of(seqlens_k, device)
    return q, k, v, cu_q, cu_k, max(seqlens_q)


def ref_program_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, is_causal, groups=1):
    """Attention of each packed sequence in float64. Causal is aligned on the right
    (query ``i`` of a ``lq``-query, ``lk``-key sequence sees keys ``<= i + lk - lq``, as
    flash_attn's varlen kernels do); a query that sees no key gets zeros."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cu_q) - 1):
        qs, qe, ks, ke = cu_q[b], cu_q[b + 1], cu_k[b], cu_k[b + 1]
        lq, lk = qe - qs, ke - ks
        if lq == 0 or lk == 0:
            continue
        qb = q[qs:qe].double().transpose(0, 1)  # (heads, lq, dim)
        kb, vb = (x[ks:ke].double().repeat_interleave(groups, dim=1).transpose(0, 1)
                  for x in (k, v))  # fmt: skip
        mask = None
        if is_causal:
            mask = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril(lk - lq)
        ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask).transpose(0, 1)
        if is_causal:
            ob[~mask.any(dim=1)] = 0.0  # SDPA gives NaN where every key is masked
        out[qs:qe] = ob
    return out
