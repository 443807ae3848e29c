"""``pass_configs`` keys: upstream's spellings are accepted; the CUDA backend honours fast
math, extra device flags and ``TL_DISABLE_WGMMA``; unsupported values are refused."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import PassConfigKey
from tilelang.engine.pass_config import build_options

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def exp2_kernel(N=64):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            for i in T.Parallel(N):
                B[i] = T.exp2(A[i])

    return main


def gemm_kernel(M=128, N=128, K=64):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_l = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_l, clear_accum=True)
            T.copy(C_l, C)

    return main


UPSTREAM_KEYS = [
    "TL_DISABLE_TMA_LOWER",
    "TL_DISABLE_WARP_SPECIALIZED",
    "TL_ENABLE_FAST_MATH",
    "TL_DISABLE_SAFE_MEMORY_ACCESS",
    "TL_DISABLE_THREAD_STORAGE_SYNC",
    "TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE",
    "TL_DISABLE_VECTORIZE_256",
    "TIR_DISABLE_VECTORIZE",
]


@pytest.mark.parametrize("name", UPSTREAM_KEYS)
def test_upstream_keys_compile_on_cpu(name):
    """A program written for upstream with these keys runs unchanged (here: on the CPU)."""
    key = getattr(tilelang.PassConfigKey, name)
    kernel = tilelang.compile(exp2_kernel(), out_idx=[-1], target="cpu", pass_configs={key: True})
    a = torch.randn(64)
    torch.testing.assert_close(kernel(a), torch.exp2(a), rtol=1e-5, atol=1e-6)


def test_build_options_read_the_keys():
    options = build_options(
        {
            PassConfigKey.TL_ENABLE_FAST_MATH: False,
            PassConfigKey.TL_DEVICE_COMPILE_FLAGS: "-DFOO=1 -lineinfo",
            PassConfigKey.TL_DISABLE_WGMMA: True,
        }
    )
    assert options["fast_math"] is False
    assert options["device_flags"] == ["-DFOO=1", "-lineinfo"]
    assert options["disable_wgmma"] is True
    defaults = build_options(None)
    assert {k: defaults[k] for k in ("ldmatrix", "gemm_scalar", "mma_split", "copy_schedule")} == {
        "ldmatrix": True,
        "gemm_scalar": False,
        "mma_split": True,
        "copy_schedule": "auto",
    }
    assert defaults["wgmma_in_flight"] is True and defaults["wgmma_copies_after"] is False
    assert build_options({"tl.disable_fast_math": True})["fast_math"] is False
    assert build_options(None)["fast_math"] is None


def test_unsupported_index_bitwidth_is_refused():
    with pytest.raises(ValueError, match="tl.config_index_bitwidth"):
        tilelang.compile(
            exp2_kernel(), target="cpu", pass_configs={PassConfigKey.TL_CONFIG_INDEX_BITWIDTH: 64}
        )


def test_bad_device_flags_are_refused():
    with pytest.raises(ValueError, match="tl.device_compile_flags"):
        build_options({PassConfigKey.TL_DEVICE_COMPILE_FLAGS: 3})


@needs_nvcc
def test_cuda_fast_math_and_device_flags():
    from tilelang.backends.cuda import pipeline

    target = {"kind": "cuda", "arch": "sm_90a"}
    default = pipeline.build(exp2_kernel(), target, compiler="nvcc")
    precise = pipeline.build(
        exp2_kernel(),
        target,
        pass_configs={
            PassConfigKey.TL_ENABLE_FAST_MATH: False,
            PassConfigKey.TL_DEVICE_COMPILE_FLAGS: ["-DTILELANG_TEST_FLAG=1"],
        },
        compiler="nvcc",
    )
    assert default.meta["fast_math"] is True and precise.meta["fast_math"] is False
    assert "-DTILELANG_TEST_FLAG=1" in precise.meta["compile_flags"]


@needs_nvcc
def test_cuda_disable_wgmma_selects_mma_sync():
    from tilelang.backends.cuda import pipeline

    target = {"kind": "cuda", "arch": "sm_90a"}
    wgmma = pipeline.build(gemm_kernel(), target, compiler="nvcc").get_kernel_source()
    mma = pipeline.build(
        gemm_kernel(), target, pass_configs={PassConfigKey.TL_DISABLE_WGMMA: True}, compiler="nvcc"
    )
    assert "wgmma" in wgmma
    assert "wgmma" not in mma.get_kernel_source() and "mma_m16n8k16" in mma.get_kernel_source()
    assert mma.meta["arch"] == "sm_90a"


def test_unknown_copy_schedule_is_refused():
    with pytest.raises(ValueError, match="tl.pipeline_copy_schedule"):
        build_options({PassConfigKey.TL_PIPELINE_COPY_SCHEDULE: "eager"})


# The code-generation choices that used to be module globals (pipeline_planning.WGMMA_IN_FLIGHT,
# WGMMA_COPIES_AFTER, MMA_SPLIT, COPY_SCHEDULE, copy_ldmatrix_cuda.ENABLED) are pass configs:
# flipping one must give a different kernel, never the one cached for the other setting.
SWITCHES = [
    (PassConfigKey.TL_DISABLE_LDMATRIX, True, "sm_80"),
    (PassConfigKey.TL_MMA_SPLIT_PIPELINE, False, "sm_80"),
    (PassConfigKey.TL_WGMMA_IN_FLIGHT, False, "sm_90a"),
    (PassConfigKey.TL_WGMMA_COPIES_AFTER, True, "sm_90a"),
    (PassConfigKey.TL_PIPELINE_COPY_SCHEDULE, "leading", "sm_90a"),
    (PassConfigKey.TL_WS_RELEASE_PER_WARP, True, "sm_90a"),
]


def _pipelined_gemm(M=256, N=256, K=256, bM=128, bN=128, bK=32, stages=3):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def _flash_like(seq=256, dim=64, bM=64, bN=64):
    """A loop whose second copy (V) comes after a gemm: the copy schedule decides its fate."""

    @T.prim_func
    def main(
        Q: T.Tensor((seq, dim), "float16"),
        K: T.Tensor((seq, dim), "float16"),
        V: T.Tensor((seq, dim), "float16"),
        O: T.Tensor((seq, dim), "float32"),
    ):
        with T.Kernel(T.ceildiv(seq, bM), threads=128) as bx:
            Q_s = T.alloc_shared((bM, dim), "float16")
            K_s = T.alloc_shared((bN, dim), "float16")
            V_s = T.alloc_shared((bN, dim), "float16")
            S_f = T.alloc_fragment((bM, bN), "float32")
            S_h = T.alloc_fragment((bM, bN), "float16")
            O_f = T.alloc_fragment((bM, dim), "float32")
            T.copy(Q[bx * bM, 0], Q_s)
            T.clear(O_f)
            for k in T.Pipelined(T.ceildiv(seq, bN), num_stages=2):
                T.copy(K[k * bN, 0], K_s)
                T.clear(S_f)
                T.gemm(Q_s, K_s, S_f, transpose_B=True)
                T.copy(S_f, S_h)
                T.copy(V[k * bN, 0], V_s)
                T.gemm(S_h, V_s, O_f)
            T.copy(O_f, O[bx * bM, 0])

    return main


@pytest.mark.parametrize("key,value,arch", SWITCHES, ids=[s[0].name for s in SWITCHES])
def test_switch_changes_the_lowered_kernel_and_the_cache_key(key, value, arch):
    from tilelang.backends.cuda import pipeline
    from tilelang.cache import cache_key

    func = _flash_like() if key is PassConfigKey.TL_PIPELINE_COPY_SCHEDULE else _pipelined_gemm()
    target = {"kind": "cuda", "arch": arch}
    base = pipeline.lower(func, target).script()
    flipped = pipeline.lower(func, target, {key: value}).script()
    assert base != flipped, f"{key.value}={value!r} changed nothing in the lowered kernel"
    options = dict(out_idx=None, target=target, execution_backend="auto", compile_flags=None)
    assert cache_key(func, pass_configs={}, **options) != cache_key(
        func, pass_configs={key: value}, **options
    )


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_flipped_switch_is_not_served_from_the_cache(tmp_path, monkeypatch):
    """Compile, flip a switch, compile again: a new kernel (also after a disk reload)."""
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    func = _pipelined_gemm()
    target = "cuda -arch=sm_80"
    flip = {PassConfigKey.TL_MMA_SPLIT_PIPELINE: False}

    def kernel_body(pass_configs=None):
        src = tilelang.compile(func, target=target, pass_configs=pass_configs).get_kernel_source()
        return src[src.index('extern "C"') :]  # the kernel, not the headers' comments

    a = kernel_body()
    b = kernel_body(flip)
    assert a != b
    assert kernel_body() == a and kernel_body(flip) == b


def test_every_key_is_documented():
    """docs/language.md names every key: the effective ones in their own rows, the keys
    accepted only for upstream compatibility (``COMPAT_ONLY_KEYS``) in the row saying so."""
    from pathlib import Path

    from tilelang.engine.pass_config import COMPAT_ONLY_KEYS

    doc = (Path(__file__).resolve().parents[3] / "docs" / "language.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `") or "upstream keys" in line]
    compat_row = next(line for line in rows if line.startswith("| upstream keys without effect"))
    for key in PassConfigKey:
        if key.value in COMPAT_ONLY_KEYS:
            assert f"`{key.value}`" in compat_row, key.value
        else:
            assert any(line.startswith(f"| `{key.value}`") for line in rows) or (
                f"`{key.value}`" in doc
            ), f"{key.value} is not documented in docs/language.md"
