"""Tests of what makes a CUDA build fast: header selection, the type-alias guards of
common.h, the slimmed TIRx prelude and the host-library export (C compiler, .incbin blob).

CPU tests; the nvcc ones need `nvcc`/`ptxas` on PATH, the NVRTC one cuda-bindings.
"""

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
from cuda_build_kernels import make_atomics, make_cp_async, make_mma_k16, make_vadd
from tvm_tirx.script import tirx as T

from tilelang.backends.cuda import build as cuda_build
from tilelang.backends.cuda import build_cuda
from tilelang.backends.cuda import headers as cuda_headers
from tilelang.backends.cuda import host_library as cuda_host_library
from tilelang.backends.cuda.build import CudaArtifact, header_names, select_headers

HAVE_NVCC = shutil.which("nvcc") is not None and shutil.which("ptxas") is not None
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and (
    importlib.util.find_spec("cuda.bindings") is not None
)
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc/ptxas not on PATH")
ARCHS = ["sm_80", "sm_90a"]
TIRX_MARK = "// ---- end of tl_templates; TIRx-generated code follows ----\n"


def _pasted(src):
    return re.findall(r"^// ---- tl_templates/cuda/(\w+\.h) ----$", src, re.M)


def _generated(src):
    return src.split(TIRX_MARK, 1)[1] if TIRX_MARK in src else src


def make_vadd16(dtype):
    """C = A + B on 256 values of a 16-bit float type, one block."""

    @T.function
    def vadd16(A: T.Tensor((256,), dtype), B: T.Tensor((256,), dtype), C: T.Tensor((256,), dtype)):
        with T.launch_thread("threadIdx.x", 256) as tx:
            C[tx] = A[tx] + B[tx]

    return vadd16


# --------------------------------------------------------------------------- selection


def test_select_headers_by_called_helpers():
    code = "tl::cp_async_gs<16>(a, b); tl::wgmma_arrive(); float x = 1;"
    assert select_headers(code) == ["common.h", "copy.h", "wgmma.h"]
    assert select_headers("int x = 0;") == ["common.h"]
    # mentions in comments and strings do not count
    assert select_headers('// tl::AtomicAdd\n/* tl::ptx_ldmatrix_x4 */ "tl::mma"') == ["common.h"]
    assert select_headers("tl::AtomicMax(p, v);") == ["common.h", "atomic.h"]


def test_unknown_helper_pastes_every_header():
    assert select_headers("tl::no_such_helper_anywhere(1);") == list(header_names())


def test_slim_prelude_keeps_traits_when_used():
    block = (
        "#ifdef __CUDACC_RTC__\n"
        "  #include <cuda/std/type_traits>\n"
        "  namespace std {\n"
        "    using cuda::std::is_same;\n"
        "    using cuda::std::is_same_v;\n"
        "  }\n"
        "#else\n"
        "  #include <cstdint>\n"
        "  #include <type_traits>\n"
        "#endif\n"
    )
    slim = cuda_headers._slim_prelude(block + "int main_kernel();\n")
    assert "type_traits" not in slim and "namespace std" not in slim and "<cstdint>" in slim
    used = block + "template <class T> int f() { return std::is_same_v<T, int>; }\n"
    assert cuda_headers._slim_prelude(used) == used
    # cuda::std:: names are not std:: uses
    keeps = block + "cuda::std::int32_t x;\n"
    assert "type_traits" not in cuda_headers._slim_prelude(keeps)


# --------------------------------------------------------------------------- nvcc builds


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_float32_kernel_has_no_fp16_or_bf16(arch):
    art = build_cuda(make_vadd(), arch=arch, compiler="nvcc")
    src = art.get_kernel_source()
    assert _pasted(src) == ["common.h"] and art.meta["extra_headers"] == ["common.h"]
    assert "#define TL_NO_BF16 1" in src and "#define TL_NO_FP16 1" in src
    assert "cuda/std/type_traits" not in src and "#include <type_traits>" not in src
    assert art.device_binary[:4] == b"\x7fELF"


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_kernel_gets_cuda_bf16(arch):
    art = build_cuda(make_vadd16("bfloat16"), arch=arch, compiler="nvcc")
    src = art.get_kernel_source()
    assert "#define TL_NO_BF16" not in src
    assert "#include <cuda_bf16.h>" in src
    assert art.device_binary is not None


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_fp16_kernel_gets_fp16_only(arch):
    art = build_cuda(make_vadd16("float16"), arch=arch, compiler="nvcc")
    prelude = art.get_kernel_source().split(TIRX_MARK)[0]
    assert "#define TL_NO_BF16 1" in prelude and "#define TL_NO_FP16" not in prelude
    assert art.device_binary is not None


@needs_nvcc
@pytest.mark.parametrize(
    ("make", "headers"),
    [
        (make_atomics, ["common.h", "atomic.h"]),
        (make_cp_async, ["common.h", "copy.h"]),
        (lambda: make_mma_k16("bfloat16"), ["common.h", "mma.h"]),
    ],
)
def test_helper_kernels_get_their_headers(make, headers):
    art = build_cuda(make(), arch="sm_90a", compiler="nvcc")
    src = art.get_kernel_source()
    assert _pasted(src) == headers
    if "atomic.h" in headers:  # its half / bfloat16 overloads need both types
        assert "#define TL_NO_" not in src
    assert art.device_binary is not None


@needs_nvcc
def test_all_headers_still_available():
    art = build_cuda(make_vadd(), arch="sm_80", compiler="nvcc", extra_headers=True)
    assert _pasted(art.get_kernel_source()) == list(header_names())
    assert art.meta["extra_headers"] == list(header_names())


@needs_nvcc
def test_readme_gemm_source_and_build():
    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmark"))
    try:
        import overhead
    finally:
        sys.path.pop(0)
    import tilelang

    func = overhead.readme_gemm("cuda").get_tir(256, 256, 256)
    kernel = tilelang.compile(func, out_idx=[-1], target={"kind": "cuda", "arch": "sm_90a"})
    src = kernel.get_kernel_source()
    pasted = _pasted(src)
    assert pasted[0] == "common.h" and "atomic.h" not in pasted and "reduce.h" not in pasted
    assert "#define TL_NO_BF16 1" in src and "cuda/std/type_traits" not in src
    assert kernel.artifact.device_binary is not None


# --------------------------------------------------------------------------- host export


@needs_nvcc
def test_host_library_embeds_the_packed_device_module(monkeypatch):
    art = build_cuda(make_vadd(), arch="sm_90a", compiler="nvcc")
    assert art.device_binary in art.host_library
    # the TIRx default path (C++ compiler, C byte array) embeds the same cubin
    monkeypatch.setattr(cuda_host_library, "_c_compiler", lambda: None)
    fallback = build_cuda(make_vadd(), arch="sm_90a", compiler="nvcc")
    assert fallback.device_binary == art.device_binary
    assert fallback.device_binary in fallback.host_library


@needs_nvcc
def test_c_compiler_failure_is_reported(monkeypatch, tmp_path):
    fake = tmp_path / "fakecc"
    fake.write_text("#!/bin/sh\necho fake compiler refuses >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    with pytest.raises(cuda_build.CudaBuildError, match="fake compiler refuses"):
        build_cuda(make_vadd(), arch="sm_80", compiler="nvcc")


@needs_nvcc
def test_artifact_roundtrip_and_corruption(tmp_path):
    art = build_cuda(make_vadd16("float16"), arch="sm_80", compiler="nvcc")
    out = art.save(tmp_path / "a")
    assert CudaArtifact.load(out) == art
    data = bytearray((out / "host.so").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (out / "host.so").write_bytes(bytes(data))
    with pytest.raises(cuda_build.CorruptArtifactError, match="sha256"):
        CudaArtifact.load(out)


@pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC needs the cuda-bindings package")
@pytest.mark.parametrize("arch", ARCHS)
def test_nvrtc_builds_slim_sources(arch):
    for make in (make_vadd, lambda: make_vadd16("bfloat16"), make_atomics, make_cp_async):
        art = build_cuda(make(), arch=arch, compiler="nvrtc")
        assert art.device_binary[:4] == b"\x7fELF"
