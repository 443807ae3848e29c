"""Grouped-query attention backward with TMA reductions, (batch, seq, heads, dim) layout, as
upstream TileLang's example: the atomic variant stages dQ (every query block), dK and dV (once
per K/V block) in float32 shared tiles and adds each into global memory with
``T.atomic_add(global, shared, use_tma=True)``: one bulk tensor reduction
(``cp.reduce.async.bulk.tensor ... .add``, sm_90+) issued by one thread, instead of one atomic
per element. The split variant writes per-query-head dK/dV slices (summed afterwards) and adds
dQ element by element into an accumulator stored head-major (``make_dq_layout``: bshd ->
bhsd), converted by ``flashattn_bwd_postprocess``.

The forward, ``Delta`` and the reference are ``example_gqa_bwd.py``'s. ``use_tma=True`` needs
CUDA sm_90+ (a compile error elsewhere, as upstream); on the CPU backend (``device="cpu"``)
the kernels are built with ``use_tma=False``, the same sums by ordinary atomics.

    python examples/flash_attention/example_gqa_bwd_tma_reduce.py --h 32 --groups 16 --causal
"""

import argparse

import torch
from example_gqa_bwd import (
    _check_groups,
    _config_for,
    _grads,
    flashattn_bwd_preprocess,
    flashattn_fwd,
    fwd_config,
    ref_program,
)

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def bwd_config(dim_qk, dim_v):
    """Backward block sizes by head dim (dK, dV in registers over the loop; their float32
    staging tiles take the pipeline's shared memory once the loop is over)."""
    if max(dim_qk, dim_v) <= 128:
        return dict(block_M=128, block_N=64, threads=256, num_stages=2)
    return dict(block_M=64, block_N=32, threads=256, num_stages=2)


def make_dq_layout(dQ):
    """bshd -> bhsd storage of the split variant's dQ accumulator: a head's rows contiguous."""
    return T.Layout(dQ.shape, lambda b, l, h, d: [b, h, l, d])


@tilelang.jit(out_idx=[1])
def flashattn_bwd_postprocess(batch, heads, seq_len, dim_qk, block=64, threads=128):
    """The float32 dQ accumulator (``make_dq_layout`` order) -> row-major bshd float16."""
    shape = [batch, seq_len, heads, dim_qk]

    @T.prim_func
    def flash_bwd_post(dQ: T.Tensor(shape, "float"), dQ_out: T.Tensor(shape, "float16")):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(
                dQ[bz, bx * block : (bx + 1) * block, by, :],
                dQ_out[bz, bx * block : (bx + 1) * block, by, :],
            )

    return flash_bwd_post


def _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N, threads,
                 num_stages, groups, split, use_tma):  # fmt: skip
    """The backward kernel: ``split`` as ``flashattn_bwd_split_novarlen``, else
    ``flashattn_bwd_atomic_add`` (``use_tma``: the TMA reductions)."""
    _check_groups(heads, groups)
    sm_scale = (1.0 / dim_qk) ** 0.5
    scale = sm_scale * LOG2E
    head_kv = heads // groups
    q_shape = [batch, seq_len, heads, dim_qk]
    k_shape = [batch, seq_len, head_kv, dim_qk]
    v_shape = [batch, seq_len, head_kv, dim_v]
    dtype, accum = "float16", "float"
    dkv_dtype = dtype if split else accum
    dk_shape = [groups, *k_shape] if split else k_shape
    dv_shape = [groups, *v_shape] if split else v_shape
    # keys past seq_len are zero rows (P^T = exp2(-lse) there): mask them out of dS, which
    # feeds dQ (causal masks them already)
    key_tail = seq_len % block_M != 0 and not is_causal

    @T.prim_func
    def flash_bwd(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(k_shape, dtype),
        V: T.Tensor(v_shape, dtype),
        dO: T.Tensor([batch, seq_len, heads, dim_v], dtype),
        lse: T.Tensor([batch, heads, seq_len], accum),
        Delta: T.Tensor([batch, heads, seq_len], accum),
        dQ: T.Tensor(q_shape, accum),
        dK: T.Tensor(dk_shape, dkv_dtype),
        dV: T.Tensor(dv_shape, dkv_dtype),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block_M), batch, threads=threads) as (bx, by, bz):
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

            T.copy(K[bz, by * block_M : (by + 1) * block_M, bx // groups, :], K_shared)
            T.copy(V[bz, by * block_M : (by + 1) * block_M, bx // groups, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            loop_st = by * block_M // block_N if is_causal else 0
            loop_ed = T.ceildiv(seq_len, block_N)
            for k in T.Pipelined(loop_st, loop_ed, num_stages=num_stages):
                T.copy(Q[bz, k * block_N : (k + 1) * block_N, bx, :], q)
                T.gemm(K_shared, q, qkT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip
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
                T.copy(dO[bz, k * block_N : (k + 1) * block_N, bx, :], do)
                T.gemm(V_shared, do, dsT, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)  # fmt: skip  # dP^T
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
                        T.atomic_add(dQ[bz, k * block_N + i, bx, j], dq[i, j])
                else:
                    T.copy(dq, dq_shared)
                    T.atomic_add(dQ[bz, k * block_N : (k + 1) * block_N, bx, :], dq_shared,
                                 use_tma=use_tma)  # fmt: skip
            T.copy(dv, dv_shared)
            T.copy(dk, dk_shared)
            if split:
                T.copy(dv_shared,
                       dV[bx % groups, bz, by * block_M : (by + 1) * block_M, bx // groups, :])  # fmt: skip
                T.copy(dk_shared,
                       dK[bx % groups, bz, by * block_M : (by + 1) * block_M, bx // groups, :])  # fmt: skip
            else:
                T.atomic_add(dV[bz, by * block_M : (by + 1) * block_M, bx // groups, :],
                             dv_shared, use_tma=use_tma)  # fmt: skip
                T.atomic_add(dK[bz, by * block_M : (by + 1) * block_M, bx // groups, :],
                             dk_shared, use_tma=use_tma)  # fmt: skip

    return flash_bwd


@tilelang.jit
def flashattn_bwd_atomic_add(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                             threads=256, num_stages=2, groups=1, use_tma=True):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, dQ, dK, dV)``; dQ/dK/dV float32 bshd, zeroed by the
    caller; dQ, dK and dV added from shared tiles by TMA reductions (``use_tma``)."""
    return _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                        threads, num_stages, groups, split=False, use_tma=use_tma)  # fmt: skip


@tilelang.jit
def flashattn_bwd_split_novarlen(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M,
                                 block_N, threads=256, num_stages=2, groups=1):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, dQ, dK, dV)``; dQ float32 in ``make_dq_layout``'s
    order (zeroed by the caller), dK/dV float16 ``[groups, batch, seq, head_kv, dim]``."""
    return _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                        threads, num_stages, groups, split=True, use_tma=False)  # fmt: skip


class _attention(torch.autograd.Function):
    """GQA attention: ``example_gqa_bwd.py``'s forward, the backward kernels above."""

    @staticmethod
    def forward(ctx, q, k, v, causal, groups=1, use_atomic=True):
        batch, seq_len, heads, dim_qk = q.shape
        dim_v = v.shape[-1]
        kernel = flashattn_fwd(batch, heads, seq_len, dim_qk, dim_v, causal, groups=groups,
                               **_config_for(q, fwd_config(dim_qk, dim_v)))  # fmt: skip
        o, lse = kernel(q, k, v)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.groups, ctx.use_atomic = causal, groups, use_atomic
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        batch, seq_len, heads, dim_qk = q.shape
        dim_v = v.shape[-1]
        groups = ctx.groups
        do = do.contiguous()
        delta = flashattn_bwd_preprocess(batch, heads, seq_len, dim_v)(o, do)
        config = _config_for(q, bwd_config(dim_qk, dim_v))
        args = (batch, heads, seq_len, dim_qk, dim_v, ctx.causal)
        dq = q.new_zeros(q.shape, dtype=torch.float32)
        if ctx.use_atomic:
            # TMA reductions on CUDA (sm_90+, as upstream); the CPU backend has none
            use_tma = q.device.type == "cuda"
            kernel = flashattn_bwd_atomic_add(*args, groups=groups, use_tma=use_tma, **config)
            dk = k.new_zeros(k.shape, dtype=torch.float32)
            dv = v.new_zeros(v.shape, dtype=torch.float32)
            kernel(q, k, v, do, lse, delta, dq, dk, dv)
            dq, dk, dv = dq.to(torch.float16), dk.to(torch.float16), dv.to(torch.float16)
        else:
            kernel = flashattn_bwd_split_novarlen(*args, groups=groups, **config)
            dk = k.new_empty((groups, *k.shape))
            dv = v.new_empty((groups, *v.shape))
            kernel(q, k, v, do, lse, delta, dq, dk, dv)
            dq = flashattn_bwd_postprocess(batch, heads, seq_len, dim_qk)(dq)
            dk, dv = dk.sum(0), dv.sum(0)
        return dq, dk, dv, None, None, None


attention = _attention.apply


def main(BATCH=1, H=32, N_CTX=256, D_HEAD_QK=192, D_HEAD_V=128, groups=16, causal=False,
         use_atomic=True, device=None):  # fmt: skip
    """Check O, dQ, dK, dV against torch autograd in float64 on random inputs; on CUDA also
    time the backward against torch SDPA's."""
    import torch.nn.functional as F

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    head_kv = H // groups
    q = torch.randn(BATCH, N_CTX, H, D_HEAD_QK, dtype=torch.half, device=device)
    k = torch.randn(BATCH, N_CTX, head_kv, D_HEAD_QK, dtype=torch.half, device=device)
    v = torch.randn(BATCH, N_CTX, head_kv, D_HEAD_V, dtype=torch.half, device=device)
    do = torch.randn(BATCH, N_CTX, H, D_HEAD_V, dtype=torch.half, device=device)
    ours = _grads(lambda a, b, c: attention(a, b, c, causal, groups, use_atomic), (q, k, v), do)
    ref = _grads(lambda a, b, c: ref_program(a, b, c, causal, groups),
                 [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("O", "dQ", "dK", "dV"), ours, ref):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
    print(f"gqa bwd (TMA reduce) b={BATCH} h={H} groups={groups} s={N_CTX} d_qk={D_HEAD_QK} "
          f"d_v={D_HEAD_V} causal={causal} atomic={use_atomic} on {device}: "
          "O, dQ, dK, dV match")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        flops = 2.0 * BATCH * H * N_CTX * N_CTX * (3 * D_HEAD_QK + 2 * D_HEAD_V)
        flops *= 0.5 if causal else 1.0
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        o = attention(*leaves, causal, groups, use_atomic)
        t = bench(lambda: torch.autograd.grad(o, leaves, do, retain_graph=True),
                  warmup=10, rep=50, device=device)  # fmt: skip
        qt, kt, vt = (x.transpose(1, 2) for x in leaves)
        o_ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True)
        dot = do.transpose(1, 2)
        t_ref = bench(lambda: torch.autograd.grad(o_ref, leaves, dot, retain_graph=True),
                      warmup=10, rep=50, device=device)  # fmt: skip
        print(f"backward: tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s), "
              f"torch SDPA {t_ref:.3f} ms ({flops / t_ref * 1e-9:.1f} TFLOP/s)")  # fmt: skip
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
