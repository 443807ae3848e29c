"""Grouped-query attention (GQA) forward, (batch, seq, heads, dim) layout, as upstream
TileLang's example.

``heads`` query heads share ``heads // groups`` K/V heads: query head ``h`` reads K/V head
``h // groups`` (``groups = 1`` is plain multi-head attention, ``groups = heads`` multi-query
attention). ``seq_len`` need not be a tile multiple: keys past it are masked.

    python examples/flash_attention/example_gqa_fwd_bshd.py --heads 32 --groups 8 --seq_len 1000
"""

import argparse
import itertools

import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

LOG2E = 1.44269504


def get_configs():
    """The configs ``--tune`` tries (block_M, block_N, num_stages, threads)."""
    space = dict(block_M=[64, 128], block_N=[64, 128], num_stages=[1, 2], threads=[128, 256])
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def default_config(dim):
    """Block sizes by head dim. On sm_90a the loop is warp-specialized (a producer warpgroup
    issuing TMA loads, the block's threads consuming): 128 x 128 tiles on two consumer
    warpgroups; at head dim 256 the K/V stages of 128 x 256 would not fit in shared memory
    next to Q, so 128 x 64."""
    if dim <= 128:
        return dict(block_M=128, block_N=128, num_stages=2, threads=256)
    return dict(block_M=128, block_N=64, num_stages=2, threads=256)


@tilelang.jit(out_idx=[3])
def flashattn(batch, heads, seq_len, dim, is_causal, groups=1, block_M=64, block_N=64,
              num_stages=0, threads=128):  # fmt: skip
    """``kernel(Q, K, V) -> O``; Q/O ``(batch, seq_len, heads, dim)``, K/V ``(batch, seq_len,
    heads // groups, dim)``, float16."""
    if groups < 1 or heads % groups:
        raise ValueError(f"flashattn: heads ({heads}) must be a multiple of groups ({groups})")
    scale = (1.0 / dim) ** 0.5 * LOG2E
    head_kv = heads // groups
    q_shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, head_kv, dim]
    dtype = "float16"
    accum_dtype = "float"
    kv_tail = seq_len % block_N != 0

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
    ):
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M : (bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal
                else T.ceildiv(seq_len, block_N)
            )
            # FlashAttention-3's schedule, as example_mha_fwd_bshd.py asks for it: the body's
            # statements are the K copy (0), the mask or clear and Q @ K^T (1, 2), the softmax
            # (3 .. 9, one statement more with the causal Check_inf step), the rescale of
            # acc_o, the V copy and P @ V. Q @ K^T of block k runs before the rescale and
            # P @ V of block k-1 (stage 1: one iteration late) and the softmax of block k, so
            # the tensor cores work while the softmax computes; on sm_90a the two consumer
            # warpgroups also take turns at the gemms (tl.ws_pingpong). Elsewhere the
            # annotations are a hint the backend may ignore.
            soft = list(range(3, 11 if is_causal else 10))
            after = soft[-1] + 1
            for k in T.Pipelined(
                loop_range,
                num_stages=num_stages,
                order=[-1, 0, 3, 1, -1, 2],
                stage=[-1, 0, 0, 1, -1, 1],
                group=[[0], [1, 2], soft, [after], [after + 1], [after + 2]],
            ):
                T.copy(K[bz, k * block_N : (k + 1) * block_N, by // groups, :], K_shared)
                if is_causal:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            bx * block_M + i >= k * block_N + j, 0, -T.infinity(accum_dtype)
                        )
                elif kv_tail:
                    for i, j in T.Parallel(block_M, block_N):
                        acc_s[i, j] = T.if_then_else(
                            k * block_N + j < seq_len, 0, -T.infinity(accum_dtype)
                        )
                else:
                    T.clear(acc_s)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)

                T.copy(scores_max, scores_max_prev)
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                if is_causal:  # Check_inf (see example_mha_fwd_bhsd.py)
                    for i in T.Parallel(block_M):
                        scores_max[i] = T.if_then_else(
                            scores_max[i] == -T.infinity(accum_dtype), 0, scores_max[i]
                        )
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[bz, k * block_N : (k + 1) * block_N, by // groups, :], V_shared)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bz, bx * block_M : (bx + 1) * block_M, by, :])

    return main


def ref_program(Q, K, V, is_causal, groups=1):
    """GQA in float64 (bshd): each K/V head repeated for its ``groups`` query heads."""
    q = Q.double().transpose(1, 2)
    k, v = (x.double().repeat_interleave(groups, dim=2).transpose(1, 2) for x in (K, V))
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal).transpose(1, 2)


def main(batch=1, heads=64, seq_len=4096, dim=128, is_causal=False, groups=16, tune=False,
         device=None, **config):  # fmt: skip
    """Check the kernel against ``ref_program`` on random inputs (``config``: block sizes,
    default ``default_config(dim)`` on CUDA, 64x64/128t on the CPU); on CUDA also time it
    against torch SDPA (``enable_gqa``). ``tune``: pick the config with the autotuner."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    q = torch.randn(batch, seq_len, heads, dim, device=device, dtype=torch.float16)
    k, v = (torch.randn(batch, seq_len, heads // groups, dim, device=device, dtype=torch.float16)
            for _ in range(2))  # fmt: skip
    if tune:
        tuned = tilelang.autotune(configs=get_configs(), warmup=10, rep=20)(flashattn)
        kernel = tuned(batch, heads, seq_len, dim, is_causal, groups)
        print(f"best config: {kernel.config}, {kernel.latency:.3f} ms")
    else:
        if not config:
            config = default_config(dim) if device == "cuda" else {}
        kernel = flashattn(batch, heads, seq_len, dim, is_causal, groups, **config)
    out = kernel(q, k, v)
    ref = ref_program(q, k, v, is_causal, groups)
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
    print(f"gqa fwd bshd b={batch} h={heads} groups={groups} s={seq_len} d={dim} "
          f"causal={is_causal} on {device}: matches")  # fmt: skip
    if device == "cuda":
        from tilelang.profiler import bench

        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        flops = 4.0 * batch * heads * seq_len * seq_len * dim * (0.5 if is_causal else 1.0)
        t = bench(lambda: kernel(q, k, v), warmup=25, rep=100, device=device)
        t_ref = bench(
            lambda: F.scaled_dot_product_attention(
                qt, kt, vt, is_causal=is_causal, enable_gqa=True
            ),
            warmup=25,
            rep=100,
            device=device,
        )
        print(f"tilelang {t:.3f} ms ({flops / t * 1e-9:.1f} TFLOP/s), "
              f"torch SDPA {t_ref:.3f} ms ({flops / t_ref * 1e-9:.1f} TFLOP/s)")  # fmt: skip
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1, help="batch size")
    parser.add_argument("--heads", type=int, default=64, help="heads")
    parser.add_argument("--seq_len", type=int, default=4096, help="sequence length")
    parser.add_argument("--dim", type=int, default=128, help="dim")
    parser.add_argument("--is_causal", action="store_true", help="causal")
    parser.add_argument("--tune", action="store_true", help="tune configs")
    parser.add_argument("--groups", type=int, default=16, help="groups")
    args = parser.parse_args()
    main(args.batch, args.heads, args.seq_len, args.dim, args.is_causal, args.groups, args.tune)
