"""Software pipelining of every global->shared copy of a ``T.Pipelined`` body
(pass config ``tl.pipeline_copy_schedule``, ``pipeline_copies.py``), on the FlashAttention example.

The V copy of the example stands after Q @ K^T and softmax, not at the start of the body.
``"leading"`` (the old schedule) leaves it synchronous; ``"hoist"`` issues it with K's copy
(one cp.async group, one wait, one barrier per iteration); ``"split"`` gives it its own
stage buffers and group, waited for right before P @ V. ``"auto"`` (the default) is hoist
with ``num_stages >= 2`` and split with 1.

The schedules are checked by their structure (which copies are in which group, where the
waits and barriers are) and by the wgmma emulator (``test_gemm_wgmma_rs.emulate_rs``)
against float64 numpy on fresh random inputs, in both asynchronous modes: ``late_writes``
(cp.async copies land only at the ``cp.async.wait_group`` that retires their group: a read
before the right wait sees stale data) and ``late_reads`` (a wgmma reads shared memory only
when retired: a stage refilled too early shows).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import pipeline_planning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402
from test_pipeline_emulate import _attention, _example  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
MODES = ("leading", "hoist", "split", "auto")


@pytest.fixture
def schedule(request):
    """The pass configs selecting copy schedule ``request.param`` (cp.async: no TMA)."""
    return {"tl.pipeline_copy_schedule": request.param, "tl.disable_tma_lower": True}


def _fa_tir(bm, bn, threads, stages, causal, batch=1, heads=1, seq=256, dim=64):
    fa = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    return fa.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
    )


def _loop(text):
    """The pipelined loop's body text (up to the wait after it)."""
    lines = text[
        text.index("for k in") - 1 - text[: text.index("for k in")][::-1].index("\n") + 1 :
    ]
    lines = lines.splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    out = [lines[0]]
    for line in lines[1:]:
        if len(line) - len(line.lstrip()) <= indent:
            break
        out.append(line)
    return "\n".join(out)


_EVENT = re.compile(
    r"cp_async_gs(?:_conditional)?<16>\", T\.ptr_byte_offset\(T\.address_of\((\w+)\["
    r"|cp_async_commit|cp_async_wait<\d+>|__syncthreads|fence_proxy_async_shared"
    r"|wgmma_m64n\d+k16_(?:ss|rs)|copy_vec<16>\", T\.address_of\(V_(?:vec|shared\[)"
)


def _events(text):
    """The loop as a list of events; consecutive cp.async copies of one tile merged."""
    out = []
    for m in _EVENT.finditer(_loop(text)):
        ev = f"cp.async {m.group(1)}" if m.group(1) else m.group(0).split('"')[0]
        if ev.startswith("wgmma_m"):
            ev = "wgmma_" + ev[-2:]
        if ev.startswith("copy_vec"):
            ev = "sync V copy"
        if not out or out[-1] != ev or ev.startswith(("__sync", "cp_async_wait")):
            out.append(ev)
    return out


def _lower(*cfg, schedule=None, **kw):
    return pipeline.lower(_fa_tir(*cfg, **kw), SM90A, schedule).script()


# ------------------------------------------------------------------------- schedules
@pytest.mark.parametrize("schedule", ["hoist", "auto"], indirect=True)
def test_hoist_schedule(schedule):
    ev = _events(_lower(128, 128, 256, 2, False, schedule=schedule))
    assert ev == [
        "cp_async_wait<0>",
        "fence_proxy_async_shared",
        "__syncthreads",
        "cp.async K_shared_mb",
        "cp.async V_shared_mb",
        "cp_async_commit",
        "wgmma_ss",
        "wgmma_rs",
    ]


@pytest.mark.parametrize("schedule", ["split"], indirect=True)
def test_split_schedule_two_stages(schedule):
    ev = _events(_lower(128, 128, 256, 2, False, schedule=schedule))
    refill = ["cp_async_wait<1>", "fence_proxy_async_shared", "__syncthreads"]
    assert ev == [
        *refill,
        "cp.async K_shared_mb",
        "cp_async_commit",
        "wgmma_ss",
        *refill,
        "cp.async V_shared_mb",
        "cp_async_commit",
        "wgmma_rs",
    ]


@pytest.mark.parametrize("schedule", ["split", "auto"], indirect=True)
def test_split_schedule_one_stage(schedule):
    """K and V issued at the top in two groups; V waited for only before P @ V."""
    ev = _events(_lower(64, 64, 128, 1, True, schedule=schedule))
    assert ev == [
        "cp.async K_shared_mb",
        "cp_async_commit",
        "cp.async V_shared_mb",
        "cp_async_commit",
        "cp_async_wait<1>",
        "fence_proxy_async_shared",
        "__syncthreads",
        "wgmma_ss",
        "cp_async_wait<0>",
        "fence_proxy_async_shared",
        "__syncthreads",
        "wgmma_rs",
        "__syncthreads",
    ]


@pytest.mark.parametrize("schedule", ["split"], indirect=True)
def test_split_schedule_three_stages(schedule):
    ev = _events(_lower(128, 64, 128, 3, False, schedule=schedule))
    assert ev.count("cp_async_wait<3>") == 2 and ev.count("__syncthreads") == 2
    text = _lower(128, 64, 128, 3, False, schedule=schedule)
    prologue = text[: text.index("for k in")]
    assert prologue.count("cp_async_commit") == 4  # K0 V0 K1 V1


@pytest.mark.parametrize("schedule", ["leading"], indirect=True)
def test_leading_schedule_keeps_v_synchronous(schedule):
    ev = _events(_lower(128, 128, 256, 2, False, schedule=schedule))
    assert "sync V copy" in ev and "cp.async V_shared_mb" not in ev
    fence = "fence_proxy_async_shared"
    kept = _events(_lower(128, 128, 256, 2, False, schedule={**schedule, "tl.drop_proxy_fences": False}))  # fmt: skip
    assert kept.count(fence) == 3  # top of the loop + one per gemm
    # the loop-top fence orders nothing (K arrives by TMA, an async-proxy write): dropped;
    # the one between the synchronous V copy and P @ V stays
    assert ev.count(fence) == 2
    v = ev.index("sync V copy")
    assert v < ev.index(fence, v) < ev.index("wgmma_rs", v)


@pytest.mark.parametrize("schedule", ["hoist", "split"], indirect=True)
def test_all_copies_are_async_in_every_config(schedule):
    for cfg in ((128, 128, 256, 2), (128, 64, 128, 2), (64, 64, 128, 1), (128, 64, 128, 3)):
        ev = _events(_lower(*cfg, False, schedule=schedule))
        assert "sync V copy" not in ev and "cp.async V_shared_mb" in ev, (cfg, ev)
        assert ev.count("wgmma_rs") == 1


@pytest.mark.parametrize("schedule", ["hoist"], indirect=True)
def test_hoisted_gemms_need_no_own_fence(schedule):
    """The loop's fence after its wait covers Q (written before the loop) and K/V."""
    ev = _events(_lower(128, 128, 256, 2, True, schedule=schedule))
    assert ev.count("fence_proxy_async_shared") == 1


# ------------------------------------------------------------------------- emulation
CONFIGS = [
    (128, 128, 256, 2),
    (128, 64, 128, 2),
    (64, 64, 128, 1),
    (64, 64, 128, 2),
    (64, 64, 128, 3),
]


@pytest.mark.parametrize("mode", ["late_writes", "late_reads"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bm,bn,threads,stages", CONFIGS)
@pytest.mark.parametrize("schedule", ["hoist", "split"], indirect=True)
def test_emulated(schedule, bm, bn, threads, stages, causal, mode, rng):
    B, H, S, D = 1, 1, 256, 64
    lowered = pipeline.lower(_fa_tir(bm, bn, threads, stages, causal, B, H, S, D), SM90A, schedule)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    (q, k, v, o), _ = emulate_rs(lowered, q, k, v, o, mode=mode)
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("schedule", ["hoist", "split"], indirect=True)
def test_emulated_causal_seq_not_a_multiple_of_the_block(schedule, rng):
    """Causal: the zero-filled keys past the end are masked for every real row."""
    B, H, S, D = 1, 2, 200, 64
    lowered = pipeline.lower(_fa_tir(64, 64, 128, 2, True, B, H, S, D), SM90A, schedule)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    (q, k, v, o), _ = emulate_rs(lowered, q, k, v, o, mode="late_writes")
    np.testing.assert_allclose(o, _attention(q, k, v, True), rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize(
    "schedule,cfg",
    [("hoist", (128, 64, 128, 3)), ("split", (128, 64, 128, 2)), ("split", (64, 64, 128, 1))],
    indirect=["schedule"],
)
def test_one_wait_too_few_is_caught(schedule, cfg, monkeypatch, rng):
    """Waiting for one group less than the schedule does reads a stage before it lands."""
    wait = pipeline_planning.cp_async_wait
    monkeypatch.setattr(pipeline_planning, "cp_async_wait", lambda n: wait(n + 1 if n else 0))
    B, H, S, D = 1, 1, 256, 64
    lowered = pipeline.lower(_fa_tir(*cfg, False, B, H, S, D), SM90A, schedule)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    (q, k, v, o), _ = emulate_rs(lowered, q, k, v, o, mode="late_writes")
    assert not np.allclose(o, _attention(q, k, v, False), rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------------- GPU
GPU_CONFIGS = [(128, 128, 256, 2), (128, 64, 128, 2), (64, 64, 128, 1), (64, 64, 128, 2)]


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bm,bn,threads,stages", GPU_CONFIGS)
@pytest.mark.parametrize("schedule", MODES, indirect=True)
def test_gpu_against_sdpa(schedule, bm, bn, threads, stages, causal):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from tilelang.backends.cuda import load_kernel

    B, H, S, D = 2, 4, 1024, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    func = _fa_tir(bm, bn, threads, stages, causal, B, H, S, D)
    load_kernel(pipeline.build(func, {"kind": "cuda"}, schedule))(q, k, v, o)
    torch.cuda.synchronize()
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    torch.testing.assert_close(o, ref, rtol=1e-2, atol=1e-2)
