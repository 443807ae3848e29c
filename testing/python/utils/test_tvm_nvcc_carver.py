"""tilelang.tvm (TIRx under upstream's name), tilelang.contrib.nvcc, tilelang.carver.arch and
its driver (without a GPU: RuntimeError; with fake device properties: the values), par_compile."""

from __future__ import annotations

import shutil
import types
import warnings

import numpy as np
import pytest
import torch
import tvm_tirx

import tilelang
import tilelang.language as T
from tilelang import tvm
from tilelang.carver import arch
from tilelang.carver.arch import driver
from tilelang.contrib import nvcc

HAS_GPU = torch.cuda.is_available()


# -- tilelang.tvm ---------------------------------------------------------------------------
def test_tvm_names_are_tirx_objects():
    c = tvm.tirx.const(0xF, "uint32")
    assert str(c.ty) == "uint32" and c.value == 15
    assert isinstance(c, tvm.tirx.PrimExpr)
    assert tvm.IRModule is tvm_tirx.IRModule and tvm.target.Target is tvm_tirx.target.Target
    assert tvm.tirx.floordiv is tvm_tirx.tirx.floordiv
    assert tvm.DataType("float16").bits == 16 and tvm.DataType("int8x4").lanes == 4
    assert tilelang.DataType is tvm.DataType


def test_tvm_missing_names_explain_themselves():
    with pytest.raises(AttributeError, match=r"tvm\.arith has no TIRx counterpart"):
        tvm.arith  # noqa: B018
    with pytest.raises(AttributeError, match=r"tvm\.tirx\.stmt_functor has no TIRx counterpart"):
        tvm.tirx.stmt_functor  # noqa: B018


def test_tvm_const_in_a_kernel_like_upstream_dequantize():
    """Upstream's quantization helpers build masks with tvm.tirx.const inside kernels."""

    def extract(nbit: int, val: tvm.tirx.PrimExpr, pos: tvm.tirx.PrimExpr):
        mask = tvm.tirx.const((1 << nbit) - 1, "uint32")
        return (val >> (pos * nbit).astype("uint32")) & mask

    @T.prim_func
    def unpack(A: T.Tensor((16,), "uint32"), B: T.Tensor((16, 8), "uint32")):
        with T.Kernel(1, threads=16) as _:
            for i, j in T.grid(16, 8):
                B[i, j] = extract(4, A[i], j)

    kernel = tilelang.compile(unpack, out_idx=-1, target="cpu")
    a = np.random.default_rng(0).integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32)
    out = kernel(torch.from_numpy(a.view(np.int32)).view(torch.uint32)).numpy().astype(np.int64)
    ref = (a[:, None].astype(np.int64) >> (4 * np.arange(8))) & 0xF
    np.testing.assert_array_equal(out, ref)


# -- tilelang.contrib.nvcc -----------------------------------------------------------------
def test_parse_compute_version():
    assert nvcc.parse_compute_version("8.6") == (8, 6)
    assert nvcc.parse_compute_version("10.0") == (10, 0)
    for bad in ("86", "x.y", None):
        with pytest.raises(RuntimeError, match="Compute version parsing error"):
            nvcc.parse_compute_version(bad)


@pytest.mark.parametrize(
    "target, version",
    [
        ({"kind": "cuda", "arch": "sm_90a"}, "9.0"),
        ({"kind": "cuda", "arch": "sm_80"}, "8.0"),
        ("cuda -arch=sm_89", "8.9"),
        ("cuda -arch=sm_100a", "10.0"),
        (types.SimpleNamespace(attrs={"arch": "sm_120"}), "12.0"),
    ],
)
def test_target_compute_version(target, version):
    assert nvcc.get_target_compute_version(target) == version


def test_target_compute_version_errors():
    with pytest.raises(ValueError, match="unsupported CUDA arch 'gfx942'"):
        nvcc.get_target_compute_version({"kind": "cuda", "arch": "gfx942"})
    if not HAS_GPU:
        with pytest.raises(ValueError, match="No CUDA architecture was specified or GPU detected"):
            nvcc.get_target_compute_version()


def test_capability_predicates_match_their_definitions():
    versions = [f"{m}.{n}" for m in range(5, 13) for n in range(10)]
    for v in versions:
        major, minor = (int(x) for x in v.split("."))
        assert nvcc.have_fp16(v) == ((major, minor) >= (5, 3)), v
        assert nvcc.have_int8(v) == (major >= 6), v
        assert nvcc.have_bf16(v) == (major >= 8), v
        assert nvcc.have_fp8(v) == ((major, minor) >= (8, 9)), v
        assert nvcc.have_tensorcore(v) == (major >= 7), v
        arch_num = nvcc.get_target_arch(v)
        assert arch_num == f"{10 * major + minor}" + ("a" if major >= 9 else ""), v
        target = {"kind": "cuda", "arch": f"sm_{10 * major + minor}"}
        assert nvcc.have_tma(target) == (major >= 9) and nvcc.is_hopper(target) == (v == "9.0")
    assert nvcc.have_tma({"kind": "cpu"}) is False
    assert nvcc.get_target_arch((9, 0)) == "90a"


def test_have_tensorcore_without_arch_warns():
    if HAS_GPU:
        pytest.skip("GPU 0 answers")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert nvcc.have_tensorcore() is False
    assert "no CUDA arch given" in str(caught[0].message)


needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not nvcc.CUDA_HOME, reason="needs nvcc"
)


@needs_nvcc
def test_compile_cuda_to_ptx():
    code = 'extern "C" __global__ void add_one(float* a) { a[threadIdx.x] += 1.0f; }'
    ptx = nvcc.compile_cuda(code, "ptx", arch="sm_80").decode()
    assert ".target sm_80" in ptx and ".entry add_one" in ptx
    assert ".entry add_one" in nvcc.get_ptx_from_source(code, ["-arch=sm_90a"])
    assert nvcc.get_cuda_version() >= (11, 0)
    with pytest.raises(RuntimeError, match="nvcc failed"):
        nvcc.compile_cuda("this is not C++", arch="sm_80")
    with pytest.raises(ValueError, match="target_format must be"):
        nvcc.compile_cuda(code, "exe", arch="sm_80")


# -- tilelang.carver.arch ------------------------------------------------------------------
def _fake_props(**overrides):
    props = dict(
        name="Fake H200",
        multi_processor_count=132,
        shared_memory_per_block=49152,
        shared_memory_per_multiprocessor=233472,
        major=9,
        minor=0,
        warp_size=32,
        L2_cache_size=60 * 2**20,
    )
    props.update(overrides)
    return types.SimpleNamespace(**props)


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU behaviour")
def test_driver_without_gpu_raises_clearly():
    assert driver.get_cuda_device_properties() is None and driver.get_device_name() is None
    for query in (
        driver.get_num_sms,
        driver.get_shared_memory_per_block,
        driver.get_max_dynamic_shared_size_bytes,
        driver.get_registers_per_block,
    ):
        with pytest.raises(RuntimeError, match="no CUDA device is available"):
            query()
    with pytest.raises(RuntimeError, match="Cannot find cuda device 0"):
        arch.CUDA("cuda")
    assert isinstance(arch.auto_infer_current_arch(), arch.CPU)


def test_driver_reads_device_properties(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: _fake_props())
    assert driver.get_num_sms() == 132 and driver.get_device_name() == "Fake H200"
    assert driver.get_shared_memory_per_block() == 49152
    assert driver.get_shared_memory_per_block(format="kb") == 48
    assert driver.get_max_dynamic_shared_size_bytes(format="kb") == 228
    with pytest.raises(ValueError, match="format must be one of"):
        driver.get_shared_memory_per_block(format="KiB")


def test_cuda_device_model(monkeypatch):
    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: _fake_props())
    dev = arch.CUDA({"kind": "cuda", "arch": "sm_90a"})
    assert (dev.sm_version, dev.compute_max_core, dev.smem_cap, dev.max_smem_usage) == (
        90,
        132,
        49152,
        98304,
    )
    assert dev.platform == "CUDA" and dev.compute_capability == "90" and dev.warp_size == 32
    assert dev.l2_cache_size_bytes == 60 * 2**20 and dev.get_avaliable_tensorintrin_shapes() == [
        [16, 16],
        [16, 16],
    ]
    assert arch.is_hopper_arch(dev) and arch.has_mma_support(dev) and not arch.is_ampere_arch(dev)
    assert arch.is_tensorcore_supported_precision("float8_e4m3", "float32", dev)
    assert not arch.is_tensorcore_supported_precision("int4", "int32", dev)
    ampere = arch.CUDA("cuda -arch=sm_80")
    assert arch.is_ampere_arch(ampere) and arch.is_tensorcore_supported_precision(
        "int4", "int32", ampere
    )
    assert isinstance(arch.get_arch("cuda"), arch.CUDA) and isinstance(
        arch.get_arch("llvm"), arch.CPU
    )
    with pytest.raises(ValueError, match="must be a CUDA target"):
        arch.CUDA("cpu")


def test_arch_helpers():
    assert [arch.check_sm_version(a) for a in ("sm_90a", "sm_80", "90", "sm_sm_90", "gfx942")] == [
        90,
        80,
        90,
        -1,
        -1,
    ]
    with pytest.raises(RuntimeError, match="tilelang has no ROCm backend"):
        arch.CDNA("hip")
    with pytest.raises(ValueError, match="Unsupported architecture"):
        arch.is_tensorcore_supported_precision("float16", "float32", arch.CPU())


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_driver_on_gpu_matches_torch():
    props = torch.cuda.get_device_properties(0)
    assert driver.get_num_sms() == props.multi_processor_count
    assert driver.get_registers_per_block() == 65536
    dev = arch.auto_infer_current_arch()
    assert isinstance(dev, arch.CUDA) and dev.compute_max_core == props.multi_processor_count


# -- par_compile ---------------------------------------------------------------------------
def scale(n, factor):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as _:
            for i in T.Parallel(n):
                B[i] = A[i] * factor

    return main


def test_par_compile_keeps_order_and_reports_errors():
    funcs = [scale(32, f) for f in (2.0, 3.0, 5.0)]
    kernels = tilelang.par_compile(funcs, out_idx=-1, target="cpu", num_workers=2)
    x = torch.randn(32)
    for k, f in zip(kernels, (2.0, 3.0, 5.0)):
        torch.testing.assert_close(k(x), x * f)
    with pytest.warns(UserWarning, match="function 1 failed to compile"):
        got = tilelang.par_compile(
            [funcs[0], "not a function"], out_idx=-1, target="cpu", ignore_error=True
        )
    assert got[1] is None and got[0] is not None
    with pytest.raises(Exception):  # noqa: B017 - whatever tilelang.compile raises
        tilelang.par_compile(["not a function"], target="cpu")
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        tilelang.par_compile(funcs, num_workers=0)
