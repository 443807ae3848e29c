"""Warp-specialized loops whose stages are read through the generic proxy (ldmatrix for an
mma.sync gemm or a register-A wgmma, element loads): ``ws_stage_reads.stage_release``.

Each consumer thread runs ``fence.proxy.async.shared::cta`` after its reads of a stage and
before its arrive on the stage's empty mbarrier (the producer's next TMA write of the stage
is an async-proxy write). Before, such loops were not specialized: an mma.sync GEMM reading
a transposed A tile through ldmatrix lost rows on the H200 when its arrive was issued before
the last ldmatrix reads returned (benchmark/RESULTS.md, session 5).

CPU: the lowering (specialized, a fence right before every consumer release), the emulator
with ``race_check`` (which fails a TMA write over bytes a warp read with no proxy fence since:
it catches the loop without the fence) against float64 on shapes that are not tile
multiples, and the SASS (nvcc + cuobjdump): every consumer arrive follows ``MEMBAR`` +
``FENCE.VIEW.ASYNC.S`` after the loop's last ``LDSM``. ``cuda``: the same kernels on the GPU.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import EmulationError, emulate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
from example_loader import load_example  # noqa: E402
from test_copy_ldmatrix import _empty, _random, gemm_a_frag  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
MMA_SYNC = {"tl.disable_wgmma": True, "tl.mma_split_pipeline": False}
FENCED = "generic-proxy stage reads: fence.proxy.async before each release"
FWD_BHSD = "flash_attention/example_mha_fwd_bhsd.py"
M, N, K = 200, 136, 80  # tails in M, N (64-blocks) and K (32-blocks)


def gemm_shared(M, N, K, dtype="float16", bm=64, bn=64, bk=32, stages=3):
    """C = A @ B^T with both operands read from shared memory by the gemm."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bn, bk), dtype)
            C_l = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[bx * bn, k * bk], B_s)
                T.gemm(A_s, B_s, C_l, transpose_B=True)
            T.copy(C_l, C[by * bm, bx * bn])

    return main


def _notes(lowered):
    return [str(x) for x in lowered.attrs["tl.tma"]] if "tl.tma" in lowered.attrs else []


def _releases_fenced(text):
    """For each consumer ``tl::mbarrier_arrive`` of the lowered kernel, in order: whether a
    ``fence.proxy.async`` comes between the last ``ldmatrix`` before it and the arrive."""
    out, fenced = [], True
    for line in text.splitlines():
        if "tl::ptx_ldmatrix" in line:
            fenced = False
        elif "tl::fence_proxy_async" in line:
            fenced = True
        elif '"tl::mbarrier_arrive"' in line:
            out.append(fenced)
    return out


def _fa(dim=64, causal=True):
    m = load_example(FWD_BHSD)
    return m, m.flashattn.get_tir(1, 1, 100, 150, dim, causal, **m.default_config(dim))


# (kernel builder, pass configs, uses mma.sync)
KERNELS = {
    "register_a_trans": (lambda dt: gemm_a_frag(M, N, K, dt, True), None, True),
    "register_a": (lambda dt: gemm_a_frag(M, N, K, dt, False), None, False),  # wgmma RS
    "shared_a_mma_sync": (lambda dt: gemm_shared(M, N, K, dt), MMA_SYNC, True),
}


# ----------------------------------------------------------------------------- lowering
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_specialized_with_a_fence_before_each_release(name):
    build, configs, mma_sync = KERNELS[name]
    lowered = pipeline.lower(build("bfloat16"), SM90A, configs)
    notes = " | ".join(_notes(lowered))
    assert "warp-specialized (" in notes and FENCED in notes, notes
    text = str(lowered)
    assert ("tl::mma_m16n8k16" in text) == mma_sync and "tl::ptx_ldmatrix" in text
    fenced = _releases_fenced(text)
    assert fenced and all(fenced), fenced


def test_wgmma_only_loop_keeps_the_unfenced_release():
    """Stages read only by wgmma (async proxy, like TMA): no fence before the release."""
    lowered = pipeline.lower(gemm_shared(M, N, K), SM90A)
    notes = " | ".join(_notes(lowered))
    assert "warp-specialized (" in notes and FENCED not in notes, notes
    text = str(lowered)
    loop = text[text.index("for k in") : text.index("for k_load in")]
    assert "tl::mbarrier_arrive" in loop and "fence_proxy" not in loop, loop


@pytest.mark.parametrize("arch", ["sm_100", "sm_120"])
def test_mma_sync_loops_on_later_archs_keep_cp_async(arch):
    """The specialized mma.sync loop is limited to sm_90/sm_90a (verified on the H200)."""
    lowered = pipeline.lower(gemm_a_frag(M, N, K, "float16", True), {"kind": "cuda", "arch": arch})
    notes = " | ".join(_notes(lowered))
    assert "warp-specialized (" not in notes and "cp.async" in notes, notes
    assert "tl::cp_async_gs" in str(lowered)


def test_flash_attention_on_mma_sync_is_specialized():
    """The bhsd forward with mma.sync gemms (``tl.disable_wgmma``) kept cp.async before;
    now the producer warpgroup loads K and V, the consumers fence before releasing them."""
    _, func = _fa()
    notes = " | ".join(_notes(pipeline.lower(func, SM90A, {"tl.disable_wgmma": True})))
    assert "warp-specialized (" in notes and FENCED in notes, notes


# ----------------------------------------------------------------------------- emulator
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_specialized_gemms_emulated(name, dtype):
    """Producer and consumers interleaved by the emulator, tails in M, N and K; mma.sync
    kernels also under ``race_check`` (cross-proxy hazards included) against float64."""
    build, configs, mma_sync = KERNELS[name]
    lowered = pipeline.lower(build(dtype), SM90A, configs)
    rng = np.random.default_rng(5)
    shared_a = name == "shared_a_mma_sync"
    a_ref, a = _random(rng, (K, M) if name == "register_a_trans" else (M, K), dtype)
    b_ref, b = _random(rng, (N, K) if shared_a else (K, N), dtype)
    c = _empty((M, N), "float32")
    if mma_sync:
        _, _, c = emulate(lowered, a, b, c, race_check=True)
    else:
        (_, _, c), _ = emulate_rs(lowered, a, b, c)
    a64 = a_ref.T if name == "register_a_trans" else a_ref
    want = a64 @ (b_ref.T if shared_a else b_ref)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)


def test_race_check_catches_the_release_without_fence(monkeypatch):
    """The same mma.sync kernel released without the fence: the emulator's cross-proxy check
    fails the producer's TMA write over the stage the consumers read with ldmatrix."""
    from tilelang.backends.cuda.passes import ws_stage_reads

    monkeypatch.setattr(
        ws_stage_reads, "stage_release", lambda *a: ws_stage_reads.RELEASE_AFTER_WGMMA
    )
    lowered = pipeline.lower(gemm_a_frag(M, N, K, "float16", True), SM90A)
    assert "warp-specialized (" in " ".join(_notes(lowered))
    fenced = _releases_fenced(str(lowered))
    assert fenced and not any(fenced), fenced
    rng = np.random.default_rng(3)
    a = _random(rng, (K, M), "float16")[1]
    b = _random(rng, (K, N), "float16")[1]
    with pytest.raises(EmulationError, match="cross-proxy race"):
        emulate(lowered, a, b, _empty((M, N), "float32"), race_check=True)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_on_mma_sync_emulated(causal):
    """The specialized mma.sync forward, 100 queries over 150 keys, under ``race_check``."""
    import torch

    m, func = _fa(64, causal)
    lowered = pipeline.lower(func, SM90A, {"tl.disable_wgmma": True})
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, 1, 100, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, 150, 64)).astype(np.float16) for _ in range(2))
    o = np.full(q.shape, np.nan, np.float16)
    emulate(lowered, q, k, v, o, race_check=True)
    ref = m.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), causal).numpy()
    np.testing.assert_allclose(o.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("args", [(1, 16, 2, 200, 64, 4), (1, 8, 8, 9, 64, 4)])
def test_gqa_decode_specialized_emulated(args):
    """``examples/flash_decoding``'s split kernel (mma.sync: 16 heads per block), specialized
    since this change, under ``race_check``; a 9-key cache leaves a split without keys."""
    import torch

    m = load_example("flash_decoding/example_gqa_decode.py")
    b, h, hk, s, d, split = args
    lowered = pipeline.lower(m.gqa_decode_split.get_tir(*args), SM90A)
    notes = " | ".join(_notes(lowered))
    assert "warp-specialized (" in notes and FENCED in notes, notes
    rng = np.random.default_rng(2)
    q = rng.standard_normal((b, h, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, s, hk, d)).astype(np.float16) for _ in range(2))
    parts = np.full((b, h, split, d), np.nan, np.float32)
    lse = np.full((b, h, split), np.nan, np.float32)
    emulate(lowered, q, k, v, parts, lse, race_check=True)
    # combine the splits in float64 (the example's second kernel, emulated elsewhere)
    w = np.exp2(lse.astype(np.float64) - lse.max(axis=2, keepdims=True))  # log2-sum-exp
    out = (parts * w[..., None]).sum(axis=2) / w.sum(axis=2)[..., None]
    ref = m.reference(*(torch.from_numpy(x) for x in (q, k, v))).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("num_split", [1, 3])
def test_mla_decode_small_specialized_emulated(num_split, monkeypatch):
    """``examples/deepseek_mla`` at 16 heads, dims 64 + 32 (mma.sync gemms): specialized
    since this change; its emulated test run under ``race_check``."""
    sys.path.insert(0, str(HERE.parents[1] / "examples"))
    import test_mla_decode as mla

    func = load_example(mla.DENSE).flashattn.get_tir(1, 16, 1, 100, 64, 32, 64, 16, num_split)
    notes = " | ".join(_notes(pipeline.lower(func, SM90A)))
    assert "warp-specialized (" in notes and FENCED in notes, notes
    monkeypatch.setenv("TILELANG_EMULATOR_RACE_CHECK", "1")
    mla._emulate_dense(SM90A, num_split, None, np.random.default_rng(4))


# ----------------------------------------------------------------------------- SASS
@pytest.mark.parametrize("name", ["register_a_trans", "shared_a_mma_sync"])
def test_sass_release_follows_the_proxy_fence(name):
    """In the consumer loop every ``SYNCS.ARRIVE.TRANS64.A1T0`` (the release) comes after a
    ``MEMBAR`` and ``FENCE.VIEW.ASYNC.S`` that follow the last ``LDSM`` before it: the
    ldmatrix reads are performed before the arrive, whatever ptxas does with the HMMAs."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    from test_tma import _sass

    build, configs, _ = KERNELS[name]
    sass = _sass(pipeline.build(build("float16"), SM90A, configs, compiler="nvcc"))
    ops = [line.split("*/", 1)[1].strip() for line in sass.splitlines() if "*/ " in line]
    ops = [op.split()[0] if not op.startswith("@") else op.split()[1] for op in ops if op]
    releases = [i for i, op in enumerate(ops) if op.startswith("SYNCS.ARRIVE.TRANS64.A1T0")]
    assert releases and any(op.startswith("LDSM") for op in ops), ops
    for i in releases:
        last_ldsm = max(j for j in range(i) if ops[j].startswith("LDSM"))
        between = ops[last_ldsm:i]
        assert "FENCE.VIEW.ASYNC.S" in between, between
        fence = last_ldsm + between.index("FENCE.VIEW.ASYNC.S")
        assert any(op.startswith("MEMBAR") for op in ops[last_ldsm:fence]), between


# ----------------------------------------------------------------------------- GPU
def _gpu(func, configs):
    import torch

    from tilelang.backends.cuda.runtime import load_kernel

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an sm_90 GPU")
    lowered = pipeline.lower(func, SM90A, configs)
    assert FENCED in " ".join(_notes(lowered))
    return load_kernel(pipeline.build(func, SM90A, configs))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("shape", [(M, N, K), (1000, 1000, 1000)], ids=["tails", "large"])
def test_specialized_gemms_gpu(name, dtype, shape):
    """Many K iterations per block (1000 / 32) so the producer refills every stage often."""
    import torch

    m, n, k = shape
    builders = {
        "register_a_trans": lambda: gemm_a_frag(m, n, k, dtype, True),
        "register_a": lambda: gemm_a_frag(m, n, k, dtype, False),
        "shared_a_mma_sync": lambda: gemm_shared(m, n, k, dtype),
    }
    kern = _gpu(builders[name](), KERNELS[name][1])
    tdt = getattr(torch, dtype)
    a = torch.randn(*((k, m) if name == "register_a_trans" else (m, k)), dtype=tdt).cuda()
    b = torch.randn(*((n, k) if name == "shared_a_mma_sync" else (k, n)), dtype=tdt).cuda()
    c = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    for _ in range(3):  # repeated launches: a race shows up as a run-to-run difference
        kern(a, b, c)
        torch.cuda.synchronize()
        a64 = a.double().T if name == "register_a_trans" else a.double()
        ref = a64 @ (b.double().T if name == "shared_a_mma_sync" else b.double())
        torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-3)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dim", [64, 128])
def test_flash_attention_on_mma_sync_gpu(dim, causal):
    import torch

    m = load_example(FWD_BHSD)
    B, H, SQ, SK = 2, 4, 1000, 1300
    func = m.flashattn.get_tir(B, H, SQ, SK, dim, causal, **m.default_config(dim))
    kern = _gpu(func, {"tl.disable_wgmma": True})
    q = torch.randn(B, H, SQ, dim, dtype=torch.float16, device="cuda")
    k, v = (torch.randn(B, H, SK, dim, dtype=torch.float16, device="cuda") for _ in range(2))
    o = torch.full_like(q, float("nan"))
    kern(q, k, v, o)
    torch.cuda.synchronize()
    ref = m.ref_program(q, k, v, causal)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)
