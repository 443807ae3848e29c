"""The FlashAttention example over block_M x block_N x threads x dim (compile-only, no GPU),
and emulator runs of configurations that used to fail layout inference on sm_90a.

With block_M = 128 on one warpgroup (128 threads) the wgmma Q @ K^T accumulator puts row
``16 w + 64 i`` on warp ``w`` (two m64 instructions). P @ V takes wgmma's register-A (RS)
form, whose A and C put the same rows there, so both gemms stay on wgmma
(``test_gemm_wgmma_rs.py`` emulates them). When P @ V is on mma.sync (P in registers,
rows ``32 w .. 32 w + 31``; the ``mma_p_at_v`` fixture forces that here), the row vectors
(``scores_max``, ``scores_scale``, ``logsum``) cannot follow both: layout inference then
retries with the mma.sync path for Q @ K^T (``prefer_mma``, ``gemm_cuda.py``).

With block_M = 64 on 8 warps, Q @ K^T's accumulator splits each row over two warp columns
while P @ V's register A needs whole rows on every warp: ``T.copy(acc_s, acc_s_cast)``
exchanges the values through shared memory (``copy_exchange_cuda.py``); emulated here and
run on the GPU against float64 (``cuda``).

GPU verification of these configurations is pending (see the commit message).
"""

import itertools
import pathlib
import re
import sys

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emulate_mod

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from test_pipeline_emulate import SCALAR_GEMM, _attention, _example  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}


def _fa():
    return _example("flash_attention/example_mha_fwd_bshd.py").flashattn


def _tir(bm, bn, threads, dim, causal, seq=256, heads=2, batch=1, stages=2):
    return _fa().get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
    )


GRID = list(itertools.product((64, 128), (32, 64, 128), (128, 256), (64, 128), (False, True)))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("bm,bn,threads,dim,causal", GRID)
def test_fa_config_compiles(arch, bm, bn, threads, dim, causal):
    pipeline.lower(_tir(bm, bn, threads, dim, causal), {"kind": "cuda", "arch": arch})


# block_M = 64 on 8 warps: the accumulator -> register-A copy crosses warps (see the module
# docstring); causal only with block_N >= block_M (the example NaNs otherwise, as upstream's)
EXCHANGE_CONFIGS = [(64, 64, False), (64, 32, False), (64, 128, False), (64, 64, True)]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("bm,bn,causal", EXCHANGE_CONFIGS)
def test_cross_warp_copy_config_emulated(arch, bm, bn, causal):
    """sm_80: mma.sync. sm_90a: wgmma, both gemms split along N over the two warpgroups
    (FullRow's fallback when 64 rows cannot feed both), run by the wgmma machine."""
    B, H, S, D = 1, 1, 128, 64
    lowered = pipeline.lower(
        _tir(bm, bn, 256, D, causal, seq=S, heads=H, batch=B), {"kind": "cuda", "arch": arch}
    )
    assert "acc_s_cast_exchange" in str(lowered)
    if arch == "sm_80":
        _run(lowered, B, H, S, D, causal)
        return
    from test_gemm_wgmma_rs import emulate_rs

    assert "wgmma_m64n32k16_rs" in str(lowered)  # P @ V: dim 64 over 2 warpgroups
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    arrays, _ = emulate_rs(lowered, q, k, v, np.full_like(q, np.nan))
    want = _attention(q, k, v, causal)
    np.testing.assert_allclose(arrays[3], want, rtol=1e-2, atol=2e-3)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["wgmma", "mma"])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("bm,bn,causal", EXCHANGE_CONFIGS)
def test_cross_warp_copy_config_on_gpu(path, dim, bm, bn, causal):
    import torch

    from tilelang.backends.cuda import load_kernel

    major, minor = torch.cuda.get_device_capability()
    if path == "wgmma" and (major, minor) != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    arch = "sm_90a" if path == "wgmma" else f"sm_{major}{minor}"  # sm_90: mma.sync
    B, H, S = 2, 3, 384
    func = _tir(bm, bn, 256, dim, causal, seq=S, heads=H, batch=B)
    kernel = load_kernel(pipeline.build(func, {"kind": "cuda", "arch": arch}))
    q, k, v = (torch.randn(B, S, H, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    scores = qd @ kd.transpose(-1, -2) / dim**0.5
    if causal:
        mask = torch.ones(S, S, dtype=torch.bool, device="cuda").tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    ref = (scores.softmax(-1) @ vd).transpose(1, 2)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)


def _instructions(func, target=SM90):
    text = str(pipeline.lower(func, target))
    return sorted(set(re.findall(r"tl::(wgmma_m\w+?k16_[rs]s|mma_m16n8k16_\w+)", text)))


@pytest.fixture
def mma_p_at_v(monkeypatch):
    """P @ V (register A) on mma.sync, as before wgmma's RS form: the layout-conflict retry."""
    from tilelang.ops.gemm import wgmma_cuda as gemm_wgmma

    build = gemm_wgmma.WgmmaPlan.build.__func__

    def no_register_a(cls, v, threads):
        plan, why = build(cls, v, threads)
        if plan is not None and plan.a_in_regs:
            return None, "register A (wgmma RS form disabled by the test)"
        return plan, why

    monkeypatch.setattr(gemm_wgmma.WgmmaPlan, "build", classmethod(no_register_a))


def test_wgmma_rows_that_disagree_fall_back_to_mma(mma_p_at_v):
    # the benchmark's once-failing config: Q @ K^T leaves wgmma (its rows would disagree)
    assert _instructions(_tir(128, 64, 128, 128, False)) == ["mma_m16n8k16_f16f16f32"]


@pytest.mark.parametrize(
    "bm,bn,threads,wgmma",
    [(128, 128, 256, "wgmma_m64n128k16_ss"), (64, 64, 128, "wgmma_m64n64k16_ss")],
)
def test_wgmma_kept_when_rows_agree(bm, bn, threads, wgmma, mma_p_at_v):
    # one m64 instruction per warpgroup: wgmma and mma.sync rows agree, Q @ K^T keeps wgmma
    assert _instructions(_tir(bm, bn, threads, 128, False)) == ["mma_m16n8k16_f16f16f32", wgmma]


@pytest.mark.parametrize(
    "bm,bn,threads,qk",
    [
        (128, 128, 256, "m64n128k16_ss"),
        (128, 64, 128, "m64n64k16_ss"),
        (64, 64, 128, "m64n64k16_ss"),
    ],
)
def test_both_gemms_on_wgmma(bm, bn, threads, qk):
    # P @ V on the RS form: its A and C rows are the wgmma rows of Q @ K^T in every config
    assert _instructions(_tir(bm, bn, threads, 128, False)) == [
        "wgmma_m64n128k16_rs",
        f"wgmma_{qk}",
    ]


def _run(lowered, B, H, S, D, causal):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    o = np.full_like(q, np.nan)
    q, k, v, o = emulate_mod.emulate(lowered, q, k, v, o)
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)


@pytest.mark.skipif(
    not hasattr(emulate_mod, "MMA_SHAPES"), reason="the emulator does not run ldmatrix/mma.sync"
)
@pytest.mark.parametrize(
    "bm,bn,causal",
    # causal with block_M > block_N: rows fully masked in a K block (the example's Check_inf)
    [(128, 64, False), (128, 128, True), (128, 64, True)],
)
def test_previously_failing_config_emulated(bm, bn, causal, mma_p_at_v):
    """The sm_90a lowering with P @ V on mma.sync (ldmatrix + mma.sync, the retried layouts)
    vs float64; with the RS form: ``test_gemm_wgmma_rs.py``."""
    B, H, S, D = 1, 1, 256, 64
    _run(
        pipeline.lower(_tir(bm, bn, 128, D, causal, seq=S, heads=H, batch=B), SM90),
        B,
        H,
        S,
        D,
        causal,
    )


def test_previously_failing_config_emulated_scalar_gemm():
    """The same block sizes with T.gemm through the scalar rule (``tl.gemm_scalar``)."""
    B, H, S, D = 1, 1, 128, 64
    lowered = pipeline.lower(
        _tir(128, 64, 128, D, False, seq=S, heads=H, batch=B), SM90, SCALAR_GEMM
    )
    _run(lowered, B, H, S, D, False)
