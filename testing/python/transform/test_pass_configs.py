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
    assert options == {
        "fast_math": False,
        "device_flags": ["-DFOO=1", "-lineinfo"],
        "disable_wgmma": True,
    }
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
