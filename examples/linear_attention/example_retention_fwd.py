"""Chunked retention forward (RetNet), upstream TileLang's API unchanged.

``o_t = sum_{s <= t} gamma_h^(t - s) (scale * q_t . k_s) v_s`` with a per-head decay
``gamma_h = 1 - 2^(-5 - h)``. Each block owns one (value tile, key tile, batch*head) and walks
the sequence in chunks: the intra-chunk part is a masked, decayed ``q k^T`` times ``v``; the
inter-chunk part reads a running state ``h = sum gamma^(...) k^T v`` kept in registers.
Partial outputs over key tiles are summed by the caller (``postprocess``).
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=3, pass_configs={"tl.disable_warp_specialized": True})
def chunk_retention_fwd_kernel(B, S, H, DK, DV, dtype=T.float16, chunk=64, BK=64, BV=64):
    accum = T.float32
    scale = DK**-0.5
    assert S % chunk == 0 and DK % BK == 0 and DV % BV == 0
    NK, NV, NT = DK // BK, DV // BV, S // chunk

    @T.prim_func
    def retention_fwd(
        Q: T.Tensor([B, S, H, DK], dtype),
        K: T.Tensor([B, S, H, DK], dtype),
        V: T.Tensor([B, S, H, DV], dtype),
        O: T.Tensor([NK, B, S, H, DV], dtype),
    ):
        with T.Kernel(NV, NK, B * H, threads=128) as (iv, ik, ibh):
            b, h = ibh // H, ibh % H
            log_gamma = T.alloc_var(T.float32)
            log_gamma = T.log2(1 - T.exp2(-5.0 - 1.0 * h))

            q = T.alloc_shared([chunk, BK], dtype)
            k = T.alloc_shared([chunk, BK], dtype)
            v = T.alloc_shared([chunk, BV], dtype)
            state = T.alloc_fragment([BK, BV], accum)
            state_shared = T.alloc_shared([BK, BV], dtype)
            scores = T.alloc_fragment([chunk, chunk], accum)
            scores_shared = T.alloc_shared([chunk, chunk], dtype)
            out = T.alloc_fragment([chunk, BV], accum)
            T.clear(state)

            for c in T.Pipelined(NT, num_stages=1):
                for r, d in T.Parallel(chunk, BK):
                    q[r, d] = Q[b, c * chunk + r, h, ik * BK + d] * scale
                T.copy(K[b, c * chunk : (c + 1) * chunk, h, ik * BK : (ik + 1) * BK], k)
                T.copy(V[b, c * chunk : (c + 1) * chunk, h, iv * BV : (iv + 1) * BV], v)

                # intra-chunk: causal, decayed scores
                T.gemm(q, k, scores, clear_accum=True, transpose_B=True)
                for r, s in T.Parallel(chunk, chunk):
                    scores_shared[r, s] = T.if_then_else(
                        r >= s, scores[r, s] * T.exp2((r - s) * log_gamma), 0
                    )

                # inter-chunk: the state carried from earlier chunks, decayed to row r
                T.copy(state, state_shared)
                T.gemm(q, state_shared, out, clear_accum=True)
                for r, d in T.Parallel(chunk, BV):
                    out[r, d] = out[r, d] * T.exp2((r + 1) * log_gamma)
                T.gemm(scores_shared, v, out)
                T.copy(out, O[ik, b, c * chunk : (c + 1) * chunk, h, iv * BV : (iv + 1) * BV])

                # state <- gamma^chunk * state + sum_s gamma^(chunk - 1 - s) k_s^T v_s
                for s, d in T.Parallel(chunk, BV):
                    v[s, d] = v[s, d] * T.exp2((chunk - s - 1) * log_gamma)
                for kd, d in T.Parallel(BK, BV):
                    state[kd, d] = state[kd, d] * T.exp2(chunk * log_gamma)
                T.gemm(k, v, state, transpose_A=True)

    return retention_fwd


def postprocess(o):
    return o[0] if o.size(0) == 1 else o.sum(0)


def ref_program(q, k, v):
    """float64 retention with the kernel's decays."""
    B, S, H, D = q.shape
    q, k, v = q.double() * D**-0.5, k.double(), v.double()
    t = torch.arange(S, device=q.device)
    out = torch.empty(B, S, H, v.shape[-1], dtype=torch.float64, device=q.device)
    for h in range(H):
        gamma = 1 - 2.0 ** (-5.0 - h)
        decay = (gamma ** (t[:, None] - t[None, :]).double()) * (t[:, None] >= t[None, :])
        out[:, :, h] = (torch.einsum("bsd,btd->bst", q[:, :, h], k[:, :, h]) * decay) @ v[:, :, h]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--B", type=int, default=8)
    parser.add_argument("--S", type=int, default=4096)
    parser.add_argument("--H", type=int, default=32)
    parser.add_argument("--D", type=int, default=128)
    args = parser.parse_args(argv)
    B, S, H, D = args.B, args.S, args.H, args.D
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = (torch.randn(B, S, H, D, device=device, dtype=torch.float16) for _ in range(3))
    kernel = chunk_retention_fwd_kernel(B, S, H, D, D)
    o = postprocess(kernel(q, k, v))
    torch.testing.assert_close(o.double(), ref_program(q, k, v), atol=5e-2, rtol=2e-2)
    print("All checks pass.")
    if device == "cuda":
        from tilelang.profiler import do_bench

        t = do_bench(lambda: postprocess(kernel(q, k, v)))
        print(f"TileLang: {t:.3f} ms, {2.0 * B * S * S * H * D / t * 1e-9:.1f} TFLOPs (causal)")


if __name__ == "__main__":
    main()
