"""The explicit Hopper API records tile ops (``tl.<name>``) with their operands/options;
``T.ws`` opens a thread-range condition over whole warpgroups."""

from __future__ import annotations

import re

import pytest

import tilelang.language as T


def _ir(func) -> str:
    return str(func)


def test_barrier_ops_record_their_operands():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=256):
            bars = T.alloc_barrier([128, 1])
            T.mbarrier_expect_tx(bars[1], 512)
            T.mbarrier_arrive_expect_tx(bars[1], 64)
            T.barrier_arrive(bars[0])
            T.barrier_wait(bars[0], 3)
            T.mbarrier_wait_parity(bars, 0)
            A[0] = 1.0

    text = _ir(k)
    assert re.search(r'"tl.alloc_barrier", \[bars\[0\]\], attrs=\{"counts": \[128, 1\]\}', text)
    assert 'tl.mbarrier_expect_tx", [bars[1], 512]' in text
    assert 'tl.mbarrier_arrive_expect_tx", [bars[1], 64]' in text
    assert 'tl.mbarrier_arrive", [bars[0]]' in text
    # parity: its low bit; a whole one-element barrier means element 0
    assert 'tl.mbarrier_wait_parity", [bars[0], 1]' in text
    assert 'tl.mbarrier_wait_parity", [bars[0], 0]' in text
    assert "T.uint64" in text and 'scope="shared.dyn"' in text


def test_register_and_wgmma_group_options():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=256):
            T.dec_max_nreg(24)
            T.inc_max_nreg(240)
            T.set_max_nreg(160, 0)
            T.warpgroup_arrive()
            T.warpgroup_commit_batch()
            T.warpgroup_wait(1)
            T.wait_wgmma(0)
            A[0] = 1.0

    text = _ir(k)
    for reg, inc in ((24, 0), (240, 1), (160, 0)):
        assert f'"tl.set_max_nreg", [], attrs={{"is_inc": {inc}, "reg_count": {reg}}}' in text
    assert '"tl.warpgroup_wait", [], attrs={"num_mma": 1}' in text
    assert '"tl.warpgroup_wait", [], attrs={"num_mma": 0}' in text
    assert "tl.warpgroup_arrive" in text and "tl.warpgroup_commit_batch" in text


@pytest.mark.parametrize(
    "groups,threads,cond",
    [
        ((0,), 256, "tx < 128"),
        ((1,), 256, "tx >= 128) & (tx < 256)"),
        ((0, 2), 384, "(tx < 128) | (tx >= 256) & (tx < 384)"),
    ],
)
def test_ws_condition(groups, threads, cond):
    @T.prim_func
    def k(A: T.Tensor((512,), "float32")):
        with T.Kernel(1, threads=threads):
            with T.ws(*groups):
                A[T.get_thread_binding()] = 1.0

    text = _ir(k)
    assert cond in text
    assert f'"tl.ws", [], attrs={{"groups": {list(groups)}}}' in text


def test_ws_flattens_2d_threads():
    @T.prim_func
    def k(A: T.Tensor((512,), "float32")):
        with T.Kernel(1, threads=(64, 4)):
            with T.ws(1):
                A[0] = 1.0

    assert "ty * 64 + tx >= 128" in _ir(k).replace("tx + ty * 64", "ty * 64 + tx")


def test_wgmma_gemm_defers_its_wait_and_wait_fences_accumulators():
    @T.prim_func
    def k(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            D_l = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.wgmma_gemm(A_s, B_s, C_l)
            T.wgmma_gemm(A_s, B_s, D_l, clear_accum=True)
            T.wgmma_gemm(A_s, B_s, C_l)
            T.wait_wgmma(1)

    text = _ir(k)
    assert text.count('"tl.wgmma_gemm", []') == 3
    assert text.count('"tl_explicit_wgmma": True') == 3
    assert text.count('"tl_wgmma_defer_wait": True') == 3
    assert '"tl.warpgroup_wait", [], attrs={"num_mma": 1}' in text
    # one fence per distinct accumulator, after the wait
    assert text.count('"tl.wait_wgmma", [C_l[0, 0]]') == 1
    assert text.count('"tl.wait_wgmma", [D_l[0, 0]]') == 1
