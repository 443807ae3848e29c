"""TMA reductions in the FlashAttention examples: ``dq_tma_reduce`` of
``example_mha_bwd_bhsd.py`` (at the end) and ``example_gqa_bwd_tma_reduce.py`` (upstream's GQA backward whose
dQ, dK, dV go through ``T.atomic_add(global, shared, use_tma=True)``).

CPU backend: ``main`` (``use_tma=False`` there, as upstream has no TMA on the CPU) against
float64 autograd at lengths that are not tile multiples, both variants. CUDA without a GPU:
the sm_90a lowering at the GPU block sizes (every dQ/dK/dV reduce a TMA reduce, the loop
warp-specialized), emulated on a tail length against float64; ``use_tma`` on the CPU target
is upstream's compile error. ``cuda``-marked: the example on the GPU.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

import tilelang
from tilelang.backends.cuda import pipeline

EXAMPLE = "flash_attention/example_gqa_bwd_tma_reduce.py"
SM90A = {"kind": "cuda", "arch": "sm_90a"}


@pytest.mark.parametrize(
    "causal,use_atomic", [(False, True), (True, True), (True, False)],
    ids=["atomic", "atomic_causal", "split_causal"],
)  # fmt: skip
def test_main_cpu(causal, use_atomic):
    _load(EXAMPLE).main(1, 4, 100, 64, 32, 2, causal, use_atomic, device="cpu")


def test_use_tma_on_cpu_is_an_error():
    m = _load(EXAMPLE)
    func = m.flashattn_bwd_atomic_add.get_tir(1, 4, 100, 64, 32, False, 64, 32, threads=128,
                                              num_stages=1, groups=2)  # fmt: skip
    with pytest.raises(Exception, match="use_tma"):
        tilelang.compile(func, target="cpu")


@pytest.mark.parametrize("dqk,dv", [(192, 128), (128, 128), (64, 64)])
def test_gpu_configs_lower_to_tma_reduces(dqk, dv):
    """At the example's GPU block sizes: warp-specialized loop, the three reduces on TMA
    (the float32 staging tiles fit in shared memory beside the pipeline's)."""
    m = _load(EXAMPLE)
    func = m.flashattn_bwd_atomic_add.get_tir(2, 32, 1000, dqk, dv, True, **m.bwd_config(dqk, dv),
                                              groups=16)  # fmt: skip
    notes = [str(n) for n in pipeline.lower(func, SM90A).attrs["tl.tma"]]
    assert any("warp-specialized" in n for n in notes), notes
    for tile, out in (("dq_shared", "dQ"), ("dv_shared", "dV"), ("dk_shared", "dK")):
        assert any(n.startswith(f"atomic_add {tile} -> {out}: TMA reduce") for n in notes), notes


def test_atomic_variant_emulated():
    """The sm_90a lowering (TMA loads, warp specialization, wgmma, TMA reduces) run by the
    emulator on 150 positions (a tail in both loops), against float64 gradients."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(EXAMPLE)
    rng = np.random.default_rng(3)
    B, H, G, S, D = 1, 2, 2, 150, 64
    q, do = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((B, S, H // G, D)).astype(np.float16) for _ in range(2))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, D, False, groups=G)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd_atomic_add.get_tir(B, H, S, D, D, False, **m.bwd_config(D, D),
                                              groups=G)  # fmt: skip
    lowered = pipeline.lower(func, SM90A)
    assert "tl::tma_store_add_4d" in lowered.script()
    dq = np.zeros(q.shape, np.float32)
    dk, dv = np.zeros(k.shape, np.float32), np.zeros(v.shape, np.float32)
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, dk, dv)
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, False, G),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), arrays[6:9], ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


def test_builds_with_nvcc_sass_has_utmaredg():
    """nvcc/ptxas for sm_90a at the GPU block sizes: the reduces are UTMAREDG (dQ's 4 boxes
    in the loop, dK's and dV's after it), no per-element global reductions."""
    import re
    import shutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_tma import _sass, _tool

    if shutil.which("nvcc") is None or _tool("cuobjdump") is None:
        pytest.skip("nvcc / cuobjdump not installed")
    m = _load(EXAMPLE)
    func = m.flashattn_bwd_atomic_add.get_tir(2, 32, 1000, 128, 128, True,
                                              **m.bwd_config(128, 128), groups=8)  # fmt: skip
    sass = _sass(pipeline.build(func, SM90A, compiler="nvcc"))
    assert sass.count("UTMAREDG.4D.ADD") >= 12, sass.count("UTMAREDG")
    assert not re.search(r"\sRED\S*\.E\.ADD", sass)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dim_qk,dim_v,groups,causal,use_atomic",
    [(192, 128, 16, False, True), (128, 128, 4, True, True), (64, 64, 1, False, True),
     (128, 128, 8, True, False)],
)  # fmt: skip
def test_main_gpu(dim_qk, dim_v, groups, causal, use_atomic):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    _load(EXAMPLE).main(2, 16, 1000, dim_qk, dim_v, groups, causal, use_atomic, device="cuda")


@pytest.mark.cuda
def test_upstream_call_gpu():
    """Upstream's test calls ``main()`` with its defaults (head dims 192 / 128, 16 groups)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    _load(EXAMPLE).main()


# ------------------------------------------- example_mha_bwd_bhsd.py: dq_tma_reduce
BWD_BHSD = "flash_attention/example_mha_bwd_bhsd.py"
DQ_TMA = dict(dq_layout=False, dq_tma_reduce=True)


@pytest.mark.parametrize("causal,defer", [(False, False), (True, False), (True, True)],
                         ids=["plain", "causal", "causal_deferred_wait"])  # fmt: skip
def test_bhsd_dq_tma_reduce_emulated(causal, defer):
    """The bhsd backward at its head dim 128 GPU blocks with ``dq_tma_reduce``: the loop
    warp-specialized, dQ staged in a swizzled float32 tile and added by one TMA reduction a
    block (no per-element dQ atomics); emulated at 150 positions against float64."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(BWD_BHSD)
    rng = np.random.default_rng(11)
    B, H, S, D = 1, 1, 150, 128
    q, k, v, do = (rng.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(4))
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
    o, lse = m.flashattn_fwd(B, H, S, D, causal)(tq, tk, tv)
    delta = m.flashattn_bwd_preprocess(B, H, S, D)(o, tdo)
    func = m.flashattn_bwd.get_tir(B, H, S, D, causal, **m.bwd_config(D), **DQ_TMA)
    lowered = pipeline.lower(func, SM90A, {"tl.tma_reduce_defer_wait": defer})
    notes = [str(n) for n in lowered.attrs["tl.tma"]]
    assert any("warp-specialized" in n for n in notes), notes
    assert any("atomic_add dq_shared -> dQ: TMA reduce" in n and "SWIZZLE_128B" in n
               for n in notes), notes  # fmt: skip
    script = lowered.script()
    assert "tl::tma_store_add_4d" in script and "AtomicAdd" not in script
    deferred = '"tl::tma_store_wait_read<0>", T.address_of(dq_shared'
    assert (script.count(deferred) == 2) == defer
    dq = np.zeros(m.dq_accum_shape(B, H, S, D), np.float32)
    nan_k, nan_v = (np.full(x.shape, np.nan, np.float16) for x in (k, v))
    arrays, _ = emulate_rs(lowered, q, k, v, do, lse.numpy(), delta.numpy(), dq, nan_k, nan_v)
    post = m.flashattn_bwd_postprocess(B, H, S, D, dq_layout=False)
    dq16 = post(torch.from_numpy(arrays[6]))
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, causal),
                   [x.double() for x in (tq, tk, tv)], tdo)  # fmt: skip
    for name, got, want in zip(("dQ", "dK", "dV"), (dq16.numpy(), arrays[7], arrays[8]), ref[1:]):
        np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


def test_bhsd_dq_tma_reduce_needs_row_major_dq():
    m = _load(BWD_BHSD)
    with pytest.raises(ValueError, match="dq_layout=False"):
        m.flashattn_bwd.get_tir(1, 1, 128, 64, False, dq_tma_reduce=True)


@pytest.mark.parametrize("stages", [2, 3])
def test_bhsd_dq_tma_reduce_fits_at_gpu_sizes(stages):
    """Head dim 128 blocks with 2 and 3 Q/dO stages: the staging tile fits (no fallback from
    warp specialization), dQ on TMA."""
    m = _load(BWD_BHSD)
    config = {**m.bwd_config(128), "num_stages": stages, **DQ_TMA}
    lowered = pipeline.lower(m.flashattn_bwd.get_tir(4, 16, 4096, 128, True, **config), SM90A)
    notes = [str(n) for n in lowered.attrs["tl.tma"]]
    assert any("warp-specialized" in n for n in notes), notes
    assert any("dq_shared -> dQ: TMA reduce" in n for n in notes), notes


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_bhsd_dq_tma_reduce_gpu(causal, monkeypatch):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    module = _load(BWD_BHSD)
    config = {**module.bwd_config(128), **DQ_TMA}
    monkeypatch.setattr(module, "bwd_config", lambda dim: config)
    module.main(2, 8, 1000, 128, causal, device="cuda")


# ------------------------------------------------ example_gqa_bwd_tma_reduce_varlen.py
VARLEN = "flash_attention/example_gqa_bwd_tma_reduce_varlen.py"


@pytest.mark.parametrize(
    "causal,use_atomic", [(False, True), (True, True), (False, False)],
    ids=["atomic", "atomic_causal", "split"],
)  # fmt: skip
def test_varlen_main_cpu(causal, use_atomic):
    """Three sequences of random lengths <= 100 (not tile multiples), float64 reference."""
    _load(VARLEN).main(3, 4, 100, 64, 32, 2, causal, use_atomic, device="cpu", seed=5)


def test_varlen_bad_mode_is_named():
    with pytest.raises(ValueError, match="mode"):
        _load(VARLEN).generate_random_padding_mask(10, 2, "cpu", mode="half")


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_atomic_variant_emulated(causal):
    """The sm_90a backward at its GPU blocks (128 x 64 for head dim 64) on packed sequences
    of 70, 150 and 23 rows: the TMA boxes reach into the next sequence (adding zeros) and
    past the packed tensor (clipped); emulated against float64 gradients of the padded
    reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "cuda"))
    from test_gemm_wgmma_rs import emulate_rs

    m = _load(VARLEN)
    lens = torch.tensor([70, 150, 23], dtype=torch.int32)
    B, N, H, G, D = 3, 150, 2, 2, 64
    gen = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(B, N, h, D, generator=gen).half() for h in (H, H // G, H // G, H))
    mask = torch.arange(N)[None] < lens[:, None]
    do = do.masked_fill(~mask[:, :, None, None], 0)
    cu = torch.nn.functional.pad(torch.cumsum(lens, 0, dtype=torch.int32), (1, 0))
    qu, iq = m._unpad(q, mask)
    ku, ik = m._unpad(k, mask)
    vu, _ = m._unpad(v, mask)
    dou, _ = m._unpad(do, mask)
    tq, tk = qu.shape[0], ku.shape[0]
    o, lse = m.flashattn_fwd(B, tq, tk, N, H, 150, D, D, causal, 64, 32, G, threads=128)(
        qu, ku, vu, cu, cu
    )
    delta = m.flashattn_bwd_preprocess(B, H, tq, N, 150, D)(o, dou.contiguous(), cu)
    func = m.flashattn_bwd_atomic_add.get_tir(B, tq, tk, N, H, 150, D, D, causal,
                                              **m.bwd_config(D, D), groups=G)  # fmt: skip
    lowered = pipeline.lower(func, SM90A)
    notes = [str(n) for n in lowered.attrs["tl.tma"]]
    assert sum("TMA reduce" in n for n in notes) == 3, notes
    dq = np.zeros(qu.shape, np.float32)
    dk, dv = np.zeros(ku.shape, np.float32), np.zeros(vu.shape, np.float32)
    inputs = [x.numpy() for x in (qu, ku, vu, dou.contiguous(), lse, delta, cu, cu)]
    arrays, _ = emulate_rs(lowered, *inputs, dq, dk, dv)
    ref = m._grads(lambda a, b, c: m.ref_program(a, b, c, mask, causal, G),
                   [x.double() for x in (q, k, v)], do)  # fmt: skip
    got = [m._pad(torch.from_numpy(a), idx, B, N) for a, idx in zip(arrays[8:11], (iq, ik, ik))]
    for name, g, want in zip(("dQ", "dK", "dV"), got, ref[1:]):
        np.testing.assert_allclose(g.double().numpy(), want.numpy(), rtol=2e-2, atol=2e-2,
                                   err_msg=name)  # fmt: skip


def test_varlen_kernels_build_with_nvcc():
    """The forward and both backward variants at GPU sizes, built by nvcc for sm_90a."""
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    m = _load(VARLEN)
    args = (8, 7000, 7000, 1024, 32, 1000)
    funcs = [
        m.flashattn_fwd.get_tir(*args, 192, 128, True, 128, 64, 16),
        m.flashattn_bwd_atomic_add.get_tir(*args, 192, 128, True, **m.bwd_config(192, 128),
                                           groups=16),
        m.flashattn_bwd_split.get_tir(*args, 128, 128, False, **m.bwd_config(128, 128), groups=8),
    ]  # fmt: skip
    for func, reduces in zip(funcs, (False, True, False)):
        src = pipeline.build(func, SM90A, compiler="nvcc").kernel_source
        assert "wgmma" in src and ("tl::tma_store_add_3d(((" in src) == reduces


@pytest.mark.cuda
@pytest.mark.parametrize(
    "dim_qk,dim_v,groups,causal,use_atomic",
    [(192, 128, 16, False, True), (128, 128, 4, True, True), (128, 128, 8, True, False)],
)  # fmt: skip
def test_varlen_main_gpu(dim_qk, dim_v, groups, causal, use_atomic):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    _load(VARLEN).main(4, 16, 1000, dim_qk, dim_v, groups, causal, use_atomic, device="cuda")
    _load(VARLEN).main()  # upstream's defaults
