"""Row-wise top-k of router logits (upstream TileLang's eager API, unchanged).

Each block holds ``blk_m`` rows in a fragment and repeats ``topk`` times: the row maximum
(``T.reduce_max``), the largest column holding it (a second ``T.reduce_max`` over column
indices), then masks that value out. Ties keep the highest column first.
"""

import argparse
import itertools

import torch

import tilelang
import tilelang.language as T


def get_configs():
    params = dict(blk_m=[16, 32, 64], threads=[128, 256])
    return [dict(zip(params, values)) for values in itertools.product(*params.values())]


@tilelang.autotune(configs=get_configs())
@tilelang.jit
def tl_topk(logits, topk, blk_m, threads=128):
    M, N = T.const("M, N")
    dtype = T.float32
    logits: T.Tensor([M, N], dtype)
    gates = T.empty([M, topk], dtype)
    indices = T.empty([M, topk], T.int32)

    with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
        rows = T.alloc_fragment([blk_m, N], dtype)
        best = T.alloc_fragment([blk_m], dtype)
        cols = T.alloc_fragment([blk_m, N], T.int32)
        best_col = T.alloc_fragment([blk_m], T.int32)
        T.copy(logits[bx * blk_m, 0], rows)
        for k in T.serial(topk):
            T.reduce_max(rows, best, dim=1, clear=True)
            for i, j in T.Parallel(blk_m, N):
                cols[i, j] = T.if_then_else(rows[i, j] == best[i], j, -1)
            T.reduce_max(cols, best_col, dim=1, clear=True)
            for i, j in T.Parallel(blk_m, N):
                rows[i, j] = T.if_then_else(j == best_col[i], -T.infinity(dtype), rows[i, j])
            for i in T.Parallel(blk_m):
                if bx * blk_m + i < M:
                    gates[bx * blk_m + i, k] = best[i]
                    indices[bx * blk_m + i, k] = best_col[i]

    return gates, indices


def ref_program(logits, topk):
    gates, idx = logits.topk(topk, dim=1)
    return gates, idx.to(torch.int32)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=320)
    parser.add_argument("--N", type=int, default=128)
    parser.add_argument("--topk", type=int, default=6)
    parser.add_argument("--blk_m", type=int, default=64)
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits = torch.rand(args.M, args.N, device=device)
    gates, idx = tl_topk(logits, args.topk, blk_m=args.blk_m)
    ref_gates, ref_idx = ref_program(logits, args.topk)
    torch.testing.assert_close(gates, ref_gates)
    torch.testing.assert_close(idx, ref_idx)
    print("All checks pass.")


if __name__ == "__main__":
    main()
