"""HISA (hierarchical sparse attention) logits clean-up, in place.

Query row ``m`` may only attend to the key positions ``ks[m] <= n < ke[m]`` of its own
sequence. The indexer's logits of every other position become ``-inf`` (never selected);
the first and the last key of the range become ``+inf`` (always selected: the sink token
and the query's own position).

Each block walks its row in chunks of ``block_K`` positions, ``threads`` threads side by
side. The last chunk reaches past the row's end when the row length is not a multiple of
``block_K``: as in upstream TileLang, those out-of-range stores are skipped by the
compiler, so the kernel does not test ``n < seq_len_kv`` itself.
"""

import argparse

import torch

import tilelang
import tilelang.language as T


@tilelang.jit
def clean_logits(logits, ks, ke, threads: int = 512, block_K: int = 4096):
    seq_len, seq_len_kv = T.const("seq_len, seq_len_kv")
    logits: T.Tensor[[seq_len, seq_len_kv], T.float32]
    ks: T.Tensor[[seq_len], T.int32]
    ke: T.Tensor[[seq_len], T.int32]

    with T.Kernel(seq_len, threads=threads) as m:
        tx = T.get_thread_binding()
        first = ks[m]
        last = ke[m] - 1
        for chunk in T.serial(T.ceildiv(seq_len_kv, block_K)):
            for j in T.serial(block_K // threads):
                n = chunk * block_K + j * threads + tx
                if n == first or n == last:
                    logits[m, n] = T.infinity(T.float32)
                elif n < first or n > last:
                    logits[m, n] = -T.infinity(T.float32)


def causal_ranges(cu_seqlens: torch.Tensor):
    """Per query row of sequences packed back to back (``cu_seqlens``: their offsets), the
    key range ``[ks, ke)`` of causal self-attention within its own sequence."""
    lengths = torch.diff(cu_seqlens)
    start = torch.repeat_interleave(cu_seqlens[:-1], lengths)
    position = torch.arange(int(cu_seqlens[-1]), device=cu_seqlens.device) - start
    return start.to(torch.int32), (start + position + 1).to(torch.int32)


def reference(logits, ks, ke):
    out = logits.clone()
    n = torch.arange(logits.shape[1], device=logits.device)[None, :]
    out[(n < ks[:, None].long()) | (n >= ke[:, None].long())] = float("-inf")
    rows = torch.arange(logits.shape[0], device=logits.device)
    out[rows, ks.long()] = float("inf")
    out[rows, (ke - 1).long()] = float("inf")
    return out


def main(seqs=4, per_seq=1024, extra_kv=100):
    cu = torch.arange(seqs + 1, device="cuda") * per_seq
    ks, ke = causal_ranges(cu)
    logits = torch.randn(seqs * per_seq, seqs * per_seq + extra_kv, device="cuda")
    want = reference(logits, ks, ke)
    clean_logits(logits, ks, ke)
    torch.testing.assert_close(logits, want, rtol=0, atol=0)
    print("clean_logits matches the reference")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqs", type=int, default=4)
    parser.add_argument("--per_seq", type=int, default=1024)
    args = parser.parse_args()
    main(args.seqs, args.per_seq)
