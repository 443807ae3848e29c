"""Uniform-select unswitching on CUDA sm_90a (``tilelang/transform/unswitch_uniform_select.py``):
the causal FlashAttention mask becomes a block-uniform branch whose common arm is a plain
register fill, the warp-specialized pipeline (``order``/``stage``/``group`` annotations
included) is planned as before, and the kernels compute the same with the pass on and off
(CUDA emulator with wgmma, nvcc, and the GPU)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pipeline_emulate import _attention, _example  # noqa: E402
from test_wgmma_overlap import emulate  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
# the block order stays as written, so the structural patterns read ``bx`` (heaviest-first
# reversal, on by default, rewrites it to ``gridDim - 1 - bx``: both together are run by
# test_both_passes_emulated)
OFF = {"tl.unswitch_uniform_select": False, "tl.heavy_blocks_first": False}
ON = {"tl.unswitch_uniform_select": True, "tl.heavy_blocks_first": False}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
PLAIN = "flash_attention/example_mha_fwd_bshd.py"
PIPELINED = "flash_attention/example_mha_fwd_bshd_wgmma_pipelined.py"
BHSD = "flash_attention/example_mha_fwd_bhsd.py"

#: the unmasked arm as the lowering writes it: a block-uniform test, then a register fill
FILL = re.compile(
    r"if (k \* \d+ \+ \d+ < bx \* \d+):\s*\n\s*for (pl\d+) in T\.unroll\(0, \d+\):\s*\n"
    r"\s*acc_s_local\[(?:[^\]]* \+ )?\2\] = T\.float32\(0\.0\)\s*\n\s*else:"
)


def _fa(path, causal, seq, blocks, batch=1, heads=1, dim=64):
    bm, bn, threads, stages = blocks
    return _example(path).flashattn.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=stages, threads=threads
    )


def _notes(lowered, key="tl.tma"):
    return [str(n) for n in lowered.attrs[key]] if lowered.attrs and key in lowered.attrs else []


# ------------------------------------------------------------------------- structure
def test_causal_mask_becomes_a_uniform_fill():
    lowered = pipeline.lower(_fa(PLAIN, True, 300, (128, 128, 256, 2)), SM90A, ON)
    text = str(lowered)
    match = FILL.search(text)
    assert match, text[text.find("for k in") : text.find("for k in") + 1500]
    # the diagonal blocks keep the per-element select; no block lies wholly above the
    # diagonal inside the causal loop range, so that arm is proven dead and dropped (one
    # select in the ordered loop's prologue, for its first block, one in the steady loop)
    assert text.count("T.if_then_else(bx * 128 +") == 2
    assert 'T.float32("-inf")\n' not in text.split(match.group(0))[1].split("T.if_then_else")[0]
    notes = _notes(lowered, "tl.unswitch_uniform_select")
    assert any("bx * 128 + i >= k * 128 + j" in n and "all if" in n and "none" not in n for n in notes), notes  # fmt: skip
    off = str(pipeline.lower(_fa(PLAIN, True, 300, (128, 128, 256, 2)), SM90A, OFF))
    assert not FILL.search(off) and "tl.unswitch_uniform_select" not in off


def test_annotated_pipeline_is_still_software_pipelined():
    """The mask is statement 1 of ``group=[[0], [1, 2], ...]``: one statement in, one out."""
    for configs in (ON, OFF):
        lowered = pipeline.lower(_fa(PIPELINED, True, 4096, (128, 128, 256, 2), 4, 16, 128), SM90A, configs)  # fmt: skip
        notes = _notes(lowered)
        assert any("consumer software-pipelined" in n for n in notes), notes
        assert bool(FILL.search(str(lowered))) == (configs is ON)


def test_dump_shows_the_stage():
    import tilelang

    lowered = tilelang.lower(
        _fa(PLAIN, True, 300, (128, 64, 128, 2)), target=SM90A, pass_configs=ON
    )
    names = lowered.names()
    assert names.index("unswitch_uniform_select") < names.index("layout_inference")
    assert "if k * 64 + 63 < bx * 128:" in lowered["unswitch_uniform_select"]
    assert "if k * 64 + 63 < bx * 128:" not in lowered["check_ws_scopes"]


# ------------------------------------------------------------------------- emulator
@pytest.mark.parametrize("configs", [ON, OFF], ids=["on", "off"])
@pytest.mark.parametrize(
    "path,seq,blocks",
    [
        (PLAIN, 300, (128, 128, 256, 2)),
        (PLAIN, 200, (128, 64, 128, 2)),  # block_M > block_N: rows wholly masked in a block
        (PLAIN, 200, (64, 128, 128, 1)),  # block_M < block_N
        (PIPELINED, 257, (128, 128, 256, 2)),
    ],
)
def test_causal_fa_sm90a_emulated(path, seq, blocks, configs, rng):
    B, H, D = 1, 2, 64
    lowered = pipeline.lower(_fa(path, True, seq, blocks, B, H, D), SM90A, configs)
    assert bool(FILL.search(str(lowered))) == (configs is ON)
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    (_, _, _, o), _ = emulate(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, True), rtol=1e-2, atol=2e-3)


def test_both_passes_emulated(rng):
    """Defaults: the causal mask unswitched and the blocks reversed (heaviest first)."""
    B, H, D, seq = 1, 2, 64, 300
    lowered = pipeline.lower(_fa(PLAIN, True, seq, (128, 64, 128, 2), B, H, D), SM90A)
    assert any("reversed" in n for n in _notes(lowered, "tl.block_order"))
    assert any("all if" in n for n in _notes(lowered, "tl.unswitch_uniform_select"))
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    (_, _, _, o), _ = emulate(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, True), rtol=1e-2, atol=2e-3)


def _bhsd_reference(q, k, v):
    fa = _example(BHSD)
    import torch

    return fa.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), True).numpy()


@pytest.mark.parametrize("configs", [ON, OFF], ids=["on", "off"])
def test_causal_fa_bhsd_prefix_sm90a_emulated(configs, rng):
    """seq_q < seq_kv (right-aligned causal: the mask has a ``past_len`` offset)."""
    B, H, SQ, SKV, D = 1, 1, 100, 230, 64
    func = _example(BHSD).flashattn.get_tir(B, H, SQ, SKV, D, True, block_M=64, block_N=64, num_stages=2, threads=128)  # fmt: skip
    lowered = pipeline.lower(func, SM90A, configs)
    q = rng.standard_normal((B, H, SQ, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, H, SKV, D)).astype(np.float16) for _ in range(2))
    (_, _, _, o), _ = emulate(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _bhsd_reference(q, k, v), rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------------- nvcc
@needs_nvcc
@pytest.mark.parametrize("dim", [64, 128])
def test_causal_fa_compiles_with_nvcc(dim, tmp_path):
    from test_gemm_wgmma import ptxas_report

    func = _fa(PLAIN, True, 4096, (128, 128, 256, 2), 4, 16, dim)
    art = pipeline.build(func, SM90A, ON, compiler="nvcc")
    source = art.get_kernel_source()
    # the unmasked arm: a block-uniform test, then 64 zero stores and nothing else
    assert re.search(
        r"if \(\(cse_v\d+ \+ 127\) < cse_v\d+\) \{\s*#pragma unroll\s*for \(int (pl\d+) = 0; \1 < 64; "
        r"\+\+\1\) \{\s*acc_s_local_ptr\[\1\] = 0x0p\+0f/\*0\.000000e\+00\*/;\s*\}\s*\} else \{",
        source,
    ), source[source.find("for (int k = 0") : source.find("for (int k = 0") + 1500]
    rep = ptxas_report(source, tmp_path)
    assert rep["spill"] == 0 and rep["stack"] == 0, rep["log"]


# ------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("configs", [ON, OFF], ids=["on", "off"])
@pytest.mark.parametrize(
    "path,seq,dim,blocks",
    [
        (PLAIN, 1000, 128, (128, 128, 256, 2)),
        (PLAIN, 777, 64, (128, 64, 128, 2)),
        (PIPELINED, 1000, 128, (128, 128, 256, 2)),
    ],
)
def test_causal_fa_gpu(path, seq, dim, blocks, configs):
    import torch

    from tilelang.backends.cuda import load_kernel

    fa = _example(path)
    B, H = 2, 4
    q, k, v = (torch.randn(B, seq, H, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel = load_kernel(pipeline.build(_fa(path, True, seq, blocks, B, H, dim), {"kind": "cuda"}, configs))  # fmt: skip
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    torch.testing.assert_close(o.double(), fa.ref_program(q, k, v, True), rtol=1e-2, atol=1e-2)
