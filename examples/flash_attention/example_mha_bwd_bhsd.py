"""FlashAttention backward, (batch, heads, seq, dim) layout, as upstream TileLang's example.

Kernels: the forward (``O`` and the base-2 log-sum-exp per query row), ``Delta = rowsum(O *
dO)``, the backward (one block per (head, K/V block): recompute ``P^T``, ``dV += P^T dO``,
``dK += dS^T Q``, ``dQ += dS K`` with float32 atomics into an accumulator stored in
``make_dq_layout``'s order) and the conversion of that accumulator to float16. The sequence
length need not be a tile multiple (the accumulator's rows are rounded up to 8).
``attention(q, k, v, causal)`` is a ``torch.autograd.Function`` over them.

    python examples/flash_attention/example_mha_bwd_bhsd.py --batch 2 --h 8 --n_ctx 1000 --causal
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def fwd_config(dim):
    """Forward block sizes by head dim (warp-specialized on sm_90a: 128 x 128 on two consumer
    warpgroups; 128 x 64 at head dim 256, whose K/V stages are larger)."""
    if dim <= 128:
        return dict(block_M=128, block_N=128, threads=256, num_stages=2)
    return dict(block_M=128, block_N=64, threads=256, num_stages=2)


def bwd_config(dim):
    """Backward block sizes by head dim: dK and dV (block_M x dim floats each) stay in
    registers for the whole loop over query blocks."""
    if dim <= 128:  # at 128 every gemm is on wgmma (dS K too: 64 rows over 2 warpgroups)
        return dict(block_M=128, block_N=64, threads=256, num_stages=2)
    # 64 x 64 at 256: every gemm on wgmma as well (64 x 32 blocks put dS K on mma.sync and
    # the score gemms on m64n16); H200, session 8: 0.64-0.66x -> 0.82-0.88x cuDNN
    return dict(block_M=64, block_N=64, threads=256, num_stages=2)


@tilelang.jit(out_idx=[3, 4])
def flashattn_fwd(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, threads=128,
                  num_stages=1):  # fmt: skip
    """``kernel(Q, K, V) -> (O, LSE)``; ``LSE[b, h, s] = log2(sum_k exp2(S * scale))``."""
    scale = (1.0 / dim) ** 0.5 * LOG2E
    shape = [batch, heads, seq_len, dim]
    dtype, accum = "float16", "float"
    kv_tail = seq_len % block_N != 0

    @T.prim_func
    def flash_fwd(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
        lse: T.Tensor([batch, heads, seq_len], accum),
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

            T.copy(Q[bz, by, bx * block_M : (bx + 1) * block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(accum))
            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N : (k + 1) * block_N, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            bx * block_M + i >= k * block_N + j, 0, -T.infinity(accum)
                        )
                elif kv_tail:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            k * block_N + j < seq_len, 0, -T.infinity(accum)
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                if is_causal:  # Check_inf: a fully masked row keeps max 0, not -inf
                    for i in T.Parallel(block_M):
                        m[i] = T.if_then_else(m[i] == -T.infinity(accum), 0, m[i])
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
                T.copy(V[bz, by, k * block_N : (k + 1) * block_N, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, by, bx * block_M : (bx + 1) * block_M, :])
            for i in T.Parallel(block_M):
                logsum[i] = T.log2(logsum[i]) + m[i] * scale
            T.copy(logsum, lse[bz, by, bx * block_M : (bx + 1) * block_M])

    return flash_fwd


@tilelang.jit(out_idx=[2])
def flashattn_bwd_preprocess(batch, heads, seq_len, dim, block=64, threads=128):
    """``Delta[b, h, s] = sum_d O[b, h, s, d] * dO[b, h, s, d]`` (float32)."""
    shape = [batch, heads, seq_len, dim]
    dtype, accum = "float16", "float"

    @T.prim_func
    def flash_bwd_prep(
        O: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        Delta: T.Tensor([batch, heads, seq_len], accum),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block), batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment([block, dim], accum)
            do = T.alloc_fragment([block, dim], accum)
            delta = T.alloc_fragment([block], accum)
            T.copy(O[bz, bx, by * block : (by + 1) * block, :], o)
            T.copy(dO[bz, bx, by * block : (by + 1) * block, :], do)
            for i, j in T.Parallel(block, dim):
                o[i, j] *= do[i, j]
            T.reduce_sum(o, delta, dim=1)
            T.copy(delta, Delta[bz, bx, by * block : (by + 1) * block])

    return flash_bwd_prep


def dq_accum_shape(batch, heads, seq_len, dim):
    """The float32 dQ accumulator's shape: rows rounded up to a multiple of 8 so that
    ``make_dq_layout`` is a permutation of its storage (zero it before the backward)."""
    return [batch, heads, (seq_len + 7) // 8 * 8, dim]


def make_dq_layout(dQ):
    """dQ's storage order: rows in groups of 8, column pairs interleaved, so that the
    atomics of one mma accumulator row-group of a warp are consecutive."""
    return T.Layout(
        dQ.shape, lambda b, h, l, d: [b, h, l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]
    )


@tilelang.jit(out_idx=[1])
def flashattn_bwd_postprocess(batch, heads, seq_len, dim, block=64, threads=128, dq_layout=True):
    """The float32 dQ accumulator (``make_dq_layout`` order, or row-major with
    ``dq_layout=False``) -> row-major float16."""

    @T.prim_func
    def flash_bwd_post(
        dQ: T.Tensor(dq_accum_shape(batch, heads, seq_len, dim), "float"),
        dQ_out: T.Tensor([batch, heads, seq_len, dim], "float16"),
    ):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            if dq_layout:
                T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(
                dQ[bz, by, bx * block : (bx + 1) * block, :],
                dQ_out[bz, by, bx * block : (bx + 1) * block, :],
            )

    return flash_bwd_post


@tilelang.jit
def flashattn_bwd(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=32, threads=128,
                  num_stages=2, stats_from_global=False, dq_layout=True, dq_first=True,
                  pds_shared=False, dq_atomics=True, dq_tma_reduce=False):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, dQ, dK, dV)``; dQ float32 of ``dq_accum_shape``,
    zeroed by the caller; dK, dV float16.

    ``dq_layout``: dQ accumulated in ``make_dq_layout``'s order, one scalar atomic per
    element (upstream's); False: row-major, added from the fragment with one float2 atomic
    per column pair on sm_90 (``flashattn_bwd_postprocess`` takes the same flag).

    ``dq_first``: dS^T goes to shared before dK += dS^T Q is issued, then dQ = dS K and dK
    are issued back to back (FlashAttention-3's order: dK runs while dQ's atomics go out);
    False: upstream's order (dK first, waited for before the store, which reads its
    register operand).

    ``dq_tma_reduce``: dq goes to a float32 shared tile (swizzled) and one thread adds it
    into dQ with a TMA bulk tensor reduction (``T.atomic_add(dQ[...], dq_shared,
    use_tma=True)``, sm_90+: ``cp.reduce.async.bulk.tensor``) instead of 32 scalar atomics
    per thread and iteration. Needs ``dq_layout=False``: a TMA box adds a row-major block
    (``make_dq_layout`` permutes the elements of a block; ``flashattn_bwd_postprocess``
    takes ``dq_layout=False`` too). CUDA sm_90+ only, like upstream's ``use_tma``.

    ``dq_atomics=False``: for profiling only, dQ goes to a shared tile with plain stores
    instead of the atomics (dQ is wrong; dK and dV are right): what the 32 scalar
    ``red.global.add.f32`` per thread and iteration cost against the shared staging a TMA
    bulk reduce would need (``flash_attention_variants.py --bwd-cases no_dq_atomics``).

    ``stats_from_global``: read ``lse`` and ``Delta`` straight from global memory in the
    elementwise loops (L1-cached, each thread its own columns) instead of copying them to
    shared tiles. Either way the loop is warp-specialized on sm_90a: by default lse/Delta
    arrive as 1-d TMA boxes in the same stages as Q and dO (their element reads feed the
    wgmma gemms, which ``ws_stage_reads`` checks before it lets the stage be released).
    Off by default: kept to compare the two on the GPU (``flash_attention_variants.py``)."""
    if dq_tma_reduce and dq_layout:
        raise ValueError(
            "dq_tma_reduce=True needs dq_layout=False (a TMA reduction adds a row-major block; "
            "make_dq_layout permutes it)"
        )
    sm_scale = (1.0 / dim) ** 0.5
    scale = sm_scale * LOG2E
    shape = [batch, heads, seq_len, dim]
    dtype, accum = "float16", "float"
    # keys past seq_len are zero rows (P^T = exp2(-lse) there): mask them out of dS, which
    # feeds dQ (causal masks them already)
    key_tail = seq_len % block_M != 0 and not is_causal

    @T.prim_func
    def flash_bwd(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        lse: T.Tensor([batch, heads, seq_len], accum),
        Delta: T.Tensor([batch, heads, seq_len], accum),
        dQ: T.Tensor(dq_accum_shape(batch, heads, seq_len, dim), accum),
        dK: T.Tensor(shape, dtype),
        dV: T.Tensor(shape, dtype),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block_M), batch, threads=threads) as (bx, by, bz):
            K_shared = T.alloc_shared([block_M, dim], dtype)
            V_shared = T.alloc_shared([block_M, dim], dtype)
            dsT_shared = T.alloc_shared([block_M, block_N], dtype)
            if pds_shared:
                qkT_shared = T.alloc_shared([block_M, block_N], dtype)
            q = T.alloc_shared([block_N, dim], dtype)
            do = T.alloc_shared([block_N, dim], dtype)
            if not stats_from_global:
                lse_shared = T.alloc_shared([block_N], accum)
                delta = T.alloc_shared([block_N], accum)
            qkT = T.alloc_fragment([block_M, block_N], accum)
            dsT = T.alloc_fragment([block_M, block_N], accum)
            qkT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dsT_cast = T.alloc_fragment([block_M, block_N], dtype)
            dq = T.alloc_fragment([block_N, dim], accum)
            dv = T.alloc_fragment([block_M, dim], accum)
            dk = T.alloc_fragment([block_M, dim], accum)
            dv_shared = T.alloc_shared([block_M, dim], dtype)
            dk_shared = T.alloc_shared([block_M, dim], dtype)
            if not dq_atomics or dq_tma_reduce:
                dq_shared = T.alloc_shared([block_N, dim], accum)

            if dq_layout:
                T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(K[bz, bx, by * block_M : (by + 1) * block_M, :], K_shared)
            T.copy(V[bz, bx, by * block_M : (by + 1) * block_M, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            loop_st = by * block_M // block_N if is_causal else 0
            loop_ed = T.ceildiv(seq_len, block_N)
            for k in T.Pipelined(loop_st, loop_ed, num_stages=num_stages):
                T.copy(Q[bz, bx, k * block_N : (k + 1) * block_N, :], q)
                T.gemm(K_shared, q, qkT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
                if stats_from_global:
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.exp2(qkT[i, j] * scale - lse[bz, bx, k * block_N + j])
                else:
                    T.copy(lse[bz, bx, k * block_N : (k + 1) * block_N], lse_shared)
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.exp2(qkT[i, j] * scale - lse_shared[j])  # P^T
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.if_then_else(
                            by * block_M + i <= k * block_N + j, qkT[i, j], 0
                        )
                elif key_tail:
                    for i, j in T.Parallel(block_M, block_N):
                        qkT[i, j] = T.if_then_else(by * block_M + i < seq_len, qkT[i, j], 0)
                # dP^T: written after P^T, issued with S^T (tl.wgmma_issue_hoisting) so that
                # it runs while P^T is computed
                T.copy(dO[bz, bx, k * block_N : (k + 1) * block_N, :], do)
                T.gemm(V_shared, do, dsT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
                if pds_shared:
                    T.copy(qkT, qkT_shared)
                    T.gemm(qkT_shared, do, dv, policy=T.GemmWarpPolicy.FullRow)  # dV += P^T dO
                else:
                    T.copy(qkT, qkT_cast)
                    T.gemm(qkT_cast, do, dv, policy=T.GemmWarpPolicy.FullRow)  # dV += P^T dO
                if stats_from_global:
                    for i, j in T.Parallel(block_M, block_N):
                        dsT[i, j] = (
                            qkT[i, j] * (dsT[i, j] - Delta[bz, bx, k * block_N + j]) * sm_scale
                        )
                else:
                    T.copy(Delta[bz, bx, k * block_N : (k + 1) * block_N], delta)
                    for i, j in T.Parallel(block_M, block_N):
                        dsT[i, j] = qkT[i, j] * (dsT[i, j] - delta[j]) * sm_scale  # dS^T
                if pds_shared:  # dS^T to shared straight from the accumulator, both gemms SS
                    T.copy(dsT, dsT_shared)
                    T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                    T.gemm(dsT_shared, q, dk, policy=T.GemmWarpPolicy.FullRow)  # dK += dS^T Q
                elif dq_first:  # dS^T to shared first, then dQ and dK issued back to back
                    T.copy(dsT, dsT_cast)
                    T.copy(dsT_cast, dsT_shared)
                    T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                    T.gemm(dsT_cast, q, dk, policy=T.GemmWarpPolicy.FullRow)  # dK += dS^T Q
                else:
                    T.copy(dsT, dsT_cast)
                    T.gemm(dsT_cast, q, dk, policy=T.GemmWarpPolicy.FullRow)  # dK += dS^T Q
                    T.copy(dsT_cast, dsT_shared)
                    T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                if not dq_atomics:  # profiling only: dq to shared (plain stores), no atomics
                    T.copy(dq, dq_shared)
                elif dq_tma_reduce:  # one TMA reduction of the staged block
                    T.copy(dq, dq_shared)
                    T.atomic_add(dQ[bz, bx, k * block_N : (k + 1) * block_N, :], dq_shared,
                                 use_tma=True)  # fmt: skip
                elif dq_layout:
                    for i, j in T.Parallel(block_N, dim):
                        T.atomic_add(dQ[bz, bx, k * block_N + i, j], dq[i, j])
                else:
                    T.atomic_add(dQ[bz, bx, k * block_N : (k + 1) * block_N, :], dq)
            if not dq_atomics:  # keeps the dQ gemm live (the values are meaningless)
                T.copy(dq_shared, dQ[bz, bx, 0:block_N, :])
            T.copy(dv, dv_shared)
            T.copy(dk, dk_shared)
            T.copy(dv_shared, dV[bz, bx, by * block_M : (by + 1) * block_M, :])
            T.copy(dk_shared, dK[bz, bx, by * block_M : (by + 1) * block_M, :])

    return flash_bwd


def _config_for(tensor, gpu_config):
    """The GPU block sizes on CUDA; small tiles on the CPU backend."""
    if tensor.device.type == "cuda":
        return gpu_config
    return dict(block_M=64, block_N=32, threads=128, num_stages=1)


class _attention(torch.autograd.Function):
    """Attention whose forward and backward are the kernels above (float16, bhsd)."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        batch, heads, seq_len, dim = q.shape
        kernel = flashattn_fwd(
            batch, heads, seq_len, dim, causal, **_config_for(q, fwd_config(dim))
        )
        o, lse = kernel(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        batch, heads, seq_len, dim = q.shape
        do = do.contiguous()
        delta = flashattn_bwd_preprocess(batch, heads, seq_len, dim)(o, do)
        config = _config_for(q, bwd_config(dim))
        kernel = flashattn_bwd(batch, heads, seq_len, dim, ctx.causal, **config)
        dq = q.new_zeros(dq_accum_shape(batch, heads, seq_len, dim), dtype=torch.float32)
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        kernel(q, k, v, do, lse, delta, dq, dk, dv)
        post = flashattn_bwd_postprocess(batch, heads, seq_len, dim,
                                         dq_layout=config.get("dq_layout", True))  # fmt: skip
        dq = post(dq)
        return dq, dk, dv, None


attention = _attention.apply


def ref_program(Q, K, V, is_causal):
    """Attention in float64 (bhsd)."""
    return F.scaled_dot_product_attention(Q.double(), K.double(), V.double(), is_causal=is_causal)


def _grads(fn, tensors, do):
    """(O, dQ, dK, dV) of ``fn(*tensors)`` for output gradient ``do``."""
    leaves = [t.detach().requires_grad_() for t in tensors]
    out = fn(*leaves)
    out.backward(do.to(out.dtype))
    return [out.detach(), *(t.grad for t in leaves)]


def main(BATCH=8, H=32, N_CTX=1024, D_HEAD=64, causal=False, device=None):
    """Check O, dQ, dK, dV against torch autograd in float64 on random inputs; on CUDA also
    time the backward against torch SDPA's."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q, k, v, do = (torch.randn(BATCH, H, N_CTX, D_HEAD, dtype=torch.half, device=device)
                   for _ in range(4))  # fmt: skip
    ours = _grads(lambda a, b, c: attention(a, b, c, causal), (q, k, v), do)
    ref = _grads(lambda a, b, c: ref_program(a, b, c, causal), [x.double() for x in (q, k, v)], do)
    for name, got, want in zip(("O", "dQ", "dK", "dV"), ours, ref):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
    print(f"mha bwd bhsd b={BATCH} h={H} s={N_CTX} d={D_HEAD} causal={causal} on {device}: "
          "O, dQ, dK, dV match")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        flops = 5 * 2.0 * BATCH * H * N_CTX * N_CTX * D_HEAD * (0.5 if causal else 1.0)
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        o = attention(*leaves, causal)
        t = bench(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True),
                  warmup=10, rep=50, device=device)  # fmt: skip
        o_ref = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        t_ref = bench(lambda: torch.autograd.grad(o_ref, leaves, do, retain_graph=True),
                      warmup=10, rep=50, device=device)  # fmt: skip
        print(f"backward: tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s), "
              f"torch SDPA {t_ref:.3f} ms ({flops / t_ref * 1e-9:.1f} TFLOP/s)")  # fmt: skip
    return ours


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8, help="Batch size")
    parser.add_argument("--h", type=int, default=32, help="Number of heads")
    parser.add_argument("--n_ctx", type=int, default=1024, help="Context size")
    parser.add_argument("--d_head", type=int, default=64, help="Head dimension")
    parser.add_argument("--causal", action="store_true", help="Causal flag")
    args = parser.parse_args()
    main(args.batch, args.h, args.n_ctx, args.d_head, args.causal)
