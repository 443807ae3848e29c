"""The FlashAttention variants of ``examples/flash_attention``: bhsd forward (seq_q <= seq_kv,
right-aligned causal), GQA forward, variable-length forward (``cu_seqlens``, GQA and MHA),
bhsd backward and GQA backward (atomic and split dK/dV).

CPU: each example's ``main`` checks its kernels against torch in float64 on fresh random
inputs whose sequence lengths are not tile multiples (forward output; O, dQ, dK, dV for the
backward), and the bshd examples at such lengths. CUDA without a GPU: the emulator runs the
sm_90a lowering of the varlen forward and of the 64-row backward on 8 warps (wgmma split
along N, register A replicated), and the kernels are built with
nvcc for sm_90a at the block sizes the examples choose per head dim. ``cuda``-marked tests
run the examples on a GPU at moderate shapes.
"""

import re
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline

FWD_BHSD = "flash_attention/example_mha_fwd_bhsd.py"
GQA_FWD = "flash_attention/example_gqa_fwd_bshd.py"
GQA_VARLEN = "flash_attention/example_gqa_fwd_varlen.py"
MHA_VARLEN = "flash_attention/example_mha_fwd_varlen.py"
BWD_BHSD = "flash_attention/example_mha_bwd_bhsd.py"
GQA_BWD = "flash_attention/example_gqa_bwd.py"
SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _seed(rng):
    return int(rng.integers(1 << 30))


def _needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


# ----------------------------------------------------------------------------- CPU
@pytest.mark.parametrize(
    "seq_q,seq_kv,dim,causal,blocks",
    [(100, 100, 64, False, {}), (70, 150, 32, True, {}), (100, 100, 32, True, dict(block_N=32))],
    ids=["tail", "prefix_causal", "causal_bm_above_bn"],
)
def test_fwd_bhsd_cpu(seq_q, seq_kv, dim, causal, blocks, rng):
    _load(FWD_BHSD).main(1, 2, seq_q, seq_kv, dim, causal, device="cpu", **blocks)


@pytest.mark.parametrize(
    "heads,groups,seq,causal", [(4, 2, 100, False), (4, 4, 90, True)], ids=["gqa", "mqa_causal"]
)
def test_gqa_fwd_cpu(heads, groups, seq, causal, rng):
    _load(GQA_FWD).main(2, heads, seq, 32, causal, groups, device="cpu")


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_varlen_cpu(causal, rng):
    """Random lengths, with more queries than keys in some sequences when causal (queries
    that see no key give zeros)."""
    _load(GQA_VARLEN).main(3, 4, 150, 100 if causal else 130, 32, 2, causal, device="cpu",
                           seed=_seed(rng))  # fmt: skip


def test_mha_varlen_cpu(rng):
    _load(MHA_VARLEN).main(3, 2, 90, 64, True, device="cpu", seed=_seed(rng))


def test_varlen_empty_sequences_cpu(rng):
    """A sequence without queries, one without keys (its queries give zeros), one longer
    than the query tile, packed in one batch."""
    module = _load(GQA_VARLEN)
    utils = sys.modules["varlen_utils"]
    lens_q, lens_k = [0, 37, 130], [50, 0, 90]
    q, k, v, cu_q, cu_k, max_q = utils.make_varlen_inputs(lens_q, lens_k, 2, 1, 32, "cpu")
    for causal in (False, True):
        kernel = module.flashattn(3, 2, q.shape[0], k.shape[0], 2, 32, causal)
        out = kernel(q, k, v, cu_q, cu_k, max_q)
        ref = utils.ref_program_varlen(q, k, v, cu_q, cu_k, causal, groups=2)
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)
        assert not out[:37].any()  # the sequence without keys


@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_cpu(causal, rng):
    _load(BWD_BHSD).main(1, 2, 100 if causal else 90, 32, causal, device="cpu")


def test_bwd_bhsd_stats_from_global_cpu(rng):
    """The backward kernel reading lse/Delta from global memory (past the end: zero)."""
    m = _load(BWD_BHSD)
    B, H, S, D = 1, 2, 100, 32
    q, k, v, do = (torch.randn(B, H, S, D, dtype=torch.float16) for _ in range(4))
    o, lse = m.flashattn_fwd(B, H, S, D, False)(q, k, v)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, do)
    dq = torch.zeros(m.dq_accum_shape(B, H, S, D), dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    kernel = m.flashattn_bwd(B, H, S, D, False, 64, 32, stats_from_global=True)
    kernel(q, k, v, do, lse, delta, dq, dk, dv)
    dq = m.flashattn_bwd_postprocess(B, H, S, D)(dq)
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, False),
                   [x.double() for x in (q, k, v)], do)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref[1:]):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2, msg=name)


@pytest.mark.parametrize(
    "causal,use_atomic", [(False, True), (True, False)], ids=["atomic", "split_causal"]
)
def test_gqa_bwd_cpu(causal, use_atomic, rng):
    """4 query heads on 2 K/V heads, head dims 64 (Q, K) and 32 (V), 100 positions."""
    _load(GQA_BWD).main(1, 4, 100, 64, 32, 2, causal, use_atomic, device="cpu")


def test_bshd_examples_at_tails_cpu(rng):
    """The bshd forward and backward examples at 100 / 104 positions (keys past the end
    masked; with ``dq_layout`` the dQ atomics of the last block reach past the tensor)."""
    _load("flash_attention/example_mha_fwd_bshd.py").main(1, 2, 100, 64, False, device="cpu")
    bwd = _load("flash_attention/example_mha_bwd_bshd.py")
    bwd.main(1, 2, 104, 32, False, device="cpu", dq_layout=True)
    with pytest.raises(ValueError, match="multiple of 8"):
        bwd.attention_backward(*(torch.zeros(1, 100, 1, 32, dtype=torch.float16),) * 4, False,
                               dq_layout=True)  # fmt: skip


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="seq_kv"):
        _load(FWD_BHSD).flashattn.get_tir(1, 1, 128, 64, 64, False)
    with pytest.raises(ValueError, match="groups"):
        _load(GQA_FWD).flashattn.get_tir(1, 6, 128, 64, False, 4)
    with pytest.raises(ValueError, match="groups"):
        _load(GQA_VARLEN).flashattn.get_tir(2, 3, 100, 100, 4, 64, False)
    with pytest.raises(ValueError, match="groups"):
        _load(GQA_BWD).flashattn_bwd_atomic_add.get_tir(1, 6, 128, 64, 64, False, 64, 32, groups=4)


# ------------------------------------------------------------------ CUDA, emulated
@pytest.mark.parametrize("causal", [False, True])
def test_fwd_bhsd_warp_specialized_emulated(causal, rng):
    """The bhsd forward at its GPU config on sm_90a: warp-specialized (a TMA producer
    warpgroup, two consumer warpgroups), the Q box and the last K/V box past the sequence
    (100 queries, 150 keys), the output stored from registers; run by the emulator."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(FWD_BHSD)
    B, H, SQ, SK, D = 1, 1, 100, 150, 64
    q = rng.standard_normal((B, H, SQ, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, H, SK, D)).astype(np.float16) for _ in range(2))
    lowered = pipeline.lower(m.flashattn.get_tir(B, H, SQ, SK, D, causal, **m.default_config(D)),
                             SM90A)  # fmt: skip
    script = lowered.script()
    assert "named_barrier" in script and "tma_load" in script  # specialized, TMA loads
    arrays, _ = emulate_rs(lowered, q, k, v, np.full(q.shape, np.nan, np.float16))
    ref = m.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), causal)
    np.testing.assert_allclose(arrays[3].astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_fwd_ordered_emulated(causal, rng):
    """The GQA forward at its GPU config on sm_90a: its ``T.Pipelined(order=, stage=,
    group=)`` orders the consumer loop (Q @ K^T of block k before the rescale and P @ V of
    k-1, one mbarrier ring per copy) and the two consumer warpgroups take turns at the gemms,
    as in the MHA bshd example; query heads 2h and 2h+1 read K/V head h; a sequence of 300
    (tails in Q and K/V); run by the emulator against float64."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(GQA_FWD)
    B, S, H, G, D = 1, 300, 4, 2, 64
    lowered = pipeline.lower(m.flashattn.get_tir(B, H, S, D, causal, G, **m.default_config(D)),
                             SM90A)  # fmt: skip
    notes = list(lowered.attrs["tl.tma"])
    softmax = f"{list(range(2, 10 if causal else 9))}@stage0"  # positions after the copies
    assert any("consumer software-pipelined" in n and softmax in n for n in notes), notes
    assert any("take turns" in n for n in notes), notes
    assert not any("ignored" in n for n in notes), notes
    q = rng.standard_normal((B, S, H, D)).astype(np.float16)
    k, v = (rng.standard_normal((B, S, H // G, D)).astype(np.float16) for _ in range(2))
    arrays, _ = emulate_rs(lowered, q, k, v, np.full(q.shape, np.nan, np.float16))
    ref = m.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), causal, G)
    np.testing.assert_allclose(arrays[3].astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_gqa_fwd_order_annotations_vs_serial_and_derived():
    """``tl.pipeline_order = False`` with ``tl.wgmma_overlap = False`` (the annotations
    ignored, nothing derived) gives the serial loop (each gemm waited for where it is issued,
    no turns: the example before its annotations); ``tl.wgmma_overlap`` derives the
    annotations' order from the plain loop: the same CUDA source."""
    m = _load(GQA_FWD)
    tir = m.flashattn.get_tir(1, 8, 1000, 128, False, 4, **m.default_config(128))
    serial = pipeline.lower(tir, SM90A, {"tl.pipeline_order": False, "tl.wgmma_overlap": False})
    assert not any("software-pipelined" in n for n in serial.attrs["tl.tma"])
    assert "ws_turn_wait" not in str(serial)
    ordered = pipeline.build(tir, SM90A, compiler="nvcc").kernel_source
    derived = pipeline.build(tir, SM90A, {"tl.pipeline_order": False, "tl.wgmma_overlap": True},
                             compiler="nvcc").kernel_source  # fmt: skip
    assert "tl::ws_turn_wait" in ordered and "tl::wgmma_wait<1>()" in ordered

    def unnumbered(src):  # vector temporaries are numbered by a process-wide counter
        return re.sub(r"_vec\d+", "_vec", src)

    assert unnumbered(derived) == unnumbered(ordered)


@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_stats_from_global_warp_specialized_emulated(causal, rng):
    """``stats_from_global``: lse/Delta read in the elementwise loops, so the backward's loop
    (every gemm on wgmma at head dim 128) is warp-specialized with TMA Q/dO loads; run by the
    emulator at 150 positions (dK/dV start as NaN: every stored row must be written)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(BWD_BHSD)
    B, H, S, D = 1, 1, 150, 128
    q, k, v, do = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, causal)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, causal, **m.bwd_config(D), stats_from_global=True)
    lowered = pipeline.lower(func, SM90A)
    script = lowered.script()
    assert "named_barrier" in script and "tma_load" in script and "mma_m16n8k16" not in script
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v)
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


@pytest.mark.parametrize("causal", [True])
def test_varlen_sm90a_emulated(causal, rng):
    """The varlen kernel's sm_90a lowering (wgmma Q @ K^T, P @ V from registers; Q/K/V tiles
    at run-time offsets; the scalar ``max_seqlen_q`` sizing the grid) run by the emulator on
    a batch with an empty query sequence and an empty key sequence; the output starts as
    NaN, so every row must be written."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    module = _load(GQA_VARLEN)
    utils = sys.modules["varlen_utils"]
    lens_q, lens_k = [0, 37, 130], [50, 0, 90]
    q, k, v, cu_q, cu_k, max_q = utils.make_varlen_inputs(lens_q, lens_k, 2, 1, 64, "cpu")
    func = module.flashattn.get_tir(3, 2, q.shape[0], k.shape[0], 2, 64, causal, block_M=64,
                                    block_N=64, num_stages=2, threads=128)  # fmt: skip
    lowered = pipeline.lower(func, SM90A)
    assert "wgmma_m64n64k16_rs" in lowered.script()
    out = np.full(q.shape, np.nan, np.float16)
    inputs = [x.numpy() for x in (q, k, v, cu_q, cu_k)]
    arrays, _ = emulate_rs(lowered, *inputs, np.int32(max_q), out)
    ref = utils.ref_program_varlen(q, k, v, cu_q, cu_k, causal, groups=2)
    np.testing.assert_allclose(arrays[-1].astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_overlap_sm90a_emulated(causal, rng):
    """The varlen forward at its GPU config (128 x 128, two consumer warpgroups) with
    ``tl.wgmma_overlap`` (the benchmark's ``overlap`` variant): the compiler orders its
    plain loop as the annotated examples' (warpgroup turns too); empty query and key
    sequences, NaN-initialised output, float64 reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    module = _load(GQA_VARLEN)
    utils = sys.modules["varlen_utils"]
    lens_q, lens_k = [0, 37, 200], [50, 0, 260]
    q, k, v, cu_q, cu_k, max_q = utils.make_varlen_inputs(lens_q, lens_k, 4, 2, 64, "cpu")
    func = module.flashattn.get_tir(3, 2, q.shape[0], k.shape[0], 4, 64, causal,
                                    **module.default_config(64))  # fmt: skip
    lowered = pipeline.lower(func, SM90A, {"tl.wgmma_overlap": True})
    notes = list(lowered.attrs["tl.tma"])
    assert any("consumer software-pipelined" in n for n in notes), notes
    assert any("take turns" in n for n in notes), notes
    out = np.full(q.shape, np.nan, np.float16)
    inputs = [x.numpy() for x in (q, k, v, cu_q, cu_k)]
    arrays, _ = emulate_rs(lowered, *inputs, np.int32(max_q), out)
    ref = utils.ref_program_varlen(q, k, v, cu_q, cu_k, causal, groups=2)
    np.testing.assert_allclose(arrays[-1].astype(np.float64), ref.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("D,causal", [(256, True), (128, False)], ids=["d256_causal", "d128"])
def test_gqa_bwd_emulated(D, causal, rng):
    """The backward at its GPU block sizes, run by the emulator on a sequence that is not a
    tile multiple, against float64 gradients. Head dim 256: 64 K/V rows on 256 threads, the
    wgmma gemms split along N over the two warpgroups, dS/P in registers replicated. Head
    dim 128: 128 x 64 blocks, dS K on wgmma too (dS^T stored (K, M), 64 rows split along N)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(GQA_BWD)
    B, H, G, S = 1, 2, 2, 70 if D == 256 else 150
    q, do = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((B, S, H // G, D)).astype(np.float16) for _ in range(2))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, D, causal, groups=G)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd_atomic_add.get_tir(B, H, S, D, D, causal, **m.bwd_config(D, D), groups=G)
    lowered = pipeline.lower(func, SM90A)
    script = lowered.script()
    assert "wgmma_m64n128k16_rs" in script  # dV, dK: N = 256 over 2 warpgroups, or M = 128
    assert (D == 256) == ("mma_m16n8k16" in script)  # dS K: mma.sync only with 32-row blocks
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    dk, dv = np.zeros(k.shape, np.float32), np.zeros(v.shape, np.float32)
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, dk, dv)
    dq16 = m.flashattn_bwd_postprocess(B, H, S, D)(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal, G),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


def _nvcc_kernels():
    """(id, example, kernel, args, config) at GPU shapes and the examples' GPU configs."""
    fwd_bhsd, bwd_bhsd, gqa_fwd, gqa_varlen, gqa_bwd = (
        _load(x) for x in (FWD_BHSD, BWD_BHSD, GQA_FWD, GQA_VARLEN, GQA_BWD)
    )
    return [
        ("fwd_bhsd_d256_causal", fwd_bhsd.flashattn, (2, 16, 1000, 1100, 256, True),
         fwd_bhsd.default_config(256)),
        ("fwd_lse_d128", bwd_bhsd.flashattn_fwd, (2, 16, 1000, 128, True), bwd_bhsd.fwd_config(128)),
        ("bwd_bhsd_d64", bwd_bhsd.flashattn_bwd, (2, 16, 1000, 64, False), bwd_bhsd.bwd_config(64)),
        ("bwd_bhsd_d256_causal", bwd_bhsd.flashattn_bwd, (2, 16, 1024, 256, True),
         bwd_bhsd.bwd_config(256)),
        ("gqa_fwd", gqa_fwd.flashattn, (2, 32, 1000, 128, False, 8), gqa_fwd.default_config(128)),
        ("gqa_varlen_causal", gqa_varlen.flashattn, (4, 8, 4000, 4100, 32, 128, True),
         gqa_varlen.default_config(128)),
        ("gqa_bwd_split_causal", gqa_bwd.flashattn_bwd_split, (2, 32, 1024, 128, 128, True),
         {**gqa_bwd.bwd_config(128, 128), "groups": 8}),
        ("gqa_bwd_atomic_d256", gqa_bwd.flashattn_bwd_atomic_add, (2, 32, 1000, 256, 256, False),
         {**gqa_bwd.bwd_config(256, 256), "groups": 8}),
    ]  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("index", range(8), ids=lambda i: _NVCC_IDS[i])
def test_builds_with_nvcc_sm90a(index):
    """The kernels at their GPU block sizes, built by nvcc for sm_90a, the attention gemms
    on wgmma."""
    name, kernel, args, config = _nvcc_kernels()[index]
    assert name == _NVCC_IDS[index]
    art = pipeline.build(kernel.get_tir(*args, **config), {**SM90A, "compiler": "nvcc"})
    assert art.meta["kernel_names"]
    assert "wgmma" in art.kernel_source


_NVCC_IDS = [
    "fwd_bhsd_d256_causal", "fwd_lse_d128", "bwd_bhsd_d64", "bwd_bhsd_d256_causal", "gqa_fwd",
    "gqa_varlen_causal", "gqa_bwd_split_causal", "gqa_bwd_atomic_d256",
]  # fmt: skip


# ---------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_fwd_bhsd_gpu(dim, causal):
    _needs_gpu()
    _load(FWD_BHSD).main(2, 8, 1000, 1000, dim, causal, device="cuda")


@pytest.mark.cuda
def test_fwd_bhsd_prefix_gpu():
    _needs_gpu()
    _load(FWD_BHSD).main(2, 8, 700, 1500, 128, True, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("groups,causal", [(4, False), (8, True), (32, False)])
def test_gqa_fwd_gpu(groups, causal):
    _needs_gpu()
    _load(GQA_FWD).main(2, 32, 1000, 128, causal, groups, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_varlen_gpu(dim, causal):
    _needs_gpu()
    _load(GQA_VARLEN).main(6, 16, 1000, 800 if causal else 1200, dim, 4, causal, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_mha_varlen_gpu(causal):
    _needs_gpu()
    _load(MHA_VARLEN).main(4, 16, 512, 64, causal, device="cuda")
    seed = zlib.crc32(b"test_mha_varlen_gpu")
    _load(MHA_VARLEN).main(4, 16, 1000, 128, causal, device="cuda", seed=seed)


@pytest.mark.cuda
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_gpu(dim, causal):
    _needs_gpu()
    _load(BWD_BHSD).main(2, 8, 1000, dim, causal, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_bwd_bhsd_stats_from_global_gpu(causal, monkeypatch):
    """The warp-specialized backward (``stats_from_global``) at head dim 128 on the GPU."""
    _needs_gpu()
    module = _load(BWD_BHSD)
    config = {**module.bwd_config(128), "stats_from_global": True}
    monkeypatch.setattr(module, "bwd_config", lambda dim: config)
    module.main(2, 8, 1000, 128, causal, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dim_qk,dim_v,groups,causal,use_atomic",
    [
        (128, 128, 4, False, True),
        (128, 128, 4, True, False),
        (192, 128, 8, True, True),
        (256, 256, 2, False, True),
        (64, 64, 1, True, True),
    ],  # fmt: skip
)
def test_gqa_bwd_gpu(dim_qk, dim_v, groups, causal, use_atomic):
    _needs_gpu()
    _load(GQA_BWD).main(2, 16, 1000, dim_qk, dim_v, groups, causal, use_atomic, device="cuda")


@pytest.mark.cuda
def test_upstream_test_calls_gpu():
    """The calls of upstream TileLang's ``test_example_flash_attention.py``, keyword for
    keyword (their defaults included: GQA backward at head dims 192 / 128, 16 groups)."""
    _needs_gpu()
    _load(GQA_BWD).main()
    _load(BWD_BHSD).main(BATCH=1, H=16, N_CTX=512, D_HEAD=64, causal=False)
    _load(GQA_FWD).main(batch=1, heads=16, seq_len=1024, dim=128, is_causal=False, groups=16,
                        tune=False)  # fmt: skip
    _load(FWD_BHSD).main()
    for causal in (False, True):
        _load(MHA_VARLEN).main(batch=4, heads=16, seq_len=512, dim=64, causal=causal)
        _load(GQA_VARLEN).main(batch=4, heads=16, q_seqlen=512, k_seqlen=512, dim=64,
                               is_causal=causal)  # fmt: skip
