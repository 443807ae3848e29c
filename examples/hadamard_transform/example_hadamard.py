"""Fast Walsh-Hadamard transform of each row (upstream TileLang's API, unchanged).

Row ``b`` of ``x`` (length ``n``, a power of two) becomes ``x[b] @ H_n`` with ``H_n`` the
Sylvester Hadamard matrix. One block per row; thread ``t`` keeps ``n / threads`` consecutive
elements in registers. Butterflies of stride below that run inside a thread, strides inside
a warp use ``T.tvm_warp_shuffle``, larger strides swap through shared memory.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T


def _threads_for(n):
    """Threads per row: up to 8 elements each, at most 256 threads."""
    return max(1, min(256, n // 8))


@tilelang.jit
def hadamard(A, n, dtype=T.float32):
    b = T.const("b")
    A: T.Tensor((b, n), dtype)
    B = T.empty((b, n), dtype)

    assert n >= 2 and n & (n - 1) == 0, "n must be a power of two"
    threads = _threads_for(n)
    elems = n // threads
    log_elems, log_threads = int(math.log2(elems)), int(math.log2(threads))
    warp = min(threads, 32)

    with T.Kernel(b, threads=threads) as row:
        vals = T.alloc_local((elems,), dtype)
        other = T.alloc_local((elems,), dtype)
        swap = T.alloc_shared((threads, elems), dtype)
        tx = T.get_thread_binding(0)

        for i in T.vectorized(elems):
            vals[i] = A[row, tx * elems + i]

        # strides 1 .. elems/2: inside the thread
        for level in T.serial(log_elems):
            half = 1 << level
            for pair in T.serial(elems // 2):
                lo = pair // half * 2 * half + pair % half
                x, y = vals[lo], vals[lo + half]
                vals[lo] = x + y
                vals[lo + half] = x - y

        # strides of whole threads: a shuffle inside a warp, shared memory across warps
        for level in T.serial(log_threads):
            mate = 1 << level
            if mate < warp:
                for j in T.serial(elems):
                    other[j] = T.tvm_warp_shuffle(0xFFFFFFFF, vals[j], (tx ^ mate) % warp, warp, 32)
            else:
                for j in T.serial(elems):
                    swap[tx, j] = vals[j]
                for j in T.serial(elems):
                    other[j] = swap[tx ^ mate, j]
            for j in T.serial(elems):
                vals[j] = T.if_then_else(tx & mate == 0, vals[j] + other[j], other[j] - vals[j])

        for i in T.vectorized(elems):
            B[row, tx * elems + i] = vals[i]

    return B


def hadamard_matrix(n, dtype=torch.float64):
    """Sylvester's H_n (entries +-1)."""
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def ref_program(x):
    return (x.double() @ hadamard_matrix(x.shape[-1])).to(x.dtype)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dim", type=int, default=8192)
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(args.batch, args.dim, device=device)
    y = hadamard(x, args.dim)
    torch.testing.assert_close(y, ref_program(x), atol=1e-2, rtol=1e-2)
    print("All checks pass.")
    if device == "cuda":
        from tilelang.profiler import do_bench

        print(f"TileLang: {do_bench(lambda: hadamard(x, args.dim)):.3f} ms")


if __name__ == "__main__":
    main()
