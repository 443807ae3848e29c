"""Pipelined copies whose source rows come from a table (paged KV caches).

``row = table[k] * P`` opens the ``T.Pipelined`` body; nothing in the kernel writes
``table``, so ``pipeline_planning`` substitutes the bind into the copies
(``pipeline_copies.inline_address_binds``) and pipelines them: cp.async stages on sm_80,
a TMA producer warpgroup on sm_90a (its loop reads the table itself). A table the
kernel also writes keeps the loop unpipelined. Each lowering runs in the CUDA emulator
against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}


def gather_sum(pages, rows, cols, tiles, writes_table=False):
    """``Out[i, j] = sum_k A[table[k] * rows + i, j]`` over ``tiles`` pages."""

    @T.prim_func
    def main(
        A: T.Tensor((pages * rows, cols), "float16"),
        table: T.Tensor((tiles,), "int32"),
        Out: T.Tensor((rows, cols), "float32"),
    ):
        with T.Kernel(1, threads=128) as _bx:
            A_s = T.alloc_shared((rows, cols), "float16")
            acc = T.alloc_fragment((rows, cols), "float32")
            T.clear(acc)
            for k in T.Pipelined(tiles, num_stages=2):
                row = table[k] * rows
                T.copy(A[row : row + rows, :], A_s)
                for i, j in T.Parallel(rows, cols):
                    acc[i, j] += A_s[i, j]
            T.copy(acc, Out)
            if writes_table:
                table[0] = 0

    return main


def _run(func, target, pages, rows, cols, tiles, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((pages * rows, cols)).astype(np.float16)
    table = rng.permutation(pages)[:tiles].astype(np.int32)
    lowered = pipeline.lower(func, target)
    out = emulate(lowered, a, table.copy(), np.zeros((rows, cols), np.float32))[2]
    ref = a.astype(np.float64).reshape(pages, rows, cols)[table].sum(0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    return lowered.script()


@pytest.mark.parametrize("tiles", [1, 3, 6])
def test_table_rows_pipelined_cp_async(tiles):
    text = _run(gather_sum(7, 32, 64, tiles), SM80, 7, 32, 64, tiles, tiles)
    assert "A_s_mb" in text and "cp_async_gs" in text  # two stages of cp.async


def gather_gemm(pages, rows, cols, tiles):
    """``Out = sum_k Q @ A[table[k] * rows : +rows]^T``: the pages read by wgmma."""

    @T.prim_func
    def main(
        Q: T.Tensor((64, cols), "float16"),
        A: T.Tensor((pages * rows, cols), "float16"),
        table: T.Tensor((tiles,), "int32"),
        Out: T.Tensor((64, rows), "float32"),
    ):
        with T.Kernel(1, threads=128) as _bx:
            Q_s = T.alloc_shared((64, cols), "float16")
            A_s = T.alloc_shared((rows, cols), "float16")
            acc = T.alloc_fragment((64, rows), "float32")
            T.copy(Q, Q_s)
            T.clear(acc)
            for k in T.Pipelined(tiles, num_stages=2):
                row = table[k] * rows
                T.copy(A[row : row + rows, :], A_s)
                T.gemm(Q_s, A_s, acc, transpose_B=True)
            T.copy(acc, Out)

    return main


def test_table_rows_warp_specialized_tma():
    pages, rows, cols, tiles = 9, 64, 64, 5
    rng = np.random.default_rng(1)
    q = rng.standard_normal((64, cols)).astype(np.float16)
    a = rng.standard_normal((pages * rows, cols)).astype(np.float16)
    table = rng.permutation(pages)[:tiles].astype(np.int32)
    lowered = pipeline.lower(gather_gemm(pages, rows, cols, tiles), SM90A)
    text = lowered.script()
    assert "tl::tma_load" in text and "tx < 128" in text
    producer = text[text.index("k_load") :]
    assert "table[" in producer  # the producer reads the table for each load's row
    from test_gemm_wgmma_rs import emulate_rs  # the wgmma machine of the emulator

    arrays, _ = emulate_rs(
        lowered, q, a, table, np.zeros((64, rows), np.float32), mode="late_writes"
    )
    out = arrays[3]
    pages_sel = a.astype(np.float64).reshape(pages, rows, cols)[table]
    ref = sum(q.astype(np.float64) @ p.T for p in pages_sel)
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-2)


def test_written_table_is_not_inlined():
    func = gather_sum(5, 32, 64, 3, writes_table=True)
    text = pipeline.lower(func, SM80).script()
    assert "A_s_mb" not in text  # the row may change under the pipeline: not pipelined
