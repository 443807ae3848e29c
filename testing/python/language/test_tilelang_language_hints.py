"""T.__ldg and upstream's hints (T.disable_warp_group_reg_alloc, T.no_set_max_nreg,
T.annotate_min_blocks_per_sm, T.annotate_restrict_buffers, T.annotate_l2_hit_ratio,
T.func_attr): CPU results against numpy, the CUDA source uses ``__ldg(&...)``, carries
``__launch_bounds__(n, m)`` and drops ``__restrict__`` where asked, a warp-specialized GEMM
with T.no_set_max_nreg has no setmaxnreg, and the kernels build with nvcc for sm_80 / sm_90a;
GPU tests are marked cuda."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ldg = getattr(T, "__ldg")


def ldg_kernel(N, dtype):
    @T.prim_func
    def main(x: T.Tensor((N,), dtype), y: T.Tensor((N,), dtype)):
        T.func_attr({"tir.noalias": True})
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            T.disable_warp_group_reg_alloc()
            T.no_set_max_nreg()
            T.annotate_min_blocks_per_sm(2)
            i = bx * 32 + T.get_thread_binding()
            if i < N:
                y[i] = ldg(x[i]) * 3 + ldg(x[(i + 1) % N])

    return main


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_ldg_and_hints_cpu(dtype, rng):
    N = 77
    x = rng.standard_normal(N) * 10
    xt = torch.from_numpy(x).to(getattr(torch, dtype))
    y = torch.zeros_like(xt)
    tilelang.compile(ldg_kernel(N, dtype), target="cpu")(xt, y)
    xd = xt.double().numpy()
    ref = xd * 3 + np.roll(xd, -1)
    tol = 1e-6
    if dtype == "float16":  # the kernel rounds x * 3 to float16 before adding
        ref = (xt * 3).double().numpy() + np.roll(xd, -1)
        tol = 4e-2
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=tol, atol=tol)


def test_errors():
    with pytest.raises(tilelang.TileLangError, match="one element of a global tensor"):

        @T.prim_func
        def main(x: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                x[0] = ldg(1.0)

    with pytest.raises(tilelang.TileLangError, match="is a shared.dyn tensor, not global"):

        @T.prim_func
        def main2(x: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                s = T.alloc_shared((4,), "float32")
                x[0] = ldg(s[0])

    with pytest.raises(tilelang.TileLangError, match="n must be a positive int"):

        @T.prim_func
        def main3(x: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                T.annotate_min_blocks_per_sm(0)


def test_cuda_source_kernel_is_a_clear_error():
    with pytest.raises(tilelang.TileLangError, match="`T.CUDASourceCodeKernel` is not supported"):

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            T.CUDASourceCodeKernel(1, threads=4, source_code_or_path="", entry_name="k")


@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds_with_ldg(target):
    for dtype in ("float32", "float16", "int32"):
        art = cuda_pipeline.build(ldg_kernel(77, dtype), target, compiler="nvcc")
        assert art.device_binary
        assert re.search(r"__ldg\(\(?&", art.kernel_source)


def aliasing_kernel(N):
    @T.prim_func
    def main(x: T.Tensor((N,), "float32"), y: T.Tensor((N,), "float32")):
        T.annotate_restrict_buffers(x, y)
        T.annotate_l2_hit_ratio({x: 0.5})
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            T.annotate_min_blocks_per_sm(3)
            for i in T.Parallel(64):
                if bx * 64 + i + 1 < N:
                    y[bx * 64 + i] = x[bx * 64 + i + 1] * 2.0

    return main


def test_hint_attributes_and_source():
    func = aliasing_kernel(100)
    assert dict(func.attrs)["tl.non_restrict_params"] == ["x", "y"]
    src = cuda_pipeline.lower(func, SM80)  # the attributes survive lowering
    assert int(src.attrs["tl.min_blocks_per_sm"]) == 3


@needs_nvcc
def test_source_hints_in_cuda():
    art = cuda_pipeline.build(aliasing_kernel(100), SM80, compiler="nvcc")
    sig = [ln for ln in art.kernel_source.splitlines() if "__global__" in ln][0]
    assert "__launch_bounds__(64, 3)" in sig and "__restrict__" not in sig
    plain = cuda_pipeline.build(ldg_kernel(77, "float32"), SM80, compiler="nvcc")
    assert "__restrict__" in plain.kernel_source  # the default keeps it


@needs_nvcc
def test_no_set_max_nreg_on_a_warp_specialized_gemm():
    sys_path = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "backends" / "cuda")
    import sys

    sys.path.insert(0, sys_path)
    from gemm_programs import readme_gemm

    def build(hint):
        func = readme_gemm(512, 512, 256, bM=128, bN=256, bK=64, threads=256)
        if hint:
            func = func.with_attr("tl.no_set_max_nreg", True)
        src = cuda_pipeline.build(func, SM90, compiler="nvcc").kernel_source
        return src[src.index('extern "C" __global__') :]  # the kernel, not the headers

    assert "tl::set_max_nreg<" in build(False)
    assert "tl::set_max_nreg<" not in build(True)


def test_hint_errors():
    with pytest.raises(tilelang.TraceError, match="kernel tensors"):

        @T.prim_func
        def not_tensor(x: T.Tensor((8,), "float32")):
            T.annotate_restrict_buffers(3)
            with T.Kernel(1, threads=32):
                x[0] = 1.0

    with pytest.raises(tilelang.TraceError, match=r"must be in \[0, 1\]"):

        @T.prim_func
        def bad_ratio(x: T.Tensor((8,), "float32")):
            T.annotate_l2_hit_ratio({x: 2})
            with T.Kernel(1, threads=32):
                x[0] = 1.0


@pytest.mark.cuda
def test_ldg_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.from_numpy(rng.standard_normal(77).astype(np.float32))
    y = torch.zeros(77, device="cuda")
    tilelang.compile(ldg_kernel(77, "float32"), target="cuda")(x.cuda(), y)
    torch.testing.assert_close(y.cpu(), x * 3 + torch.roll(x, -1))
