"""TMA stores on sm_90a (``backends/cuda/passes/tma_store.py``): ``T.copy(shared -> global)``
as ``cp.async.bulk.tensor`` stores, the staged epilogue of warp-specialized GEMMs (pass
config ``tl.tma_store_epilogue``: ``stmatrix`` into a swizzled tile reusing a stage buffer,
then one elected thread's TMA store), emulated with tails against float64, the fallbacks
and their reasons, the generated source and SASS, and, marked ``cuda``, the H200 runs."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_programs import readme_gemm as gemm  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402
from test_tma import _sass, _tool  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
EPILOGUE = {"tl.tma_store_epilogue": True}
NO_EPILOGUE = {"tl.tma_store_epilogue": False}
TMA = {"tl.disable_tma_lower": False}


def gemm_shared_epilogue(M, N, K, bM=128, bN=128, bK=64, threads=128, stages=3, dtype="float16"):
    """The GEMM with the user's own staging: ``T.copy(C_l, C_s); T.copy(C_s, C[...])``."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_s = T.alloc_shared((bM, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bM, bx * bN])

    return main


def _notes(func):
    return [str(x) for x in func.attrs["tl.tma"]] if "tl.tma" in func.attrs else []


def _np(dtype):
    return np.float16 if dtype == "float16" else ml_dtypes.bfloat16


def _emulated(func, M, N, K, dtype, configs):
    """(C from the emulator, float64 reference) on fresh random inputs; C starts as NaN."""
    lowered = pipeline.lower(func, SM90A, configs)
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((M, K)) / 4).astype(_np(dtype))
    b = (rng.standard_normal((K, N)) / 4).astype(_np(dtype))
    c = np.full((M, N), np.nan, _np(dtype))
    (_, _, c), _ = emulate_rs(lowered, a, b, c, mode="late_writes")
    want = a.astype(np.float64) @ b.astype(np.float64)
    return lowered, c.astype(np.float64), want


def _close(got, want, dtype):
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    assert not np.isnan(got).any(), "elements never written"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


# ------------------------------------------------------------------ epilogue staging
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "M,N,K,bN,threads",
    [(200, 328, 136, 128, 128), (136, 200, 72, 64, 128), (200, 328, 136, 128, 256)],
)
def test_staged_epilogue_emulated_with_tails(M, N, K, bN, threads, dtype):
    """Tails in M, N and K: the stmatrix staging and the clipped TMA boxes give the float64
    product; the source has the stmatrix loop, the fence, the barrier and the bulk store."""
    func = gemm(M, N, K, bM=64 * (threads // 128), bN=bN, threads=threads, dtype=dtype)
    lowered, got, want = _emulated(func, M, N, K, dtype, EPILOGUE)
    notes = _notes(lowered)
    assert any("epilogue C_l -> C: staged in C_epilogue" in n and "stmatrix" in n for n in notes)
    assert any("store C_epilogue -> C: TMA store" in n for n in notes), notes
    text = str(lowered)
    assert "tl::ptx_stmatrix_x4<" in text and "tl::tma_store_2d" in text
    tail = text.split("tl::ptx_stmatrix_x4")[1]
    fence = tail.index("tl::fence_proxy_async_shared")
    bar = tail.index("tl::named_barrier_sync", fence)
    assert fence < bar < tail.index("tl::tma_store_2d", bar) < tail.index("tl::tma_store_commit")
    assert tail.index("tl::tma_store_commit") < tail.index("tl::tma_store_wait_read<0>")
    _close(got, want, dtype)


def test_epilogue_on_by_default():
    func = gemm(256, 256, 256)
    assert any("staged in C_epilogue" in n for n in _notes(pipeline.lower(func, SM90A))), _notes(
        pipeline.lower(func, SM90A)
    )


def test_default_stages_only_16_bit_outputs():
    """Unset, the option stages float16/bfloat16 outputs (the stmatrix path run on the
    H200); a float32 output keeps its register stores unless the option says True."""
    func = gemm(128, 512, 128, bM=64, bN=256, bK=32, stages=2, out="float32")
    notes = _notes(pipeline.lower(func, SM90A))
    assert any("by default only 16-bit outputs" in n for n in notes), notes
    assert any("staged in C_epilogue" in n for n in _notes(pipeline.lower(func, SM90A, EPILOGUE)))


def test_epilogue_off_keeps_register_stores():
    func = gemm(200, 328, 136)
    lowered, got, want = _emulated(func, 200, 328, 136, "float16", NO_EPILOGUE)
    text = str(lowered)
    assert "tma_store" not in text and "stmatrix" not in text
    assert not any("epilogue" in n for n in _notes(lowered))
    _close(got, want, "float16")


def test_staging_reuses_a_stage_buffer():
    """A 128x128 half tile (32 KB) fits in A's 3 x 16 KB stages: no new shared memory;
    a consumer barrier precedes the staging writes (other warpgroups' last wgmmas)."""
    func = gemm(256, 256, 256)
    off = pipeline.lower(func, SM90A, NO_EPILOGUE)
    on = pipeline.lower(func, SM90A, EPILOGUE)
    assert any("reusing the stage buffer A_s_mb" in n for n in _notes(on)), _notes(on)
    total = lambda f: max(o + s for o, s in dict(f.attrs["tl.shared_memory"]).values())  # noqa: E731
    assert total(on) == total(off)
    consumer = str(on).split("tl::wgmma_wait<0>")[1]
    assert consumer.index("tl::named_barrier_sync") < consumer.index("tl::ptx_stmatrix")


def test_staging_allocates_when_no_stage_buffer_is_large_enough():
    """Two stages of 64x32 tiles cannot hold a 64x256 float32 tile: a new staging tile."""
    func = gemm(128, 512, 128, bM=64, bN=256, bK=32, stages=2, out="float32")
    on = pipeline.lower(func, SM90A, EPILOGUE)
    notes = _notes(on)
    assert any("C_epilogue (65536 bytes, allocated" in n for n in notes), notes
    assert "C_epilogue" in dict(on.attrs["tl.shared_memory"])


def test_float32_output_staged_without_stmatrix_emulated():
    """A float32 C: no stmatrix (16-bit only); one 8-byte store per register pair into the
    swizzled tile, then the TMA store; exact against float64 with integer inputs."""
    M, N, K = 136, 200, 72
    func = gemm(M, N, K, bM=64, bN=64, out="float32")
    lowered = pipeline.lower(func, SM90A, EPILOGUE)
    text = str(lowered)
    assert "stmatrix" not in text and "tl::tma_store_2d" in text
    assert "tl::st_shared_pair<float>" in text
    assert any("16 paired stores per thread" in n for n in _notes(lowered)), _notes(lowered)
    rng = np.random.default_rng(2)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_rs(lowered, a, b, c, mode="late_writes")
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_attention_epilogue_rank4_emulated():
    """FlashAttention (GQA example): ``T.copy(acc_o, Output[b, rows, h, :])`` into a 4-d
    tensor is staged in the K stage buffer and stored through a rank-4 map; a tail in the
    sequence (192 rows, blocks of 128); float64 reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _attention, _example

    fa = _example("flash_attention/example_gqa_fwd_bshd.py").flashattn
    B, H, S, D = 1, 2, 192, 64
    tir = fa.get_tir(B, H, S, D, False, groups=1, block_M=128, block_N=64, num_stages=2, threads=256)  # fmt: skip
    f = pipeline.lower(tir, SM90A, EPILOGUE)
    notes = _notes(f)
    assert any("reusing the stage buffer K_shared_mb); 4 stmatrix.x4" in n for n in notes), notes
    assert "tl::tma_store_4d" in str(f)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    arrays, _ = emulate_rs(f, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(arrays[3], _attention(q, k, v, False), rtol=1e-2, atol=2e-3)


# --------------------------------------------------------------- user's shared stores
@pytest.mark.parametrize("configs", [NO_EPILOGUE, {**TMA, **NO_EPILOGUE}, None])
def test_user_shared_epilogue_becomes_a_tma_store(configs):
    """``T.copy(C_s, C[...])`` in a warp-specialized kernel (TMA on by default there) or
    with TMA forced: a TMA store, no pass config needed; emulated with tails. By default
    the pair ``T.copy(C_f, C_s); T.copy(C_s, C[...])`` (row-major ``C_s``) is staged like
    ``T.copy(C_f, C[...])`` instead (swizzled tile, stmatrix, TMA store)."""
    M, N, K = 200, 328, 136
    func = gemm_shared_epilogue(M, N, K)
    lowered, got, want = _emulated(func, M, N, K, "float16", configs)
    notes = _notes(lowered)
    if configs is None:
        assert any("stmatrix" in n and "in place of C_s" in n for n in notes), notes
        assert any("store C_epilogue -> C: TMA store" in n for n in notes), notes
    else:
        assert any("store C_s -> C: TMA store" in n for n in notes), notes
    _close(got, want, "float16")


def test_no_tma_store_without_tma():
    func = gemm_shared_epilogue(256, 256, 256)
    for configs, arch in (({"tl.disable_tma_lower": True}, "sm_90a"), (None, "sm_80")):
        f = pipeline.lower(func, {"kind": "cuda", "arch": arch}, configs)
        assert "tma_store" not in str(f) and not any("store C_s" in n for n in _notes(f))


def _copy_kernel(M, N, shape, dtype="float16", row_major=False):
    """global -> shared -> global with TMA forced (no loop, no warp specialization)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, shape[1]), T.ceildiv(M, shape[0]), threads=128) as (bx, by):
            S = T.alloc_shared(shape, dtype)
            T.copy(X[by * shape[0], bx * shape[1]], S)
            T.copy(S, Y[by * shape[0], bx * shape[1]])

    return main


def test_plain_kernel_tail_store_emulated():
    """Row-major tile, tails in both axes: boxes reaching past the tensor are clipped (Y
    outside the copied region stays as it was: nothing is written out of bounds)."""
    M, N = 100, 72
    func = _copy_kernel(M, N, (64, 64))
    f = pipeline.lower(func, SM90A, TMA)
    assert any("store S -> Y: TMA store, 1 box(es) of 64x64, swizzle NONE" in n for n in _notes(f))
    from tilelang.testing.cuda_emulator import emulate

    x = np.random.default_rng(1).standard_normal((M, N)).astype(np.float16)
    y = np.zeros((M, N), np.float16)
    emulate(f, x, y)
    np.testing.assert_array_equal(y, x)


def test_fallback_reason_for_unaligned_rows():
    """N = 100 halves: 200-byte rows are no 16-byte multiple: the thread copy, and why."""
    func = _copy_kernel(64, 100, (64, 32))
    f = pipeline.lower(func, SM90A, TMA)
    notes = _notes(f)
    assert any("store S -> Y: thread copy (global byte stride" in n for n in notes), notes
    assert "tma_store" not in str(f)


def test_fallback_reasons_for_layout_and_opt_out():
    """A padded shared layout has no box form; ``T.copy(..., disable_tma=True)`` opts out:
    both keep the thread copy (and the emulated copy is exact), with the reason noted."""
    from tilelang.layout.swizzle import make_padded_layout
    from tilelang.testing.cuda_emulator import emulate

    @T.prim_func
    def main(X: T.Tensor((96, 64), "float16"), Y: T.Tensor((96, 64), "float16"), Z: T.Tensor((96, 64), "float16")):  # fmt: skip
        with T.Kernel(2, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            U = T.alloc_shared((64, 64), "float16")
            T.annotate_layout({S: make_padded_layout(S)})
            T.copy(X[bx * 64, 0], S)
            T.copy(S, Y[bx * 64, 0])
            T.copy(X[bx * 64, 0], U)
            T.copy(U, Z[bx * 64, 0], disable_tma=True)

    f = pipeline.lower(main, SM90A, TMA)
    notes = _notes(f)
    assert any("store S -> Y: thread copy (no TMA box/swizzle" in n for n in notes), notes
    assert any("store U -> Z: thread copy (T.copy(..., disable_tma=True))" in n for n in notes)
    assert "tma_store" not in str(f)
    x = np.random.default_rng(4).standard_normal((96, 64)).astype(np.float16)
    y, z = np.zeros_like(x), np.zeros_like(x)
    emulate(f, x, y, z)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(z, x)


def test_emulator_catches_a_missing_wait(monkeypatch):
    """Without ``wait_group.read`` the block ends while the store may still read shared
    memory: the emulator refuses it."""
    from tilelang.backends.cuda.passes import tma_store
    from tilelang.testing.cuda_emulator import EmulationError, emulate

    real = tma_store._call
    monkeypatch.setattr(
        tma_store,
        "_call",
        lambda name, *a: real("tl::tma_store_commit" if "wait_read" in name else name, *a),
    )
    f = pipeline.lower(_copy_kernel(64, 64, (64, 64)), SM90A, TMA)
    x = np.ones((64, 64), np.float16)
    with pytest.raises(EmulationError, match="may still read shared memory"):
        emulate(f, x, np.zeros_like(x))


# ------------------------------------------------------------------- source and SASS
def test_generated_source_has_bulk_store_and_fence():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    art = pipeline.build(gemm(200, 328, 136), SM90A, EPILOGUE, compiler="nvcc")
    src = art.kernel_source
    assert "const __grid_constant__ CUtensorMap C_tmap" in src
    assert "tl::tma_store_2d(" in src and "tl::fence_proxy_async_shared()" in src
    assert "tl::ptx_stmatrix_x4<half_t>(" in src


@pytest.mark.parametrize(
    "dtype,out,store",
    [("float16", None, "STSM"), ("bfloat16", None, "STSM"), ("float16", "float32", "STS.64")],
)
def test_sass_has_utmastg(dtype, out, store):
    """The staged epilogue's SASS: stmatrix (STSM) or 8-byte shared stores, the proxy fence,
    the TMA store with its commit (UTMACMDFLUSH) and wait (DEPBAR), no global stores."""
    if shutil.which("nvcc") is None or _tool("cuobjdump") is None:
        pytest.skip("nvcc / cuobjdump not installed")
    func = gemm(1000, 1000, 1000, bM=64, bN=64, dtype=dtype, out=out)
    sass = _sass(pipeline.build(func, SM90A, EPILOGUE, compiler="nvcc"))
    global_store = re.compile(r"\sSTG\.")
    assert "UTMASTG" in sass and store in sass and "UTMALDG" in sass
    assert not global_store.search(sass)
    assert "FENCE.VIEW.ASYNC.S" in sass and "UTMACMDFLUSH" in sass
    off = _sass(pipeline.build(func, SM90A, NO_EPILOGUE, compiler="nvcc"))
    assert "UTMASTG" not in off and "STSM" not in off and global_store.search(off)


# ------------------------------------------------------------------------------- GPU
def _gpu_gemm(func, M, N, K, dtype, configs):
    import torch

    from tilelang.backends.cuda import load_kernel

    tdt = getattr(torch, dtype)
    a = torch.randn((M, K), device="cuda", dtype=tdt)
    b = torch.randn((K, N), device="cuda", dtype=tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    load_kernel(pipeline.build(func, {"kind": "cuda"}, configs))(a, b, c)
    torch.cuda.synchronize()
    return c.double(), a.double() @ b.double()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("epilogue", [False, True])
@pytest.mark.parametrize(
    "M,N,K,bM,bN,threads",
    [
        (200, 328, 136, 128, 128, 128),
        (1000, 1000, 1000, 128, 256, 256),
        (4096, 4096, 4096, 128, 256, 256),
    ],
)
def test_gpu_gemm_epilogue(M, N, K, bM, bN, threads, epilogue, dtype):
    """The README GEMM with and without the staged TMA-store epilogue, tails included."""
    func = gemm(M, N, K, bM=bM, bN=bN, threads=threads, dtype=dtype)
    got, want = _gpu_gemm(func, M, N, K, dtype, EPILOGUE if epilogue else NO_EPILOGUE)
    assert not got.isnan().any()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    err = (got - want).abs().max().item() / want.abs().max().item()
    assert err < tol, err


@pytest.mark.cuda
@pytest.mark.parametrize("configs", [None, TMA])
def test_gpu_user_shared_epilogue(configs):
    got, want = _gpu_gemm(gemm_shared_epilogue(200, 328, 136), 200, 328, 136, "float16", configs)
    assert not got.isnan().any()
    assert (got - want).abs().max().item() / want.abs().max().item() < 4e-3


@pytest.mark.cuda
@pytest.mark.parametrize("configs", [NO_EPILOGUE, EPILOGUE])
@pytest.mark.parametrize("example", ["example_gqa_fwd_bshd.py", "example_mha_fwd_bshd.py"])
def test_gpu_attention_epilogue(example, configs):
    """FlashAttention with a tail in the sequence: the GQA example's fragment epilogue
    (staged with the pass config) and the MHA example's O_shared store (a TMA store in the
    warp-specialized kernel either way)."""
    import torch

    from tilelang.backends.cuda import load_kernel

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _example

    fa = _example(f"flash_attention/{example}").flashattn
    B, H, S, D = 2, 4, 448, 128
    tir = fa.get_tir(B, H, S, D, False, block_M=128, block_N=128, num_stages=2, threads=256)
    kernel = load_kernel(pipeline.build(tir, {"kind": "cuda"}, configs))
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    ref = ((qd @ kd.transpose(-1, -2) / D**0.5).softmax(-1) @ vd).transpose(1, 2)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
def test_gpu_plain_tail_store():
    import torch

    from tilelang.backends.cuda import load_kernel

    x = torch.randn((100, 72), device="cuda", dtype=torch.float16)
    y = torch.zeros_like(x)
    load_kernel(pipeline.build(_copy_kernel(100, 72, (64, 64)), {"kind": "cuda"}, TMA))(x, y)
    torch.cuda.synchronize()
    assert torch.equal(x, y)
