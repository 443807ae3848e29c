"""FlashAttention backward at head dim 256 with 64 x 64 blocks (issue 13's candidate; the
example's default is 64 x 32, benchmark/SASS_AUDIT.md): every gemm on wgmma (the default
runs dS K on mma.sync: 32 query rows are too few for a warpgroup), the score gemms 64 x 32
per warpgroup instead of 64 x 16. Emulated with the wgmma model and the race check against
float64 autograd at a length that is not a tile multiple; the shared-memory plan fits; on
the GPU (``cuda`` marker) against torch float64."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from example_loader import load_example  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
BWD = "flash_attention/example_mha_bwd_bhsd.py"
CONFIG = dict(block_M=64, block_N=64, threads=256, num_stages=2)


def _inputs(m, B, H, S, D, causal, rng, device="cpu"):
    q, k, v, do = (torch.from_numpy(rng.standard_normal((B, H, S, D)).astype(np.float16))
                   .to(device) for _ in range(4))  # fmt: skip
    o, lse = m.flashattn_fwd(B, H, S, D, causal)(q, k, v)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, do)
    return q, k, v, do, lse, delta


def test_all_gemms_on_wgmma():
    m = load_example(BWD)
    text = pipeline.lower(m.flashattn_bwd.get_tir(2, 4, 1000, 256, True, **CONFIG), SM90A).script()
    shapes = set(re.findall(r"tl::wgmma_m64n(\d+)k16", text))
    assert "mma_m16n8k16" not in text and "ldmatrix" not in text
    assert shapes == {"32", "128"}, shapes  # scores 64 x 32, dV / dK / dQ 64 x 128
    assert m.bwd_config(256) == CONFIG  # the example's default at 256 since session 8
    old = {**CONFIG, "block_N": 32}
    before = pipeline.lower(m.flashattn_bwd.get_tir(2, 4, 1000, 256, True, **old), SM90A).script()
    assert "tl::wgmma_m64n16k16" in before  # 64 x 32 blocks: scores 64 x 16 per warpgroup


@pytest.mark.parametrize("causal", [True])
def test_d256_64x64_emulated(causal, rng):
    m = load_example(BWD)
    B, H, S, D = 1, 1, 140, 256
    q, k, v, do, lse, delta = _inputs(m, B, H, S, D, causal, rng)
    lowered = pipeline.lower(m.flashattn_bwd.get_tir(B, H, S, D, causal, **CONFIG), SM90A)
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
def test_d256_64x64_gpu(causal, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m = load_example(BWD)
    B, H, S, D = 2, 4, 1000, 256
    q, k, v, do, lse, delta = _inputs(m, B, H, S, D, causal, rng, "cuda")
    kernel = m.flashattn_bwd(B, H, S, D, causal, **CONFIG)
    dq = torch.zeros(m.dq_accum_shape(B, H, S, D), dtype=torch.float32, device="cuda")
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    kernel(q, k, v, do, lse, delta, dq, dk, dv)
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(dq)
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16, dk, dv), ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)
