"""wgmma issue hoisting (``passes/wgmma_wait_sinking._hoist_issues``, ``tl.wgmma_issue_hoisting``).

A gemm written after elementwise work it does not depend on is issued right after the
previous gemm's wait block; that wait then sinks below it (``wgmma.wait_group 1``), so both
gemms are in flight while the elementwise work runs. A gemm whose operands or accumulator the
elementwise work touches stays where it is. The wait block of a gemm takes only that gemm's
operand fences (not the next gemm's ``wgmma_fence_operand(C')``, which would stop the wait
at the next gemm's first instruction).

Correctness: the CUDA emulator with :class:`test_wgmma_overlap.StrictMachine` (wgmma groups
run when a wait retires them; writing an accumulator in flight fails), against float64
numpy; the FlashAttention backward example's loop structure (``dP^T`` issued with ``S^T``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_loader import load_example  # noqa: E402
from test_fa_bwd_d256_blocks import _inputs  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402
from test_wgmma_overlap import emulate  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
OFF = {"tl.wgmma_issue_hoisting": False}


def gemm_after_elementwise(M, N, K, dependent=None, dtype="float16"):
    """C1 = A @ B^T; C1 = 2 C1 + X; C2 = A2 @ B^T (written after that elementwise loop);
    O1 = C1, O2 = C2 - C1. ``dependent``: "tile" makes the loop also scale A2's shared tile,
    "acc" makes it clear C2 (then C2's gemm accumulates): the second gemm depends on it."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        A2: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        X: T.Tensor((M, N), "float32"),
        O1: T.Tensor((M, N), "float32"),
        O2: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), dtype)
            A2_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            C1 = T.alloc_fragment((M, N), "float32")
            C2 = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(A2, A2_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C1, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(M, N):
                C1[i, j] = C1[i, j] * 2.0 + X[i, j]
            if dependent == "tile":
                for i, j in T.Parallel(M, K):
                    A2_s[i, j] = A2_s[i, j] * T.float16(2.0)
            if dependent == "acc":
                T.clear(C2)
            T.gemm(A2_s, B_s, C2, transpose_B=True, clear_accum=dependent != "acc")
            for i, j in T.Parallel(M, N):
                C2[i, j] -= C1[i, j]
            T.copy(C1, O1)
            T.copy(C2, O2)

    return main


def _commits_before_first_c1_read(text):
    """Number of ``wgmma_commit`` calls before the elementwise loop that reads C1."""
    first_read = re.search(r"C1_local\[[^\]]+\] = C1_local", text).start()
    return len(re.findall(r"wgmma_commit", text[:first_read]))


def _run(func, rng, M, N, K, dependent=None):
    a, a2, b = (rng.standard_normal(s).astype(np.float16) for s in [(M, K), (M, K), (N, K)])
    x = rng.standard_normal((M, N)).astype(np.float32)
    o1, o2 = np.full((M, N), np.nan, np.float32), np.full((M, N), np.nan, np.float32)
    (_, _, _, _, o1, o2), machine = emulate(pipeline.lower(func, SM90A), a, a2, b, x, o1, o2)
    a2_used = a2.astype(np.float64) * (2.0 if dependent == "tile" else 1.0)
    c1 = 2.0 * (a.astype(np.float64) @ b.astype(np.float64).T) + x
    c2 = a2_used @ b.astype(np.float64).T - c1
    np.testing.assert_allclose(o1, c1, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(o2, c2, rtol=1e-3, atol=1e-2)
    return machine


def test_independent_gemm_is_issued_with_the_previous_one(rng):
    M, N, K = 64, 48, 32
    func = gemm_after_elementwise(M, N, K)
    text = str(pipeline.lower(func, SM90A))
    assert _commits_before_first_c1_read(text) == 2
    # C1's wait leaves C2's group in flight, and the elementwise loop runs before C2's wait
    w1 = text.index("wgmma_wait<1>")
    assert w1 < re.search(r"C1_local\[[^\]]+\] = C1_local", text).start()
    off = str(pipeline.lower(func, SM90A, OFF))
    assert _commits_before_first_c1_read(off) == 1 and "wgmma_wait<1>" not in off
    assert _run(func, rng, M, N, K).max_pending == 2


@pytest.mark.parametrize("dependent", ["tile", "acc"])
def test_dependent_gemm_stays(dependent, rng):
    """The loop before the second gemm writes its shared A tile / its accumulator."""
    M, N, K = 64, 40, 32
    func = gemm_after_elementwise(M, N, K, dependent)
    text = str(pipeline.lower(func, SM90A))
    assert _commits_before_first_c1_read(text) == 1
    assert _run(func, rng, M, N, K, dependent).max_pending == 1


# ------------------------------------------------------------------ FlashAttention backward
def _bwd_loop(configs=None, dim=128, **kw):
    m = load_example("flash_attention/example_mha_bwd_bhsd.py")
    func = m.flashattn_bwd.get_tir(1, 2, 256, dim, False, **{**m.bwd_config(dim), **kw})
    text = str(pipeline.lower(func, SM90A, configs))
    start = text.index("for k in range(")
    return text[start:]


def test_bwd_dp_is_issued_with_s():
    """dP^T = V dO^T (written after P^T = exp2(S^T - lse)) is issued right after S^T, and
    S^T's wait (``wait_group 1``) comes before the exp2; off: S^T is waited for first."""
    loop = _bwd_loop()
    exp = loop.index("T.exp2(")
    assert len(re.findall(r"wgmma_commit", loop[:exp])) == 2
    assert re.findall(r"wgmma_wait<(\d)>", loop[:exp]) == ["1"]
    off = _bwd_loop(OFF)
    exp = off.index("T.exp2(")
    assert len(re.findall(r"wgmma_commit", off[:exp])) == 1


# ------------------------------------------------------------------ waits past thread barriers
def test_bwd_dv_stays_in_flight_across_the_ds_store_barriers():
    """dV += P^T dO reads only a TMA stage (dO): its wait passes the barrier before the dS^T
    store and the store, and stops before dQ's issue (more accumulators in flight at once
    made ptxas serialize the wgmmas at head dim 256); off (``tl.wgmma_wait_past_barriers``),
    dV is waited for before the barrier."""
    fence_dv = 'wgmma_fence_operand<64>", T.address_of(dv_local'

    def dv_wait(loop):  # the fence of dv after its wait (the first one precedes its issue)
        issue = loop.index(fence_dv, loop.index("T.exp2("))
        return loop.index(fence_dv, issue + 1)

    loop = _bwd_loop()
    barriers = [m.start() for m in re.finditer("named_barrier_sync", loop)]
    store = loop.rindex("dsT_shared[", 0, barriers[1])
    assert barriers[0] < store < dv_wait(loop) < loop.index("dq_local", store) < barriers[1]
    off = _bwd_loop({"tl.wgmma_wait_past_barriers": False})
    assert dv_wait(off) < off.index("named_barrier_sync")


def overwrite_after_gemm(M, N, K, dtype="float16"):
    """C1 = A @ B^T, then A's shared tile is overwritten with A2 (a barrier first: the gemm
    reads it) and C2 = A2 @ B^T."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        A2: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        X: T.Tensor((M, N), "float32"),
        O1: T.Tensor((M, N), "float32"),
        O2: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            C1 = T.alloc_fragment((M, N), "float32")
            C2 = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C1, transpose_B=True, clear_accum=True)
            T.copy(A2, A_s)
            T.gemm(A_s, B_s, C2, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(M, N):
                C1[i, j] = C1[i, j] * 2.0 + X[i, j]
            for i, j in T.Parallel(M, N):
                C2[i, j] -= C1[i, j]
            T.copy(C1, O1)
            T.copy(C2, O2)

    return main


def test_wait_of_a_generically_written_tile_stays_before_the_barrier(rng):
    """The first gemm's tile is rewritten after the barrier: its wait stays before it."""
    M, N, K = 64, 32, 32
    func = overwrite_after_gemm(M, N, K)
    text = str(pipeline.lower(func, SM90A))
    first_commit = text.index("wgmma_commit")
    assert text.index("wgmma_wait<0>", first_commit) < text.index("__syncthreads", first_commit)
    assert _run(func, rng, M, N, K).max_pending == 1


@pytest.mark.parametrize("dq_first", [False, True])
def test_bwd_orders_emulated(dq_first, monkeypatch, rng):
    """The d=128 backward in both gemm orders (``dq_first``) with hoisting and waits past
    barriers, emulated at 140 positions (causal) against float64 autograd."""
    from test_fa_bwd_hopper import _emulated_bwd

    m = load_example("flash_attention/example_mha_bwd_bhsd.py")
    config = {**m.bwd_config(128), "dq_first": dq_first}
    monkeypatch.setattr(m, "bwd_config", lambda dim: config)
    _emulated_bwd(m, True, rng, 140, 128)


# ------------------------------------------------------------------ head dim 256, P/dS in shared
@pytest.mark.parametrize("causal", [False, True])
def test_d256_pds_shared_emulated(causal, rng):
    """``pds_shared``: P^T and dS^T stored to shared from the accumulators, dV/dK/dQ read
    them there (no register exchange between the warpgroups: 2 barriers a loop instead of
    3), with the race check, at 140 positions against float64 autograd."""
    m = load_example("flash_attention/example_mha_bwd_bhsd.py")
    config = {**m.bwd_config(256), "pds_shared": True}
    B, H, S, D = 1, 1, 140, 256
    q, k, v, do, lse, delta = _inputs(m, B, H, S, D, causal, rng)
    lowered = pipeline.lower(m.flashattn_bwd.get_tir(B, H, S, D, causal, **config), SM90A)
    loop = str(lowered)[str(lowered).index("for k in range(") :]
    assert loop[: loop.index("mbarrier_arrive")].count("named_barrier_sync") == 2
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan = np.full((B, H, S, D), np.nan, np.float16)
    arrays, _ = emulate_rs(lowered, *(x.numpy() for x in (q, k, v, do, lse, delta)), dq, nan,
                           nan.copy(), race=True)  # fmt: skip
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_d256_pds_shared_gpu(causal):
    """``pds_shared`` at head dim 256 through the autograd Function on the GPU (the
    example's ``main`` compares O, dQ, dK, dV with torch float64)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m = load_example("flash_attention/example_mha_bwd_bhsd.py")
    config = {**m.bwd_config(256), "pds_shared": True}
    original = m.bwd_config
    m.bwd_config = lambda dim: config if dim == 256 else original(dim)
    try:
        m.main(2, 4, 1000, 256, causal, device="cuda")
    finally:
        m.bwd_config = original


def test_back_to_back_waits_merge():
    """Upstream's order: dV's wait stops at dK's ``wait_group 0`` (the store of dS^T reads
    dK's register A), which retires dV too: one wait, dV's fences after it."""
    for configs in (None, {"tl.wgmma_issue_hoisting": False}):
        loop = _bwd_loop(configs, dq_first=False)
        lines = [x.strip() for x in loop.splitlines()]
        waits = [i for i, x in enumerate(lines) if "wgmma_wait<" in x]
        for a, b in zip(waits, waits[1:]):
            between = lines[a + 1 : b]
            assert not all("wgmma_fence_operand" in x for x in between), lines[a : b + 1]


def test_bwd_profiling_without_dq_atomics():
    """``dq_atomics=False`` (profiling): dq goes to a shared tile with plain stores; the dQ
    gemm stays (its 8 wgmmas), no atomic is left in the loop, the loop is still
    warp-specialized with the same two barriers."""
    loop = _bwd_loop(dq_atomics=False)
    body = loop[: loop.index("mbarrier_arrive")]
    assert "AtomicAdd" not in body and "dq_shared[" in body
    assert body.count("wgmma_commit") == 5 and body.count("named_barrier_sync") == 2
