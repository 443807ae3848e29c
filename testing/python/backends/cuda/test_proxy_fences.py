"""``tl.drop_proxy_fences`` (``backends/cuda/passes/proxy_fences.py``): the wgmma lowering
puts a ``fence.proxy.async`` (SASS ``MEMBAR.ALL.CTA; FENCE.VIEW.ASYNC.S``) before every gemm;
the pass drops those that order no generic shared access before an async-proxy one.

* the FlashAttention backward's consumer loop keeps one fence per iteration (the one after
  the ``dsT_shared`` stores that the dS K wgmma reads) instead of 4 (d=128) / 3 (d=256);
  MLA decode keeps its one (after the ``S_shared`` stores);
* emulated with the wgmma model and the race check, which raises when a wgmma reads bytes
  written through the generic proxy with no fence since (the check fails when every fence
  is removed: the test of the check itself), the kernels match float64 references;
* a kernel whose accesses the model does not cover is left unchanged.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import proxy_fences as pf
from tilelang.testing.cuda_emulator_race import SharedRaceError
from tilelang.testing.cuda_emulator_values import EmulationError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_loader import load_example  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
BWD = "flash_attention/example_mha_bwd_bhsd.py"
MLA = "deepseek_mla/example_mla_decode.py"
OFF = {"tl.drop_proxy_fences": False}


def _consumer_loop_fences(lowered) -> int:
    """Fences inside the consumer's main loop (the first loop waiting on a full barrier)."""
    text = lowered.script()
    start = text.index("mbarrier_wait", text.index("tx < "))
    loop = text[text.rindex("for ", 0, start) :]
    loop = loop[: loop.index("tl::mbarrier_arrive")]
    return len(re.findall(r"tl::fence_proxy_async", loop))


@pytest.mark.parametrize("dim,before", [(128, 4), (256, 4)])  # 256: 64x64 blocks, all wgmma
def test_bwd_loop_keeps_one_fence(dim, before):
    m = load_example(BWD)
    func = m.flashattn_bwd.get_tir(2, 4, 512, dim, False, **m.bwd_config(dim))
    assert _consumer_loop_fences(pipeline.lower(func, SM90A, OFF)) == before
    assert _consumer_loop_fences(pipeline.lower(func, SM90A)) == 1


def test_mla_keeps_its_fence():
    func = load_example(MLA).flashattn.get_tir(2, 128, 1, 1024, 512, 64, 64, 64, 1)
    on, off = pipeline.lower(func, SM90A), pipeline.lower(func, SM90A, OFF)
    assert _consumer_loop_fences(on) == _consumer_loop_fences(off) == 1


def _bwd_emulated(causal, rng, configs, S=140, D=128, mutate=None):
    m = load_example(BWD)
    B, H = 1, 1
    q, k, v, do = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, causal)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, causal, **m.bwd_config(D))
    lowered = pipeline.lower(func, SM90A, configs)
    if mutate is not None:
        lowered = lowered.with_body(mutate(lowered.body))
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v,
                           race=True)  # fmt: skip
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


@pytest.mark.parametrize("causal", [False, True])
def test_bwd_without_dropped_fences_emulated(causal, rng):
    """The d=128 backward at 140 positions (tails), fences dropped: float64 autograd's dQ,
    dK, dV and no race (wgmma operand reads and TMA writes checked against generic
    accesses)."""
    _bwd_emulated(causal, rng, None)


def _drop_all(body):
    return pf._rebuild(body, {f.__chandle__() for f in pf._fences(body)}, False)


def test_race_check_sees_a_missing_fence(rng):
    """Without any fence the race check raises (the dsT_shared -> dS K wgmma hand-off, or
    the generic stores before the loop): the emulated tests above can fail."""
    with pytest.raises((SharedRaceError, EmulationError), match="cross-proxy race"):
        _bwd_emulated(False, rng, None, S=70, mutate=_drop_all)


def test_mla_emulated_with_race_check():
    """MLA decode at 512 + 64 (64 heads, 150 keys), fences dropped: matches float64, no race;
    without its fences the check raises."""
    module = load_example(MLA)
    func = module.flashattn.get_tir(1, 64, 1, 150, 512, 64, 64, 64, 1)
    lowered = pipeline.lower(func, SM90A)
    inputs = [x.numpy() for x in module.make_inputs(1, 64, 150, 512, 64, "cpu")]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs))
    out = np.zeros(ref.shape, np.float16)
    arrays, _ = emulate_rs(lowered, *inputs, out, mode="late_reads", race=True)
    np.testing.assert_allclose(arrays[len(inputs)].astype(np.float64), ref.numpy(), rtol=1e-2,
                               atol=1e-2)  # fmt: skip
    bare = lowered.with_body(_drop_all(lowered.body))
    with pytest.raises((SharedRaceError, EmulationError), match="read after write"):
        emulate_rs(bare, *inputs, np.zeros(ref.shape, np.float16), mode="late_reads", race=True)


def test_unmodelled_kernel_is_left_alone():
    """A release after an unfenced generic read of a TMA-written tile breaks the model's
    rules as lowered: the pass changes nothing (here: the lowered MLA with the fence before
    its release-free P @ V dropped by hand still has the rest of its fences afterwards)."""
    func = load_example(MLA).flashattn.get_tir(1, 64, 1, 150, 512, 64, 64, 64, 1)
    body = pipeline.lower(func, SM90A).body
    fences = pf._fences(body)
    broken = pf._rebuild(body, {fences[-1].__chandle__()}, False)
    if pf._violations(broken, set(), {}) == 0:
        pytest.skip("dropping the last fence does not break the model here")
    again = pf.drop_proxy_fences(broken)
    assert len(pf._fences(again)) == len(pf._fences(broken))
