"""DeepSeek-V3.2 top-k selection: the indices of the ``k`` largest scores of every row.

The lightning indexer scores every earlier token of a query; sparse attention then reads
only the top ``k`` of them. One block of ``threads`` threads selects one row by radix
selection over an order-preserving integer key of each float (sort order of the keys is
the order of the floats):

1. a 256-bin histogram of a coarse digit (the top byte of the score rounded to float16),
   built with shared-memory atomics; a suffix sum over the bins by the first 256 threads,
   synchronised by a named barrier only they reach (``T.sync_threads(1, 256)``); the
   bin where the count of larger elements crosses ``k`` is the threshold bin;
2. elements above the threshold bin go straight to the output (a shared counter hands out
   positions: ``T.atomic_add(..., return_prev=True)``), those inside it are kept as
   candidates; up to four more rounds repeat this over the bytes of the 32-bit key on the
   candidates only, until exactly ``k`` are chosen (ties in the last round are taken in
   arrival order).

Row ``b`` considers the positions ``starts[b] <= i < ends[b]``; a row with fewer than ``k``
such positions gets all of them and ``-1`` after. The candidates of a round must fit in
``capacity`` (4096 by default), the same assumption upstream's selector makes: the
threshold bin of the first round holds a few percent of a row of normally distributed
scores.
"""

import argparse

import torch

import tilelang
import tilelang.language as T

RADIX = 256


def _key32(x):
    """An unsigned key of the float32 ``x`` whose order is the order of the floats."""
    bits = T.reinterpret(x, T.uint32)
    return T.if_then_else(
        bits >> 31 == T.uint32(1), bits ^ T.uint32(0xFFFFFFFF), bits | T.uint32(0x80000000)
    )


def _coarse_digit(x):
    """The top byte of the order-preserving key of ``x`` rounded to float16 (coarse bins that
    still spread normally distributed scores)."""
    bits = T.reinterpret(T.cast(x, T.float16), T.uint16)
    key = T.if_then_else(
        bits >> 15 == T.uint16(1), bits ^ T.uint16(0xFFFF), bits | T.uint16(0x8000)
    )
    return T.cast(key >> 8, T.int32)


@tilelang.jit
def radix_topk(scores, starts, ends, k: int, threads: int = 1024, capacity: int = 4096):
    """``Index[b, :]``: the positions of the ``k`` largest ``scores[b, starts[b]:ends[b]]``
    (in no particular order; ``-1`` where the row has fewer than ``k``)."""
    batch, length = T.dynamic("batch, length")
    scores: T.Tensor[(batch, length), T.float32]
    starts: T.Tensor[(batch,), T.int32]
    ends: T.Tensor[(batch,), T.int32]
    index = T.empty((batch, k), T.int32)

    with T.Kernel(batch, threads=threads) as row:
        tx = T.get_thread_binding()
        hist = T.alloc_shared([RADIX + 1], T.int32)
        threshold = T.alloc_shared([1], T.int32)
        out_count = T.alloc_shared([1], T.int32)
        cand_count = T.alloc_shared([2], T.int32)
        cand = T.alloc_shared([2, capacity], T.int32)

        remaining = T.alloc_var(T.int32)
        thr = T.alloc_var(T.int32)
        partial = T.alloc_var(T.int32)
        pos = T.alloc_var(T.int32)
        digit = T.alloc_var(T.int32)

        lo = starts[row]
        hi = ends[row]
        remaining = k

        for i in T.serial(T.ceildiv(k, threads)):
            if i * threads + tx < k:
                index[row, i * threads + tx] = -1
        T.fill(hist, 0)
        T.fill(threshold, 0)
        T.fill(out_count, 0)
        T.fill(cand_count, 0)
        T.sync_threads()

        # round 0: coarse histogram of every position of the row
        for i in T.serial(T.ceildiv(length, threads)):
            p = i * threads + tx
            if p >= lo and p < hi and p < length:
                T.atomic_add(hist[_coarse_digit(scores[row, p])], 1)
        T.sync_threads()
        # suffix sums: hist[d] = how many elements have a digit >= d
        if tx < RADIX:
            for step in T.serial(8):
                offset = 1 << step
                T.sync_threads(1, RADIX)
                if tx + offset < RADIX:
                    partial = hist[tx] + hist[tx + offset]
                T.sync_threads(1, RADIX)
                if tx + offset < RADIX:
                    hist[tx] = partial
            T.sync_threads(1, RADIX)
            if hist[tx] >= remaining and hist[tx + 1] < remaining:
                threshold[0] = tx
        T.sync_threads()
        thr = threshold[0]
        for i in T.serial(T.ceildiv(length, threads)):
            p = i * threads + tx
            if p >= lo and p < hi and p < length:
                digit = _coarse_digit(scores[row, p])
                if digit > thr or (digit == thr and hist[thr] <= remaining):
                    pos = T.atomic_add(out_count[0], 1, return_prev=True)
                    if pos < k:
                        index[row, pos] = p
                elif digit == thr:
                    pos = T.atomic_add(cand_count[0], 1, return_prev=True)
                    if pos < capacity:
                        cand[0, pos] = p
        T.sync_threads()
        remaining = T.max(k - out_count[0], 0)

        # rounds 1-4: the bytes of the 32-bit key, over the candidates only
        for rnd in T.serial(4):
            if remaining > 0:
                src = rnd % 2
                shift = 24 - rnd * 8
                n_cand = T.min(cand_count[src], capacity)
                T.sync_threads()
                T.fill(hist, 0)
                if tx == 0:
                    cand_count[1 - src] = 0
                T.sync_threads()
                for i in T.serial(T.ceildiv(n_cand, threads)):
                    if i * threads + tx < n_cand:
                        p = cand[src, i * threads + tx]
                        T.atomic_add(
                            hist[
                                T.cast((_key32(scores[row, p]) >> shift) & T.uint32(0xFF), T.int32)
                            ],
                            1,
                        )
                T.sync_threads()
                if tx < RADIX:
                    for step in T.serial(8):
                        offset = 1 << step
                        T.sync_threads(1, RADIX)
                        if tx + offset < RADIX:
                            partial = hist[tx] + hist[tx + offset]
                        T.sync_threads(1, RADIX)
                        if tx + offset < RADIX:
                            hist[tx] = partial
                    T.sync_threads(1, RADIX)
                    if hist[tx] >= remaining and hist[tx + 1] < remaining:
                        threshold[0] = tx
                T.sync_threads()
                thr = threshold[0]
                for i in T.serial(T.ceildiv(n_cand, threads)):
                    if i * threads + tx < n_cand:
                        p = cand[src, i * threads + tx]
                        digit = T.cast((_key32(scores[row, p]) >> shift) & T.uint32(0xFF), T.int32)
                        # the last round, or a threshold bin that fits whole: take it
                        if digit > thr or (digit == thr and (rnd == 3 or hist[thr] <= remaining)):
                            pos = T.atomic_add(out_count[0], 1, return_prev=True)
                            if pos < k:
                                index[row, pos] = p
                        elif digit == thr:
                            pos = T.atomic_add(cand_count[1 - src], 1, return_prev=True)
                            cand[1 - src, pos] = p
                T.sync_threads()
                remaining = T.max(k - out_count[0], 0)
    return index


def main(batch=4, length=32 * 1024, k=2048):
    torch.manual_seed(1)
    scores = torch.randn(batch, length, dtype=torch.float32, device="cuda")
    starts = torch.zeros(batch, dtype=torch.int32, device="cuda")
    ends = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    index = radix_topk(scores, starts, ends, k)
    ref = torch.topk(scores, k, dim=-1).indices
    for b in range(batch):
        assert set(index[b].tolist()) == set(ref[b].tolist()), f"row {b} differs"
    print(f"top-{k} of {batch} rows of {length}: same sets as torch.topk")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--length", type=int, default=32 * 1024)
    parser.add_argument("--k", type=int, default=2048)
    args = parser.parse_args()
    main(args.batch, args.length, args.k)
