"""Grouped-query attention backward, (batch, seq, heads, dim) layout, as upstream TileLang's
example: ``heads`` query heads share ``heads // groups`` K/V heads, Q/K may have a head dim
(``dim_qk``) other than V's (``dim_v``).

Kernels: the forward (``O`` and the base-2 log-sum-exp ``LSE`` per query row), ``Delta =
rowsum(O * dO)``, then one block per (query head, K/V block) that recomputes ``P^T`` and
accumulates ``dV += P^T dO``, ``dK += dS^T Q`` and adds ``dS K`` into a float32 dQ with
atomics. A K/V head receives the gradients of its ``groups`` query heads either by float32
atomics (``flashattn_bwd_atomic_add``) or one slice per query head summed afterwards
(``flashattn_bwd_split``). dQ's float32 accumulator is stored in ``make_dq_layout``'s order
(a warp's atomics land on consecutive addresses) and converted by ``flashattn_bwd_postprocess``;
its row count is rounded up to a multiple of 8 (``dq_accum_shape``).

Sequence lengths need not be tile multiples. ``attention(q, k, v, causal, groups)`` is a
``torch.autograd.Function`` over these kernels.

    python examples/flash_attention/example_gqa_bwd.py --h 32 --groups 8 --n_ctx 1000 --causal
"""

import argparse

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def _check_groups(heads, groups):
    if groups < 1 or heads % groups:
        raise ValueError(f"heads ({heads}) must be a multiple of groups ({groups})")


def fwd_config(dim_qk, dim_v):
    """Forward block sizes by head dim (warp-specialized on sm_90a: 128 x 128 on two consumer
    warpgroups; 128 x 64 from head dim 192 on, whose K/V stages are larger)."""
    if max(dim_qk, dim_v) <= 128:
        return dict(block_M=128, block_N=128, threads=256, num_stages=2)
    return dict(block_M=128, block_N=64, threads=256, num_stages=2)


def bwd_config(dim_qk, dim_v):
    """Backward block sizes by head dim: dK and dV (block_M x dim floats each) stay in
    registers for the whole loop over query blocks."""
    if max(dim_qk, dim_v) <= 128:  # at 128 every gemm is on wgmma
        return dict(block_M=128, block_N=64, threads=256, num_stages=2)
    return dict(block_M=64, block_N=32, threads=256, num_stages=2)


@tilelang.jit(out_idx=[3, 4])
def flashattn_fwd(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M=64, block_N=64,
                  groups=1, threads=128, num_stages=1):  # fmt: skip
    """``kernel(Q, K, V) -> (O, LSE)``; ``LSE[b, h, s] = log2(sum_k exp2(S * scale))``."""
    _check_groups(heads, groups)
    scale = (1.0 / dim_qk) ** 0.5 * LOG2E
    head_kv = heads // groups
    q_shape = [batch, seq_len, heads, dim_qk]
    k_shape = [batch, seq_len, head_kv, dim_qk]
    v_shape = [batch, seq_len, head_kv, dim_v]
    dtype, accum = "float16", "float"
    kv_tail = seq_len % block_N != 0

    @T.prim_func
    def flash_fwd(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(k_shape, dtype),
        V: T.Tensor(v_shape, dtype),
        Output: T.Tensor([batch, seq_len, heads, dim_v], dtype),
        lse: T.Tensor([batch, heads, seq_len], accum),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
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

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(m, -T.infinity(accum))
            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, k * block_N : (k + 1) * block_N, by // groups, :], K_shared)
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
                for i, j in T.Parallel(block_M, dim_v):
                    acc_o[i, j] *= rescale[i]
                T.copy(acc_s, acc_s_cast)
                T.copy(V[bz, k * block_N : (k + 1) * block_N, by // groups, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim_v):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])
            for i in T.Parallel(block_M):
                logsum[i] = T.log2(logsum[i]) + m[i] * scale
            T.copy(logsum, lse[bz, by, bx * block_M : (bx + 1) * block_M])

    return flash_fwd


@tilelang.jit(out_idx=[2])
def flashattn_bwd_preprocess(batch, heads, seq_len, dim_v, block=64, threads=128):
    """``Delta[b, h, s] = sum_d O[b, s, h, d] * dO[b, s, h, d]`` (float32)."""
    shape = [batch, seq_len, heads, dim_v]
    dtype, accum = "float16", "float"

    @T.prim_func
    def flash_bwd_prep(
        O: T.Tensor(shape, dtype),
        dO: T.Tensor(shape, dtype),
        Delta: T.Tensor([batch, heads, seq_len], accum),
    ):
        with T.Kernel(heads, T.ceildiv(seq_len, block), batch, threads=threads) as (bx, by, bz):
            o = T.alloc_fragment([block, dim_v], accum)
            do = T.alloc_fragment([block, dim_v], accum)
            delta = T.alloc_fragment([block], accum)
            T.copy(O[bz, by * block : (by + 1) * block, bx, :], o)
            T.copy(dO[bz, by * block : (by + 1) * block, bx, :], do)
            for i, j in T.Parallel(block, dim_v):
                o[i, j] *= do[i, j]
            T.reduce_sum(o, delta, dim=1)
            T.copy(delta, Delta[bz, bx, by * block : (by + 1) * block])

    return flash_bwd_prep


def dq_accum_shape(batch, heads, seq_len, dim_qk):
    """The float32 dQ accumulator's shape: rows rounded up to a multiple of 8 so that
    ``make_dq_layout`` is a permutation of its storage (zero it before the backward)."""
    return [batch, (seq_len + 7) // 8 * 8, heads, dim_qk]


def make_dq_layout(dQ):
    """dQ's storage order: rows in groups of 8, column pairs interleaved, so that the
    atomics of one mma accumulator row-group of a warp are consecutive."""
    return T.Layout(
        dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]
    )


@tilelang.jit(out_idx=[1])
def flashattn_bwd_postprocess(batch, heads, seq_len, dim_qk, block=64, threads=128):
    """The float32 dQ accumulator (``make_dq_layout`` order) -> row-major float16."""
    acc_shape = dq_accum_shape(batch, heads, seq_len, dim_qk)

    @T.prim_func
    def flash_bwd_post(
        dQ: T.Tensor(acc_shape, "float"),
        dQ_out: T.Tensor([batch, seq_len, heads, dim_qk], "float16"),
    ):
        with T.Kernel(T.ceildiv(seq_len, block), heads, batch, threads=threads) as (bx, by, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(
                dQ[bz, bx * block : (bx + 1) * block, by, :],
                dQ_out[bz, bx * block : (bx + 1) * block, by, :],
            )

    return flash_bwd_post


def _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N, threads,
                 num_stages, groups, split):  # fmt: skip
    """The backward kernel. ``split``: dK/dV are float16 ``[groups, batch, seq, head_kv,
    dim]`` slices (one per query head of a group, summed afterwards); otherwise float32
    ``[batch, seq, head_kv, dim]`` accumulated with atomics (plain stores when groups == 1;
    zero them first either way)."""
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
    # keys past seq_len: zero rows, so P^T = exp2(-lse) there; their dK/dV rows are never
    # stored, but dS feeds dQ, so mask them (causal masks them already)
    key_tail = seq_len % block_M != 0 and not is_causal

    @T.prim_func
    def flash_bwd(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(k_shape, dtype),
        V: T.Tensor(v_shape, dtype),
        dO: T.Tensor([batch, seq_len, heads, dim_v], dtype),
        lse: T.Tensor([batch, heads, seq_len], accum),
        Delta: T.Tensor([batch, heads, seq_len], accum),
        dQ: T.Tensor(dq_accum_shape(batch, heads, seq_len, dim_qk), accum),
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
            # atomics (groups > 1) go from the fragments: two float32 staging tiles would not
            # fit next to the pipelined ones once the loop is warp-specialized on sm_90a
            staged = split or groups == 1
            if staged:
                dv_shared = T.alloc_shared([block_M, dim_v], dkv_dtype)
                dk_shared = T.alloc_shared([block_M, dim_qk], dkv_dtype)

            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(K[bz, by * block_M : (by + 1) * block_M, bx // groups, :], K_shared)
            T.copy(V[bz, by * block_M : (by + 1) * block_M, bx // groups, :], V_shared)
            T.clear(dv)
            T.clear(dk)
            # causal: query blocks before this key block see none of its keys
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
                # a copy, not a cast in the loop above: with 64 rows on 8 warps the register A
                # operand of the next gemm is laid out (replicated) unlike dsT
                T.copy(dsT, dsT_cast)
                # dS^T to shared first, then dQ and dK back to back: dK runs while dQ's
                # atomics go out (the wgmma reading dsT_cast must complete before a store
                # reads those registers)
                T.copy(dsT_cast, dsT_shared)
                T.gemm(dsT_shared, K_shared, dq, transpose_A=True, clear_accum=True)  # dS K
                T.gemm(dsT_cast, q, dk, policy=T.GemmWarpPolicy.FullRow)  # dK += dS^T Q
                for i, j in T.Parallel(block_N, dim_qk):
                    T.atomic_add(dQ[bz, k * block_N + i, bx, j], dq[i, j])
            if staged:
                T.copy(dv, dv_shared)
                T.copy(dk, dk_shared)
            if split:
                T.copy(
                    dv_shared,
                    dV[bx % groups, bz, by * block_M : (by + 1) * block_M, bx // groups, :],
                )
                T.copy(
                    dk_shared,
                    dK[bx % groups, bz, by * block_M : (by + 1) * block_M, bx // groups, :],
                )
            elif groups == 1:
                T.copy(dv_shared, dV[bz, by * block_M : (by + 1) * block_M, bx, :])
                T.copy(dk_shared, dK[bz, by * block_M : (by + 1) * block_M, bx, :])
            else:
                T.atomic_add(dV[bz, by * block_M : (by + 1) * block_M, bx // groups, :], dv)
                T.atomic_add(dK[bz, by * block_M : (by + 1) * block_M, bx // groups, :], dk)

    return flash_bwd


@tilelang.jit
def flashattn_bwd_atomic_add(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                             threads=256, num_stages=2, groups=1):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, dQ, dK, dV)``; dQ/dK/dV float32, zeroed by the caller
    (dQ of ``dq_accum_shape``); a group's query heads add into their K/V head with atomics."""
    return _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                        threads, num_stages, groups, split=False)  # fmt: skip


@tilelang.jit
def flashattn_bwd_split(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                        threads=256, num_stages=2, groups=1):  # fmt: skip
    """``kernel(Q, K, V, dO, lse, Delta, dQ, dK, dV)``; dK/dV float16 ``[groups, batch, seq,
    head_kv, dim]`` (sum over the first axis afterwards), dQ as in the atomic variant."""
    return _bwd_program(batch, heads, seq_len, dim_qk, dim_v, is_causal, block_M, block_N,
                        threads, num_stages, groups, split=True)  # fmt: skip


class _attention(torch.autograd.Function):
    """GQA attention whose forward and backward are the kernels above (float16, bshd)."""

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
        dq = q.new_zeros(dq_accum_shape(batch, heads, seq_len, dim_qk), dtype=torch.float32)
        if ctx.use_atomic:
            kernel = flashattn_bwd_atomic_add(*args, groups=groups, **config)
            dk = k.new_zeros(k.shape, dtype=torch.float32)
            dv = v.new_zeros(v.shape, dtype=torch.float32)
            kernel(q, k, v, do, lse, delta, dq, dk, dv)
            dk, dv = dk.to(torch.float16), dv.to(torch.float16)
        else:
            kernel = flashattn_bwd_split(*args, groups=groups, **config)
            dk = k.new_empty((groups, *k.shape))
            dv = v.new_empty((groups, *v.shape))
            kernel(q, k, v, do, lse, delta, dq, dk, dv)
            dk, dv = dk.sum(0), dv.sum(0)
        dq = flashattn_bwd_postprocess(batch, heads, seq_len, dim_qk)(dq)
        return dq, dk, dv, None, None, None


def _config_for(tensor, gpu_config):
    """The GPU block sizes on CUDA; small tiles on the CPU backend."""
    if tensor.device.type == "cuda":
        return gpu_config
    return dict(block_M=64, block_N=32, threads=128, num_stages=1)


attention = _attention.apply


def ref_program(Q, K, V, is_causal, groups=1):
    """GQA in float64 (bshd), each K/V head repeated for its ``groups`` query heads."""
    q = Q.double().transpose(1, 2)
    k, v = (x.double().repeat_interleave(groups, dim=2).transpose(1, 2) for x in (K, V))
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).transpose(1, 2)


def _grads(fn, tensors, do):
    """(O, dQ, dK, dV) of ``fn(*tensors)`` for output gradient ``do``."""
    leaves = [t.detach().requires_grad_() for t in tensors]
    out = fn(*leaves)
    out.backward(do.to(out.dtype))
    return [out.detach(), *(t.grad for t in leaves)]


def main(BATCH=1, H=32, N_CTX=256, D_HEAD_QK=192, D_HEAD_V=128, groups=16, causal=False,
         use_atomic=True, device=None):  # fmt: skip
    """Check O, dQ, dK, dV against torch autograd in float64 on random inputs; on CUDA also
    time the backward against torch SDPA's."""
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
    print(f"gqa bwd b={BATCH} h={H} groups={groups} s={N_CTX} d_qk={D_HEAD_QK} d_v={D_HEAD_V} "
          f"causal={causal} atomic={use_atomic} on {device}: O, dQ, dK, dV match")  # fmt: skip
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
