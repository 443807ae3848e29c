"""DeepSeek MLA decoding examples (``examples/deepseek_mla``): dense without and with KV
splits (``T.alloc_global`` workspaces + a combine kernel in the same function) and paged.

CPU: the examples run unchanged and match float64 references at small shapes whose KV
lengths are not tile multiples. CUDA without a GPU: the CUDA lowering (mma.sync on sm_80,
wgmma on sm_90a, the scalar gemm rule) is run by the emulator, and the full-size kernels
(batch 64, 128 heads, 8192 keys, 512 + 64) are built with nvcc for sm_90a. ``cuda``-marked
tests run the kernels on a GPU.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline
from tilelang.lowering.kernels import workspace_specs
from tilelang.testing import cuda_emulator

DENSE = "deepseek_mla/example_mla_decode.py"
PAGED = "deepseek_mla/example_mla_decode_paged.py"
SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}
SCALAR_GEMM = {"tl.gemm_scalar": True}
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402 - the wgmma (SS and RS) machine


def _needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


# ----------------------------------------------------------------------------- CPU
@pytest.mark.parametrize(
    "kv_ctx,num_split",
    [(300, 1), (300, 3), (256, 4), (5, 4)],
    ids=["tail", "split_tail", "split_even", "empty_split"],
)
def test_dense_cpu(kv_ctx, num_split):
    _load(DENSE).main(2, 16, 1, kv_ctx, 64, 32, num_split, device="cpu")


def test_dense_two_head_groups_cpu():
    """32 heads in two blocks of 16: each block reads its own query rows."""
    _load(DENSE).main(1, 32, 1, 130, 64, 32, 2, block_H=16, device="cpu")


@pytest.mark.parametrize(
    "seqlens,num_split,block_size",
    [((150, 37), 1, 64), ((150, 37), 3, 64), ((1, 64, 256), 4, 128)],
    ids=["no_split", "split", "empty_splits"],
)
def test_paged_cpu(seqlens, num_split, block_size):
    _load(PAGED).main(len(seqlens), 16, seqlens, 256, 64, 32, num_split,
                      block_size=block_size, device="cpu")  # fmt: skip


def test_bad_arguments_are_named():
    dense, paged = _load(DENSE), _load(PAGED)
    with pytest.raises(ValueError, match="kv_head_num=2"):
        dense.flashattn.get_tir(1, 16, 2, 64, 64, 32, 64, 16, 1)
    with pytest.raises(ValueError, match="block_N=48"):
        paged.mla_decode_paged.get_tir(1, 16, 1, 256, 64, 32, 48, 16, 1, 64)


# ------------------------------------------------------------------ CUDA, emulated
def _emulate_dense(target, num_split, configs, rng, kv=100, b=1, h=16):
    module = _load(DENSE)
    d, p = 64, 32
    func = module.flashattn.get_tir(b, h, 1, kv, d, p, 64, 16, num_split)
    lowered = pipeline.lower(func, target, configs)
    q, q_pe = (rng.standard_normal((b, h, n)).astype(np.float16) for n in (d, p))
    kv_, k_pe = (rng.standard_normal((b, kv, 1, n)).astype(np.float16) for n in (d, p))
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    out = cuda_emulator.emulate(lowered, q, q_pe, kv_, k_pe, np.zeros((b, h, d), np.float16), *ws)
    ref = module.ref_program(*(torch.from_numpy(x) for x in (q, q_pe, kv_, k_pe)))
    np.testing.assert_allclose(out[4].astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "target,configs",
    [(SM80, None), (SM90A, None), (SM80, SCALAR_GEMM)],
    ids=["sm_80", "sm_90a", "scalar_gemm"],
)
@pytest.mark.parametrize("num_split", [1, 3])
def test_dense_cuda_emulated(target, configs, num_split, rng):
    """The swizzled ``S_shared`` is the A operand of the PV gemm: the scalar gemm rule must
    read it through its layout."""
    _emulate_dense(target, num_split, configs, rng)


def test_dense_grid_cuda_emulated(rng):
    """A 3 x 2 x 3 grid under ``T.use_swizzle``: every (sequence, head group, slice) block
    writes its partial results (the workspaces start as NaN)."""
    _emulate_dense(SM80, 3, None, rng, kv=200, b=3, h=32)


@pytest.mark.parametrize("target", [SM80, SM90A], ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("num_split", [1, 3])
def test_paged_cuda_emulated(target, num_split):
    module = _load(PAGED)
    func = module.mla_decode_paged.get_tir(2, 16, 1, 256, 64, 32, 64, 16, num_split, 64)
    lowered = pipeline.lower(func, target)
    inputs = [x.numpy() for x in module.make_inputs(2, 16, 256, 64, 32, 64, (150, 37), "cpu")]
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    out = cuda_emulator.emulate(lowered, *inputs, np.zeros((2, 16, 64), np.float16), *ws)[6]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs), 64)
    np.testing.assert_allclose(out.astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("mode", ["late_reads", "late_writes"])
@pytest.mark.parametrize("num_split", [1, 3])
@pytest.mark.parametrize("example", ["dense", "paged"])
def test_wgmma_emulated(example, num_split, mode):
    """sm_90a at dims 128 + 64 and 64 heads: every gemm on wgmma (the PV gemm reads the
    swizzled ``S_shared`` (dense, SS form) or registers (paged, RS form)), run by the
    emulator with asynchronous wgmma / cp.async completion."""
    if example == "dense":
        module = _load(DENSE)
        func = module.flashattn.get_tir(1, 64, 1, 100, 128, 64, 64, 64, num_split)
        inputs = [x.numpy() for x in module.make_inputs(1, 64, 100, 128, 64, "cpu")]
        ref = module.ref_program(*(torch.from_numpy(x) for x in inputs))
    else:
        module = _load(PAGED)
        func = module.mla_decode_paged.get_tir(2, 64, 1, 256, 128, 64, 64, 64, num_split, 64)
        inputs = [x.numpy() for x in module.make_inputs(2, 64, 256, 128, 64, 64, (150, 37), "cpu")]
        ref = module.ref_program(*(torch.from_numpy(x) for x in inputs), 64)
    lowered = pipeline.lower(func, SM90A)
    assert "wgmma" in lowered.script() and "mma_m16n8k16" not in lowered.script()
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    out = np.zeros(ref.shape, np.float16)
    arrays, _ = emulate_rs(lowered, *inputs, out, *ws, mode=mode)
    got = arrays[len(inputs)].astype(np.float64)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-2, atol=1e-2)


def test_full_size_warp_specialized_emulated():
    """dim 512 + 64, 64 heads: Q, two K/V stages and S fill shared memory, so the epilogue's
    ``O_shared`` only fits on the stage tiles' bytes once the loop is done (the consumer
    warpgroups' named barrier before its first write; the mbarriers keep their own bytes).
    The kernel is warp-specialized, matches float64 (short KV: the plan does not depend
    on it) and passes the emulator's race check, wgmma operand reads included."""
    func = _load(DENSE).flashattn.get_tir(1, 64, 1, 150, 512, 64, 64, 64, 1)
    lowered = pipeline.lower(func, SM90A)
    plan = {k: (int(o), int(n)) for k, (o, n) in lowered.attrs["tl.shared_memory"].items()}
    text = lowered.script()
    assert "tl::mbarrier_wait" in text and "tx < 256" in text  # specialized
    o_lo, o_n = plan["O_shared"]
    s_lo, s_n = plan["KV_shared_mb"]
    assert o_lo < s_lo + s_n and s_lo < o_lo + o_n  # shares the stage buffer's bytes
    for bar in ("tma_full_k", "tma_empty_k"):
        b_lo, b_n = plan[bar]
        assert b_lo + b_n <= o_lo or o_lo + o_n <= b_lo
    first_write = text.index("O_shared[")
    before = text[:first_write]
    assert before.rindex("tl::named_barrier_sync") > before.rindex("tl::mbarrier_arrive")
    module = _load(DENSE)
    inputs = [x.numpy() for x in module.make_inputs(1, 64, 150, 512, 64, "cpu")]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs))
    # 3 tiles: the last iteration reads stage 0, whose bytes O_shared takes; the race check
    # sees the wgmma reads and fails without the named barrier (it did when it was removed)
    out = np.zeros(ref.shape, np.float16)
    arrays, _ = emulate_rs(lowered, *inputs, out, mode="late_reads", race=True)
    got = arrays[len(inputs)].astype(np.float64)
    np.testing.assert_allclose(got, ref.numpy(), rtol=1e-2, atol=1e-2)


def test_score_gemms_chain_without_a_wait():
    """``Q @ KV^T`` and ``Q_pe @ K_pe^T`` accumulate into one score tile with the same wgmma
    shape: PTX orders them by itself, so both are issued before one ``wait_group 0``
    (``wgmma_wait_sinking``); the emulator's asynchronous wgmma (executed at the wait that
    retires it) still matches float64 at that schedule (test_wgmma_emulated)."""
    func = _load(DENSE).flashattn.get_tir(1, 64, 1, 100, 128, 64, 64, 64, 1)
    text = pipeline.lower(func, SM90A).script()
    loop = text[text.index("for k in") :]
    first_wait = loop.index("tl::wgmma_wait<")
    assert loop[:first_wait].count("tl::wgmma_commit") == 2
    assert loop[first_wait:].startswith("tl::wgmma_wait<0>")


#: issue 13's MLA prototype: FlashAttention-3's order derived for the dense loop (its two
#: score gemms into one acc_s), the waits past the paired reduction barriers; no turns
OVERLAP = {"tl.wgmma_overlap": True, "tl.wgmma_wait_paired_barriers": True, "tl.ws_pingpong": False}


def _loop_events(text):
    """The steady consumer loop of lowered ``text`` as a list of event names."""
    import re

    loop = text[text.index("for k in range(1,") : text.index("for k_load")]
    keys = ("wgmma_m64n32k16", "wgmma_m64n64k16", "wgmma_wait", "named_barrier_sync",
            "S_shared[", "T.exp2", "fmaxf", "acc_o_local[pl")  # fmt: skip
    out = []
    for line in loop.splitlines():
        key = next((k for k in keys if k in line), None)
        if key == "wgmma_wait":
            key = re.search(r"wgmma_wait<\d>", line).group(0)
        if key and (not out or out[-1] != key):
            out.append(key)
    return out


def test_overlap_schedule_structure():
    """With the prototype's pass configs the dense loop issues both score gemms of block k,
    rescales ``acc_o`` and issues ``P @ V`` of block k-1 (after the ``S_shared`` barrier)
    before waiting for the scores; ``P @ V``'s wait passes the row-max exchange barrier (the
    row-sum one follows before any ``S_shared`` write) and lands after the exp2, right
    before the row-sum barrier, whose ``S_shared`` stores follow. Without
    ``tl.wgmma_wait_paired_barriers`` both waits stop at the first barrier; without
    ``tl.wgmma_overlap`` the loop is not reordered (the defaults)."""
    func = _load(DENSE).flashattn.get_tir(1, 64, 1, 300, 128, 64, 64, 64, 1)
    ev = _loop_events(str(pipeline.lower(func, SM90A, OVERLAP)))
    pv = ev.index("wgmma_m64n64k16")
    assert ev[:pv] == ["wgmma_m64n32k16", "acc_o_local[pl", "named_barrier_sync"]
    assert ev[pv + 1] == "wgmma_wait<1>"  # the scores only
    w0 = ev.index("wgmma_wait<0>")
    barriers = [i for i, e in enumerate(ev) if e == "named_barrier_sync"]
    assert barriers[1] < ev.index("T.exp2") < w0 == barriers[2] - 1
    assert barriers[2] < ev.index("S_shared[")
    stopped = _loop_events(str(pipeline.lower(func, SM90A, {**OVERLAP,
                                                           "tl.wgmma_wait_paired_barriers": False})))  # fmt: skip
    assert stopped.index("wgmma_wait<0>") < stopped.index("wgmma_m64n64k16")
    default = pipeline.lower(func, SM90A)
    assert not any("software-pipelined" in n for n in default.attrs["tl.tma"])


def _emulate_overlap(kv, dim, num_split, mode, configs, traced=False):
    """The dense kernel lowered with ``configs``, emulated against float64; with ``traced``
    also the consumer warpgroups' named-barrier operations replayed (deadlocks raise)."""
    from test_fa_three_warpgroups import emulate_traced, replay_blocks

    module = _load(DENSE)
    func = module.flashattn.get_tir(1, 64, 1, kv, dim, 64, 64, 64, num_split)
    lowered = pipeline.lower(func, SM90A, configs)
    inputs = [x.numpy() for x in module.make_inputs(1, 64, kv, dim, 64, "cpu")]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs)).numpy()
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    arrays, _ = emulate_rs(lowered, *inputs, np.zeros(ref.shape, np.float16), *ws, mode=mode,
                           race=True)  # fmt: skip
    np.testing.assert_allclose(arrays[len(inputs)].astype(np.float64), ref, rtol=1e-2, atol=1e-2)
    if traced:
        arrays, machine = emulate_traced(lowered, *inputs, np.zeros(ref.shape, np.float16), *ws)
        np.testing.assert_allclose(arrays[len(inputs)].astype(np.float64), ref, rtol=1e-2,
                                   atol=1e-2)  # fmt: skip
        replay_blocks(machine, 2)
    return lowered


@pytest.mark.parametrize(
    "kv,dim,num_split,mode",
    [(300, 128, 1, "late_reads"), (100, 128, 3, "late_writes"), (150, 512, 1, "late_reads")],
    ids=["tail", "split", "full_dim"],
)
def test_overlap_schedule_emulated(kv, dim, num_split, mode):
    """The prototype's loop matches float64 with wgmma completing at the wait that retires it
    (``late_reads``: a shared operand overwritten before the wait would be read new) and
    the race check on; the consumer warpgroups' named-barrier operations (row exchanges,
    ``S_shared``) replayed under ``bar.sync`` semantics: no deadlock or imbalance."""
    lowered = _emulate_overlap(kv, dim, num_split, mode, OVERLAP, traced=num_split == 1)
    assert any("consumer software-pipelined" in n for n in lowered.attrs["tl.tma"])


@pytest.mark.parametrize("num_split,mode", [(1, "late_reads"), (3, "late_writes")])
def test_overlap_schedule_paged_emulated(num_split, mode):
    """The paged kernel under the prototype's pass configs (default turns: its ``P @ V``
    reads registers, no shared tile spans the turn): ordered, float64, barriers replayed."""
    from test_fa_three_warpgroups import emulate_traced, replay_blocks

    module = _load(PAGED)
    func = module.mla_decode_paged.get_tir(2, 64, 1, 256, 128, 64, 64, 64, num_split, 64)
    configs = {"tl.wgmma_overlap": True, "tl.wgmma_wait_paired_barriers": True}
    lowered = pipeline.lower(func, SM90A, configs)
    assert any("consumer software-pipelined" in n for n in lowered.attrs["tl.tma"])
    inputs = [x.numpy() for x in module.make_inputs(2, 64, 256, 128, 64, 64, (150, 37), "cpu")]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs), 64).numpy()
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    arrays, _ = emulate_rs(lowered, *inputs, np.zeros(ref.shape, np.float16), *ws, mode=mode,
                           race=True)  # fmt: skip
    np.testing.assert_allclose(arrays[len(inputs)].astype(np.float64), ref, rtol=1e-2, atol=1e-2)
    _, machine = emulate_traced(lowered, *inputs, np.zeros(ref.shape, np.float16), *ws)
    replay_blocks(machine, 2)


def test_ordered_loop_without_turns_around_the_s_shared_barrier(monkeypatch):
    """Ping-pong turns are on by default in ordered loops, but MLA's turn would span the
    consumers' ``S_shared`` barrier before ``P @ V`` (one warpgroup holding the turn waits
    there for the others, which wait for the turn): no turns, with a note. Forcing them
    makes the barrier replay find the deadlock the GPU would hang in."""
    from tilelang.backends.cuda.passes import warp_specialize_auto as ws

    configs = {"tl.wgmma_overlap": True, "tl.wgmma_wait_paired_barriers": True}
    lowered = _emulate_overlap(300, 128, 1, "late_reads", configs, traced=True)
    notes = list(lowered.attrs["tl.tma"])
    assert any("no ping-pong turns" in n and "S_shared" in n for n in notes), notes
    monkeypatch.setattr(ws, "_shared_across", lambda inside, outside: set())
    with pytest.raises(AssertionError, match="deadlock"):
        _emulate_overlap(300, 128, 1, "late_reads", configs, traced=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("num_split", [1, 4])
@pytest.mark.parametrize("example", ["dense", "paged"])
def test_full_size_builds_with_nvcc(example, num_split):
    """Batch 64, 128 heads, 8192 keys, 512 + 64: wgmma kernels, launched directly."""
    if example == "dense":
        func = _load(DENSE).flashattn.get_tir(64, 128, 1, 8192, 512, 64, 64, 64, num_split)
    else:
        func = _load(PAGED).mla_decode_paged.get_tir(
            64, 128, 1, 8192, 512, 64, 64, 64, num_split, 64
        )
    art = pipeline.build(func, {**SM90A, "compiler": "nvcc"})
    assert len(art.meta["kernel_names"]) == (2 if num_split > 1 else 1)
    assert not art.meta["direct_launch_skipped"]
    assert "wgmma" in art.kernel_source


# ---------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("num_split", [1, 4])
@pytest.mark.parametrize("kv_ctx", [1000, 1024])
def test_dense_gpu(kv_ctx, num_split):
    _needs_gpu()
    _load(DENSE).main(4, 128, 1, kv_ctx, 512, 64, num_split, device="cuda")


@pytest.mark.cuda
def test_dense_small_gpu():
    _needs_gpu()
    _load(DENSE).main(2, 16, 1, 300, 64, 32, 3, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("num_split", [1, 4])
def test_paged_gpu(num_split):
    _needs_gpu()
    _load(PAGED).main(3, 128, (1000, 1, 4096), 4096, 512, 64, num_split, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("example", ["dense", "paged"])
def test_overlap_prototype_gpu(example):
    """The prototype's pass configs (benchmark/mla_decode.py --variant) on the GPU at 512 +
    64 and 128 heads: no hang, float64 agreement."""
    _needs_gpu()
    import tilelang

    configs = {"tl.enable_fast_math": True, **OVERLAP}
    if example == "dense":
        module = _load(DENSE)
        func = module.flashattn.get_tir(4, 128, 1, 1000, 512, 64, 64, 64, 1)
        inputs = module.make_inputs(4, 128, 1000, 512, 64, "cuda")
        ref, out_idx = module.ref_program(*inputs), [4]
    else:
        module = _load(PAGED)
        func = module.mla_decode_paged.get_tir(3, 128, 1, 4096, 512, 64, 64, 64, 1, 64)
        inputs = module.make_inputs(3, 128, 4096, 512, 64, 64, (1000, 1, 4096), "cuda")
        ref, out_idx = module.ref_program(*inputs, 64), [6]
    kernel = tilelang.compile(func, out_idx=out_idx, pass_configs=configs)
    for _ in range(2):  # a second launch: barriers and phases start fresh
        out = kernel(*inputs)
        torch.cuda.synchronize()
        torch.testing.assert_close(out.double().cpu(), ref.double().cpu(), rtol=1e-2, atol=1e-2)
