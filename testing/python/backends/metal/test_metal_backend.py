"""Metal backend without Apple hardware: the generated MSL's structure (threadgroup memory,
``simdgroup_matrix`` 8x8 gemms, SIMD-group reductions), its lowering executed by
``tilelang.testing.metal_emulator`` against float64 references, the refusals of what MSL
cannot express, and a C++ syntax check of the MSL against ``include/msl_shim.h``.

No MSL compiler exists for Linux (Apple's ``metal`` is macOS-only; PyPI and Debian have no
MSL front end), so the syntax check parses the source as C++17 with clang and a shim header
declaring the Metal names: it catches malformed code and wrong call shapes, not Metal
semantics.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rocm"))
from example_kernels import example_kernels, example_tir  # noqa: E402
from vendor_kernels import double_add, matmul, printing, row_reduce  # noqa: E402

import tilelang  # noqa: E402
from tilelang import errors  # noqa: E402
from tilelang.backends.metal import codegen, pipeline  # noqa: E402
from tilelang.testing.metal_emulator import emulate  # noqa: E402

METAL = {"kind": "metal"}
HAS_CLANG = shutil.which("clang++") is not None or bool(list(Path("/usr/bin").glob("clang++-*")))


def _kernel_part(source: str) -> str:
    return source.split("}  // namespace tl", 1)[1]


def test_gemm_source_structure():
    source = pipeline.build(matmul.get_tir(128, 128, 64), METAL).kernel_source
    body = _kernel_part(source)
    assert re.search(r"kernel void main_kernel\(\s*device half\* A_ptr \[\[ buffer\(0\) \]\]", body)
    assert "threadgroup uchar smem[" in body and "threadgroup half* As" in body
    assert body.count("__syncthreads()") >= 2  # copies -> gemm -> next copies
    # 4 SIMD-groups on 64x64: 32x32 each = 4x4 atoms of 8x8, one call per k step of 8
    assert body.count("tl::simdgroup_gemm_8x8<4, 4>(") == 1
    assert "simdgroup_multiply_accumulate(acc, ma[i], mb[j], acc)" in source
    for cuda_only in ("__shfl", "mma.sync", "cp_async", "__global__", "extern __shared__"):
        assert cuda_only not in body


def test_reduction_source_uses_simd_functions():
    whole = pipeline.build(row_reduce.get_tir(8, 32, "sum", bM=8, threads=256), METAL)
    assert "simd_sum(" in _kernel_part(whole.kernel_source)
    partial = pipeline.build(row_reduce.get_tir(10, 300, "max"), METAL).kernel_source
    assert "simd_shuffle_xor(" in _kernel_part(partial)


@pytest.mark.parametrize(
    "m,n,k,ta,tb,dtype",
    [(129, 70, 33, False, False, "float16"), (70, 50, 40, True, True, "float32")],
)
def test_simdgroup_gemm_matches_float64(m, n, k, ta, tb, dtype, rng):
    lowered = pipeline.lower(matmul.get_tir(m, n, k, trans_A=ta, trans_B=tb, in_dtype=dtype), METAL)
    assert "tl::simdgroup_gemm_8x8<" in lowered.script()
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    c = emulate(lowered, a, b, np.zeros((m, n), np.float32), check_races=True)[2]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = (a64.T if ta else a64) @ (b64.T if tb else b64)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize(
    "kind,threads,n,bm", [("sum", 256, 32, 8), ("max", 256, 300, 4), ("min", 64, 129, 4)]
)
def test_simd_reduction_matches_float64(kind, threads, n, bm, rng):
    x = rng.standard_normal((10, n)).astype(np.float32)
    lowered = pipeline.lower(row_reduce.get_tir(10, n, kind, bM=bm, threads=threads), METAL)
    out = emulate(lowered, x, np.zeros((10,), np.float32), check_races=True)[1]
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[kind](x.astype(np.float64), axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_flash_attention_forward_emulated(rng):
    b, h, s, d = 1, 2, 128, 64
    path = "flash_attention/example_mha_fwd_bshd.py"
    lowered = pipeline.lower(example_tir(path, "flashattn", (b, h, s, d, False)), METAL)
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float16) for _ in range(3))
    out = emulate(lowered, q, k, v, np.zeros((b, s, h, d), np.float16), check_races=True)[3]
    qt, kt, vt = (torch.from_numpy(x).double().transpose(1, 2) for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt)
    np.testing.assert_allclose(out.astype(np.float64), ref.transpose(1, 2).numpy(), atol=2e-2)


def test_print_is_not_supported_on_metal():
    with pytest.raises(
        errors.CompileError,
        match=r"test_metal_backend.py|vendor_kernels.py:\d+: T.print is not supported on the metal target",
    ):
        pipeline.lower(printing.get_tir(16), METAL)


def test_float64_is_not_supported_on_metal():
    with pytest.raises(
        errors.CompileError, match="float64 .* is not supported on the metal target"
    ):
        pipeline.lower(double_add.get_tir(100), METAL)


def test_metal_kernels_do_not_load():
    kernel = tilelang.compile(matmul.get_tir(64, 64, 32), target="metal")
    assert kernel.artifact.meta["kernel_names"] == ["main_kernel"]
    with pytest.raises(errors.CompileError, match="MSL source only"):
        kernel.torch_function  # noqa: B018 - loading is what raises


EXAMPLES = [e for e in example_kernels() if e[0] != "mha_bwd"]


@pytest.mark.skipif(not HAS_CLANG, reason="no clang for the MSL syntax check")
@pytest.mark.parametrize("kid,path,kernel,args,uses_gemm", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_msl_parses(kid, path, kernel, args, uses_gemm):
    source = pipeline.build(example_tir(path, kernel, args), METAL).kernel_source
    codegen.syntax_check(source)
    assert ("tl::simdgroup_gemm_8x8<" in _kernel_part(source)) == uses_gemm


@pytest.mark.skipif(not HAS_CLANG, reason="no clang for the MSL syntax check")
def test_syntax_check_catches_errors():
    with pytest.raises(codegen.MetalCodegenError, match="syntax check failed"):
        codegen.syntax_check("kernel void f(device float* a [[ buffer(0) ]]) { a[0] = ; }")
