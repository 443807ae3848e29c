"""FlashAttention backward (batch, seq, heads, dim layout) in three kernels, as upstream
TileLang's example structures it:

1. the forward pass, which also writes each row's log-sum-exp (base 2);
2. ``Delta = rowsum(O * dO)``;
3. per K/V block: recompute ``P^T`` from ``K Q^T`` and the LSE, ``dV += P^T dO``,
   ``dS^T = P^T * (V dO^T - Delta)``, ``dK += dS^T Q``, and ``dQ += dS K`` added into a float32
   buffer with ``T.atomic_add`` (several K/V blocks contribute to each query row).

With ``dq_layout=True`` dQ's storage is permuted as upstream's example does it
(``make_dq_layout``: the atomic adds of a warp land on consecutive addresses), each element
is added from a ``T.Parallel`` loop, and a fourth kernel converts it back to row-major fp16.
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


@tilelang.jit(out_idx=[3, 4])
def flashattn_fwd(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, threads=128):
    """``O`` and ``LSE`` (``log2(sum(exp2(S * scale)))`` per query row, [batch, heads, seq])."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    shape = [batch, seq_len, heads, dim]
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
        LSE: T.Tensor([batch, heads, seq_len], accum),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum)
            m = T.alloc_fragment([block_M], accum)
            m_prev = T.alloc_fragment([block_M], accum)
            rescale = T.alloc_fragment([block_M], accum)
            row_sum = T.alloc_fragment([block_M], accum)
            logsum = T.alloc_fragment([block_M], accum)

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(accum))
            loop_range = (
                T.ceildiv((bx + 1) * block_M, block_N) if is_causal else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(loop_range, num_stages=1):
                T.copy(K[bz, k * block_N : (k + 1) * block_N, by, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            bx * block_M + i >= k * block_N + j, 0, -T.infinity(accum)
                        )
                elif seq_len % block_N:  # keys past seq_len in the last K block
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            k * block_N + j < seq_len, 0, -T.infinity(accum)
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(m_prev[i] * scale - m[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * rescale[i] + row_sum[i]
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                T.copy(acc_s, acc_s_cast)
                T.copy(V[bz, k * block_N : (k + 1) * block_N, by, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])
            for i in T.Parallel(block_M):
                logsum[i] = T.log2(logsum[i]) + m[i] * scale
            T.copy(logsum, LSE[bz, by, bx * block_M : (bx + 1) * block_M])

    return main


@tilelang.jit(out_idx=[2])
def flashattn_bwd_preprocess(batch, heads, seq_len, dim, block=64, threads=128):
    """``Delta[b, h, s] = sum_d O[b, s, h, d] * dO[b, s, h, d]``."""
    shape = [batch, seq_len, heads, dim]
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(
        O: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        Delta: T.Tensor([batch, heads, seq_len], accum),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block), batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment([block, dim], accum)
            do = T.alloc_fragment([block, dim], accum)
            delta = T.alloc_fragment([block], accum)
            T.copy(O[bz, by * block : (by + 1) * block, bx, :], o)
            T.copy(dO[bz, by * block : (by + 1) * block, bx, :], do)
            for i, j in T.Parallel(block, dim):
                o[i, j] *= do[i, j]
            T.reduce_sum(o, delta, dim=1)
            T.copy(delta, Delta[bz, bx, by * block : (by + 1) * block])

    return main


def make_dq_layout(dQ):
    """dQ's storage order: rows in groups of 8, column pairs interleaved (upstream's)."""
    return T.Layout(
        dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]
    )


def bwd_config(dim):
    """GPU block sizes of the backward kernel by head dim (those of
    ``example_mha_bwd_bhsd.bwd_config``: on sm_90a every gemm on wgmma at head dim 128, the
    loop warp-specialized with TMA Q/dO and 1-d TMA lse/Delta boxes)."""
    if dim <= 128:
        return dict(block_M=128, block_N=64, threads=256, num_stages=2)
    return dict(block_M=64, block_N=32, threads=256, num_stages=2)


@tilelang.jit
def flashattn_bwd(
    batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, threads=128, dq_layout=False,
    num_stages=1,
):  # fmt: skip
    """dQ (float32, accumulated: zero it first), dK and dV; one block per ``block_M`` keys.
    ``dq_layout``: dQ is stored in ``make_dq_layout``'s order. :func:`bwd_config` gives
    the block sizes used on a GPU."""
    sm_scale = (1.0 / dim) ** 0.5
    scale = sm_scale * LOG2E
    shape = [batch, seq_len, heads, dim]
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        LSE: T.Tensor([batch, heads, seq_len], accum),
        Delta: T.Tensor([batch, heads, seq_len], accum),
        dQ: T.Tensor(shape, accum),
        dK: T.Tensor(shape, dtype),
        dV: T.Tensor(shape, dtype),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block_M), batch, threads=threads) as (bx, by, bz):
            K_shared = T.alloc_shared([block_M, dim], dtype)
            V_shared = T.alloc_shared([block_M, dim], dtype)
            q = T.alloc_shared([block_N, dim], dtype)
            do = T.alloc_shared([block_N, dim], dtype)
            lse = T.alloc_shared([block_N], accum)
            delta = T.alloc_shared([block_N], accum)
            dsT_shared = T.alloc_shared([block_M, block_N], dtype)
            qkT = T.alloc_fragment([block_M, block_N], accum)
            dsT = T.alloc_fragment([block_M, block_N], accum)
            qkT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dsT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dq = T.alloc_fragment([block_N, dim], accum)
            dv = T.alloc_fragment([block_M, dim], accum)
            dk = T.alloc_fragment([block_M, dim], accum)

            if dq_layout:
                T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(K[bz, by * block_M : (by + 1) * block_M, bx, :], K_shared)
            T.copy(V[bz, by * block_M : (by + 1) * block_M, bx, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            # causal: query blocks before this key block see none of its keys
            first = by * block_M // block_N if is_causal else 0
            for kk in T.Pipelined(T.ceildiv(seq_len, block_N) - first, num_stages=num_stages):
                k = first + kk
                T.copy(Q[bz, k * block_N : (k + 1) * block_N, bx, :], q)
                T.gemm(K_shared, q, qkT, transpose_B=True, clear_accum=True)
                T.copy(LSE[bz, bx, k * block_N : (k + 1) * block_N], lse)
                for i, j in T.Parallel(block_M, block_N):
                    qkT[i, j] = T.exp2(qkT[i, j] * scale - lse[j])  # P^T
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.if_then_else(
                            by * block_M + i <= k * block_N + j, qkT[i, j], 0
                        )
                elif seq_len % block_M:
                    # keys past seq_len are zero rows, P^T = exp2(-lse) there: keep them out
                    # of dS, which feeds dQ (their dK/dV rows are never stored)
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.if_then_else(by * block_M + i < seq_len, qkT[i, j], 0)
                T.copy(dO[bz, k * block_N : (k + 1) * block_N, bx, :], do)
                T.gemm(V_shared, do, dsT, transpose_B=True, clear_accum=True)  # (dO V^T)^T
                T.copy(qkT, qkT_cast)
                T.gemm(qkT_cast, do, dv)  # dV += P^T dO
                T.copy(Delta[bz, bx, k * block_N : (k + 1) * block_N], delta)
                for i, j in T.Parallel(block_M, block_N):
                    dsT[i, j] = qkT[i, j] * (dsT[i, j] - delta[j]) * sm_scale  # dS^T
                T.copy(dsT, dsT_cast)
                # dS^T to shared first, then dQ and dK back to back: dK runs while dQ's
                # atomics go out
                T.copy(dsT_cast, dsT_shared)
                T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                T.gemm(dsT_cast, q, dk)  # dK += dS^T Q
                if dq_layout:
                    for i, j in T.Parallel(block_N, dim):
                        T.atomic_add(dQ[bz, k * block_N + i, bx, j], dq[i, j])
                else:
                    T.atomic_add(dQ[bz, k * block_N : (k + 1) * block_N, bx, :], dq)
            T.copy(dv, dV[bz, by * block_M : (by + 1) * block_M, bx, :])
            T.copy(dk, dK[bz, by * block_M : (by + 1) * block_M, bx, :])

    return main


@tilelang.jit(out_idx=[1])
def flashattn_bwd_postprocess(batch, heads, seq_len, dim, block=64, threads=128):
    """dQ stored in ``make_dq_layout``'s order -> row-major fp16."""
    shape = [batch, seq_len, heads, dim]

    @T.prim_func
    def main(dQ: T.Tensor(shape, "float"), dQ_out: T.Tensor(shape, "float16")):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(
                dQ[bz, bx * block : (bx + 1) * block, by, :],
                dQ_out[bz, bx * block : (bx + 1) * block, by, :],
            )

    return main


def attention_backward(q, k, v, do, is_causal, block_M=None, block_N=None, dq_layout=False):
    """(O, dQ, dK, dV) for fp16 bshd inputs, through the three (four) kernels. Block sizes:
    :func:`bwd_config` on CUDA, 64 x 64 on 128 threads (one stage) elsewhere, unless given."""
    batch, seq_len, heads, dim = q.shape
    if dq_layout and seq_len % 8:
        raise ValueError(f"dq_layout=True needs seq_len ({seq_len}) to be a multiple of 8")
    o, lse = flashattn_fwd(batch, heads, seq_len, dim, is_causal)(q, k, v)
    delta = flashattn_bwd_preprocess(batch, heads, seq_len, dim)(o, do)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    if q.device.type == "cuda":
        config = bwd_config(dim)
    else:
        config = dict(block_M=64, block_N=64, threads=128, num_stages=1)
    config.update({key: val for key, val in (("block_M", block_M), ("block_N", block_N)) if val})
    kernel = flashattn_bwd(batch, heads, seq_len, dim, is_causal, dq_layout=dq_layout, **config)
    kernel(q, k, v, do, lse, delta, dq, dk, dv)
    if dq_layout:
        return o, flashattn_bwd_postprocess(batch, heads, seq_len, dim)(dq), dk, dv
    return o, dq.to(torch.float16), dk, dv


def ref_program(q, k, v, do, is_causal):
    """O and the gradients from torch autograd in float64."""
    q, k, v = (x.double().transpose(1, 2).requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out.backward(do.double().transpose(1, 2))
    return [x.transpose(1, 2) for x in (out, q.grad, k.grad, v.grad)]


def main(batch=1, heads=2, seq_len=128, dim=64, is_causal=False, device=None, dq_layout=False):
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v, do = (
        torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float16)
        for _ in range(4)
    )
    ours = attention_backward(q, k, v, do, is_causal, dq_layout=dq_layout)
    for name, got, want in zip(("O", "dQ", "dK", "dV"), ours, ref_program(q, k, v, do, is_causal)):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
    print(
        f"flash attention bwd b={batch} h={heads} s={seq_len} d={dim} causal={is_causal} "
        f"dq_layout={dq_layout} on {device}: O, dQ, dK, dV match"
    )
    return ours


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--is_causal", action="store_true")
    parser.add_argument("--dq_layout", action="store_true")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.is_causal, dq_layout=args.dq_layout)
