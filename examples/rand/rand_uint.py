"""Random uint32 numbers with T.rng_init / T.rng_rand (upstream TileLang's API, unchanged).

Each block draws ``per_block`` consecutive numbers of the Philox4x32-10 stream ``(seed, 0)``
starting at its first element, so element ``i`` of the output is word ``i`` of that stream
whatever the block size: the same numbers as curand's ``curand()`` after
``curand_init(seed, 0, i)`` and as triton's ``tl.randint4x(seed, i // 4)[i % 4]``.
"""

import argparse

import numpy as np

import tilelang
import tilelang.language as T

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


@tilelang.jit
def tilelang_rand_1d(M=1024, seed=42, per_block=128):
    A = T.empty((M,), "uint32")
    with T.Kernel(T.ceildiv(M, per_block), threads=1) as bx:
        tx = T.get_thread_binding()
        T.rng_init(seed, 0, bx * per_block + tx * per_block)
        for i, j in T.Parallel(1, per_block):
            idx = (bx + i) * per_block + j
            if idx < M:
                A[idx] = T.rng_rand()
    return A


def philox_randint4x(seed, blocks):
    """numpy Philox4x32-10 of counters ``(o, 0, 0, 0)``, ``o < blocks``: (blocks, 4) words."""
    c = np.zeros((4, blocks), np.uint64)
    c[0] = np.arange(blocks, dtype=np.uint64)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(PHILOX_M[0]) * c[0], np.uint64(PHILOX_M[1]) * c[2]
        c = np.stack(
            [
                (p1 >> np.uint64(32)) ^ c[1] ^ k0,
                p1 & mask,
                (p0 >> np.uint64(32)) ^ c[3] ^ k1,
                p0 & mask,
            ]
        )
        k0, k1 = (k0 + np.uint64(PHILOX_W[0])) & mask, (k1 + np.uint64(PHILOX_W[1])) & mask
    return c.T.astype(np.uint32)


def ref_program(M, seed):
    return philox_randint4x(seed, -(-M // 4)).reshape(-1)[:M]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--M", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    out = tilelang_rand_1d(args.M, args.seed)
    np.testing.assert_array_equal(out.cpu().numpy(), ref_program(args.M, args.seed))
    print("All checks pass.")


if __name__ == "__main__":
    main()
