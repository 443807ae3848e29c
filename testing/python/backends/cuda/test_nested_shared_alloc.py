"""``T.alloc_shared`` inside a loop body (upstream's DSA indexer kernels allocate their tiles
in the ``T.Pipelined`` body): the tile moves to the kernel's top level, one tile for every
iteration, instead of the CompileError "shared tiles must be allocated at the kernel's top
level". Checked in the CUDA emulator (race checked) against float64 numpy, built with nvcc."""

import shutil

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]


def gathered_row_sums(rows, n, block, stages):
    """Out[r] = sum over chunks of (gathered X[r, Idx[r, chunk]] * 2) -- the chunk's tiles are
    allocated inside the pipelined loop."""

    @T.prim_func
    def main(
        X: T.Tensor((rows, n), T.float32),
        Idx: T.Tensor((rows, n), T.int32),
        Out: T.Tensor((rows, block), T.float32),
    ):
        with T.Kernel(rows, threads=64) as r:
            acc = T.alloc_fragment((block,), T.float32)
            T.clear(acc)
            for c in T.Pipelined(T.ceildiv(n, block), num_stages=stages):
                idx_shared = T.alloc_shared((block,), T.int32)
                T.copy(Idx[r, c * block], idx_shared)
                vals = T.alloc_shared((block,), T.float32)
                for i in T.Parallel(block):
                    p = idx_shared[i]
                    vals[i] = T.if_then_else(c * block + i < n, X[r, p], 0.0)
                for i in T.Parallel(block):
                    acc[i] += vals[i] * 2.0
            T.copy(acc, Out[r, 0])

    return main


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("rows,n,block,stages", [(3, 100, 32, 0), (2, 77, 16, 2)])
def test_tiles_allocated_in_a_loop_body(target, rows, n, block, stages):
    rng = np.random.default_rng(rows * n)
    x = rng.standard_normal((rows, n)).astype(np.float32)
    idx = np.stack([rng.permutation(n) for _ in range(rows)]).astype(np.int32)
    out = np.zeros((rows, block), np.float32)
    lowered = pipeline.lower(gathered_row_sums(rows, n, block, stages), target)
    (_, _, got) = emulate(lowered, x, idx, out, race_check=True)
    chunks = -(-n // block)
    gathered = np.zeros((rows, chunks * block))
    gathered[:, :n] = np.take_along_axis(x.astype(np.float64), idx, 1)
    want = gathered.reshape(rows, chunks, block).sum(1) * 2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_tiles_allocated_in_a_loop_body_build_sm90a():
    artifact = pipeline.build(
        gathered_row_sums(4, 300, 64, 2), {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"}
    )
    assert artifact.meta["kernel_names"]
