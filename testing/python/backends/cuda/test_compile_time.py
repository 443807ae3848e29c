"""Tests of the compile-time cuts of issue 11: compact CUDA source and tilelang's NVRTC driver.

* Compact source (``backends/cuda/compact_source.py``): ``T.unroll`` loops reach the device
  compiler as ``#pragma unroll`` loops and TIRx's device-side StmtSimplify is skipped. The
  compact and the TIRx-pipeline sources of the same kernels must compile to PTX with the
  same memory / tensor-core instruction counts and no local memory (CPU, needs nvcc).
* NVRTC driver (``backends/cuda/nvrtc.py``): its preamble, its dispatch from
  ``tvm_callback_cuda_compile``, and PTX equal to TIRx's driver (needs cuda-bindings).
* GPU (``@pytest.mark.cuda``): both pipelines give the same, correct GEMM results.
"""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_build_kernels import make_vadd
from tvm_tirx.script import tirx as T

import tilelang
import tilelang.language as T_tl
from tilelang.backends.cuda import build as cuda_build
from tilelang.backends.cuda import build_cuda
from tilelang.backends.cuda import direct_launch as cuda_direct_launch
from tilelang.backends.cuda import headers as cuda_headers
from tilelang.backends.cuda import nvrtc as cuda_nvrtc
from tilelang.backends.cuda.compact_source import COMPACT_SUFFIX, compact_pipeline
from tilelang.jit import clear_memory_cache

REPO = Path(__file__).resolve().parents[4]
HAVE_NVCC = shutil.which("nvcc") is not None and shutil.which("ptxas") is not None
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and (
    importlib.util.find_spec("cuda.bindings") is not None
)
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc/ptxas not on PATH")
needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC needs the cuda-bindings package")
TIRX_MARK = "// ---- end of tl_templates; TIRx-generated code follows ----\n"
# PTX opcodes whose number must not change between the compact and the TIRx source.
COUNTED = (
    "wgmma.mma_async",
    "mma.sync",
    "ldmatrix",
    "cp.async.cg",
    "cp.async.ca",
    "ld.global",
    "st.global",
    "ld.shared",
    "st.shared",
    "bar.sync",
    "ex2.approx",
    "shfl.sync",
)


def _generated(src):
    return src.split(TIRX_MARK, 1)[1] if TIRX_MARK in src else src


def make_unrolled_scale():
    """B[i] = 2 * A[i] for 32 threads x 16 values, the 16 in a ``T.unroll`` loop."""

    @T.function
    def unrolled_scale(A: T.Tensor((512,), T.float32), B: T.Tensor((512,), T.float32)):
        with T.launch_thread("threadIdx.x", 32) as tx:
            for i in T.unroll(0, 16):
                B[tx * 16 + i] = A[tx * 16 + i] * T.float32(2)

    return unrolled_scale


# --------------------------------------------------------------------------- kernels
def swizzled_gemm(M, N, K, bM=128, bN=256, bK=64, threads=256, stages=3, dtype="float16"):
    """benchmark/matmul_readme.py's program: the README GEMM plus T.use_swizzle(10)."""

    @T_tl.prim_func
    def main(
        A: T_tl.Tensor((M, K), dtype),
        B: T_tl.Tensor((K, N), dtype),
        C: T_tl.Tensor((M, N), dtype),
    ):
        with T_tl.Kernel(T_tl.ceildiv(N, bN), T_tl.ceildiv(M, bM), threads=threads) as (bx, by):
            A_shared = T_tl.alloc_shared((bM, bK), dtype)
            B_shared = T_tl.alloc_shared((bK, bN), dtype)
            C_local = T_tl.alloc_fragment((bM, bN), "float32")
            T_tl.use_swizzle(10)
            T_tl.clear(C_local)
            for k in T_tl.Pipelined(T_tl.ceildiv(K, bK), num_stages=stages):
                T_tl.copy(A[by * bM, k * bK], A_shared)
                T_tl.copy(B[k * bK, bx * bN], B_shared)
                T_tl.gemm(A_shared, B_shared, C_local)
            T_tl.copy(C_local, C[by * bM, bx * bN])

    return main


def flash_attention():
    sys.path.insert(0, str(REPO / "examples" / "flash_attention"))
    try:
        from example_mha_fwd_bshd import flashattn
    finally:
        sys.path.pop(0)
    return flashattn.get_tir(1, 2, 256, 64, False, block_M=64, block_N=64, num_stages=2)


KERNELS = {
    "gemm_wgmma_sm90a": (lambda: swizzled_gemm(512, 768, 256), [-1], "sm_90a"),
    "gemm_mma_sm80": (lambda: swizzled_gemm(256, 256, 128, 128, 128, 32, 128, 3), [-1], "sm_80"),
    "flash_attention_sm90a": (flash_attention, [3], "sm_90a"),
}


def _compile(name, compact, monkeypatch):
    make, out_idx, arch = KERNELS[name]
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    kernel = tilelang.compile(
        make(),
        out_idx=out_idx,
        target={"kind": "cuda", "arch": arch},
        pass_configs={"tl.compact_source": compact},
    )
    assert kernel.artifact.meta["compact"] is compact
    return kernel.artifact, arch


def _ptx_counts(source, arch, tmp_path, tag):
    cu, ptx = tmp_path / f"{tag}.cu", tmp_path / f"{tag}.ptx"
    cu.write_text(source)
    include = REPO / "tilelang" / "backends" / "cuda" / "include"
    cmd = ["nvcc", "-ptx", f"-arch={arch}", "--use_fast_math", f"-I{include}", "-o", ptx, cu]
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    text = ptx.read_text()
    ops = re.findall(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)", text, re.M)
    counts = {op: sum(1 for o in ops if o.startswith(op)) for op in COUNTED}
    counts["local"] = sum(1 for o in ops if ".local" in o)
    return counts


# --------------------------------------------------------------------------- compact source
def test_compact_pipeline_names_and_rejects_unknown():
    assert compact_pipeline() == "default" + COMPACT_SUFFIX
    assert compact_pipeline("default") == compact_pipeline("default")  # idempotent
    with pytest.raises(ValueError, match="no_such_pipeline"):
        compact_pipeline("no_such_pipeline")


@needs_nvcc
def test_device_functions_skip_stmt_simplify(monkeypatch):
    func, out_idx, arch = KERNELS["gemm_wgmma_sm90a"]
    counts = {}
    for compact in (True, False):
        lowered = tilelang.lower(
            func(),
            target={"kind": "cuda", "arch": arch},
            pass_configs={"tl.compact_source": compact},
        )
        names = lowered.names()
        counts[compact] = sum(1 for n in names if n.split("#")[0] == "tirx.StmtSimplify")
        assert "tirx.UnrollLoop" in names and "tirx.LowerIntrin" in names  # still observed
    # the lowering pipeline simplifies twice; TIRx's device finalization once more
    assert counts == {True: 2, False: 3}


@needs_nvcc
def test_unroll_loops_reach_the_device_compiler_as_pragma_loops():
    compact = build_cuda(make_unrolled_scale(), arch="sm_80", compiler="nvcc", compact=True)
    tirx = build_cuda(make_unrolled_scale(), arch="sm_80", compiler="nvcc", compact=False)
    loop = _generated(compact.kernel_source)
    flat = _generated(tirx.kernel_source)
    assert "#pragma unroll" in loop and re.search(r"for \(int i = 0; i < 16; \+\+i\)", loop)
    assert "#pragma unroll" not in flat and "for (" not in flat.split("__global__", 1)[1]
    assert compact.meta["compact"] is True and tirx.meta["compact"] is False
    assert compact.device_binary[:4] == b"\x7fELF"


@needs_nvcc
def test_callers_unroll_config_is_kept():
    from tvm_tirx.ir.transform import PassContext

    with PassContext(config={"tirx.UnrollLoop": {"explicit_unroll": True}}):
        art = build_cuda(make_unrolled_scale(), arch="sm_80", compiler="nvcc", compact=True)
    assert "#pragma unroll" not in _generated(art.kernel_source)


def test_compact_source_is_a_pass_config():
    """``tl.compact_source`` is part of the kernel cache key: each value its own source."""
    from tilelang.engine.pass_config import build_options

    assert build_options(None)["compact_source"] is True
    assert build_options({"tl.compact_source": False})["compact_source"] is False


@needs_nvcc
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compact_and_tirx_sources_compile_to_the_same_instructions(name, monkeypatch, tmp_path):
    compact, arch = _compile(name, True, monkeypatch)
    tirx, _ = _compile(name, False, monkeypatch)
    small, large = _generated(compact.kernel_source), _generated(tirx.kernel_source)
    assert len(small) < len(large)
    got = _ptx_counts(compact.kernel_source, arch, tmp_path, "compact")
    want = _ptx_counts(tirx.kernel_source, arch, tmp_path, "tirx")
    assert got == want
    assert got["local"] == 0
    assert got["wgmma.mma_async"] + got["mma.sync"] > 0


@needs_nvcc
def test_variable_bound_in_two_loop_bodies_builds(monkeypatch):
    # The dequant example binds one variable in the vectorized and in the scalar copy of
    # its T.Parallel body; kept as loops, TIRx took it for a kernel parameter.
    sys.path.insert(0, str(REPO / "examples" / "dequantize_gemm"))
    try:
        from example_dequant_gemm_w4a16 import dequant_matmul
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    clear_memory_cache()
    func = dequant_matmul.get_tir(256, 320, 128)
    kernel = tilelang.compile(func, out_idx=[-1], target={"kind": "cuda", "arch": "sm_80"})
    assert kernel.artifact.meta["compact"] is True
    assert "#pragma unroll" in _generated(kernel.get_kernel_source())


# --------------------------------------------------------------------------- NVRTC driver
def test_nvrtc_preamble_includes_limits_only_for_infinity():
    plain = cuda_nvrtc.nvrtc_source("#include <cuda.h>\n__global__ void k(float* a) { a[0] = 1; }")
    assert "cuda/std/limits" not in plain and "#include <cuda.h>" not in plain
    assert "using cuda::std::int32_t;" in plain and "#define __asm__ asm" in plain
    inf = cuda_nvrtc.nvrtc_source("__global__ void k(float* a) { a[0] = -INFINITY; }")
    assert "#include <cuda/std/limits>" in inf and "#define INFINITY" in inf
    comment = cuda_nvrtc.nvrtc_source('// INFINITY\n__global__ void k() { puts("INFINITY"); }')
    assert "cuda/std/limits" not in comment
    tma = cuda_nvrtc.nvrtc_source("__global__ void k(const __grid_constant__ CUtensorMap m) {}")
    assert tma.index("struct alignas(64) CUtensorMap_st") < tma.index("__global__")


def test_compile_callback_uses_tilelang_driver_only_inside_builds(monkeypatch):
    import tvm_ffi

    cuda_headers._install_postproc_hook()
    callback = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
    calls = []
    monkeypatch.setattr(
        cuda_nvrtc,
        "compile_nvrtc",
        lambda code, config: calls.append(("ours", code)) or (b"X", "cubin"),
    )
    monkeypatch.setattr(
        cuda_headers,
        "_PREVIOUS_COMPILE",
        lambda code, cfg: calls.append(("tirx", code)) or [b"Y", "ptx"],
    )
    config = cuda_build._backend_config(
        "sm_90a", "nvrtc", [], [], True, cuda_build.template_dir().parent.parent
    )
    from tvm_tirx.backend.config import backend_config_json

    text = backend_config_json({"cuda": config})
    assert list(callback("outside", text)) == [b"Y", "ptx"]
    state = cuda_headers._STATE
    monkeypatch.setattr(state, "active", True)
    monkeypatch.setattr(state, "config", config)
    binary, fmt = callback("inside", text)
    assert bytes(binary) == b"X" and fmt == "cubin"
    monkeypatch.setattr(cuda_nvrtc, "USE_TILELANG_NVRTC", False)
    from tvm_tirx.backend.cuda import compiler as tirx_compiler

    monkeypatch.setattr(
        tirx_compiler,
        "compile_source",
        lambda code, cfg, target=None: (
            calls.append(("tirx-direct", code))
            or tirx_compiler.CompilationResult(b"Z", "cubin", cfg)
        ),
    )
    assert bytes(callback("switched off", text)[0]) == b"Z"
    # with the module flag unset, the environment variable decides at each compile
    monkeypatch.setattr(cuda_nvrtc, "USE_TILELANG_NVRTC", None)
    monkeypatch.setenv("TILELANG_CUDA_NVRTC_DRIVER", "0")
    assert bytes(callback("env off", text)[0]) == b"Z"
    monkeypatch.setenv("TILELANG_CUDA_NVRTC_DRIVER", "1")
    assert bytes(callback("env on", text)[0]) == b"X"
    assert calls == [
        ("tirx", "outside"),
        ("ours", "inside"),
        ("tirx-direct", "switched off"),
        ("tirx-direct", "env off"),
        ("ours", "env on"),
    ]


@pytest.mark.parametrize(
    "module, flag, variable, read",
    [
        (cuda_nvrtc, "USE_TILELANG_NVRTC", "TILELANG_CUDA_NVRTC_DRIVER", "use_tilelang_nvrtc"),
        (
            cuda_direct_launch,
            "DIRECT_LAUNCH",
            "TILELANG_CUDA_DIRECT_LAUNCH",
            "direct_launch_enabled",
        ),
    ],
)
def test_build_driver_switch(module, flag, variable, read, monkeypatch):
    """A build-driver switch: the module flag when set, else the environment variable read
    at each use (default on); a value that is not a switch names the variable."""
    monkeypatch.setattr(module, flag, None)
    monkeypatch.delenv(variable, raising=False)
    assert getattr(module, read)() is True
    monkeypatch.setenv(variable, "off")
    assert getattr(module, read)() is False
    monkeypatch.setenv(variable, " 1 ")
    assert getattr(module, read)() is True
    monkeypatch.setattr(module, flag, False)
    assert getattr(module, read)() is False
    monkeypatch.setattr(module, flag, None)
    monkeypatch.setenv(variable, "sometimes")
    with pytest.raises(ValueError, match=f"{variable}='sometimes'"):
        getattr(module, read)()


def _tirx_nvrtc(source, config):
    from tvm_tirx.backend.cuda.compiler import compile_source

    return compile_source(source, {"cuda": config}, target={"kind": "cuda", "arch": config["arch"]})


@needs_nvrtc
@pytest.mark.parametrize("uses_infinity", [False, True])
def test_nvrtc_driver_matches_tirx_driver(uses_infinity):
    from tvm_tirx.backend.cuda.backend_config import resolve_backend_config

    art = build_cuda(make_vadd(), arch="sm_90a", compiler="nvcc")
    source = art.kernel_source
    if uses_infinity:
        source = source.replace("C_ptr[", "C_ptr[0] = -INFINITY; C_ptr[", 1)
    config = cuda_build._backend_config(
        "sm_90a", "nvrtc", [], [], True, cuda_build.template_dir().parent.parent
    )
    config["target_format"] = "ptx"
    theirs = _tirx_nvrtc(source, config).binary.decode().splitlines()
    ours_binary, fmt = cuda_nvrtc.compile_nvrtc(
        source, resolve_backend_config(dict(config), {"kind": "cuda", "arch": "sm_90a"})
    )
    ours = ours_binary.decode().splitlines()
    assert fmt == "ptx"
    if uses_infinity:
        assert ours == theirs
    else:  # TIRx's <cuda/std/limits> only adds the numeric_limits constants
        unused = [line for line in theirs if line not in ours]
        assert unused and all("cuda3std" in line for line in unused)
        assert [line for line in theirs if line in ours] == ours


@needs_nvrtc
def test_nvrtc_driver_reports_compile_errors():
    config = cuda_build._backend_config(
        "sm_80", "nvrtc", [], [], True, cuda_build.template_dir().parent.parent
    )
    with pytest.raises(cuda_build.CudaBuildError, match="undefined_name_here"):
        cuda_headers._compile_device_source(
            'extern "C" __global__ void k() { undefined_name_here(); }', config
        )


@needs_nvrtc
def test_nvrtc_build_of_the_swizzled_gemm(monkeypatch):
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    clear_memory_cache()
    kernel = tilelang.compile(
        swizzled_gemm(512, 768, 256), out_idx=[-1], target={"kind": "cuda", "arch": "sm_90a"}
    )
    art = kernel.artifact
    assert art.meta["compiler"] == "nvrtc" and art.device_binary[:4] == b"\x7fELF"
    assert art.meta["compact"] is True


# --------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("compact", [True, False])
def test_swizzled_gemm_results_match_torch(compact, monkeypatch):
    import torch

    M, N, K = 1000, 1288, 520  # not multiples of the 128x256x64 tile
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    kernel = tilelang.compile(
        swizzled_gemm(M, N, K),
        out_idx=[-1],
        target="cuda",
        pass_configs={"tl.compact_source": compact},
    )
    assert kernel.artifact.meta["compact"] is compact
    a = torch.randn(M, K, dtype=torch.float16, device="cuda")
    b = torch.randn(K, N, dtype=torch.float16, device="cuda")
    c = kernel(a, b)
    want = a.double() @ b.double()
    np.testing.assert_allclose(c.double().cpu().numpy(), want.cpu().numpy(), rtol=2e-2, atol=2e-1)
