"""ROCm backend without AMD hardware: every example kernel becomes HIP C++ that hipcc compiles
for gfx90a and gfx940 to a code object; gemms disassemble to MFMA instructions (``v_mfma``),
reductions to 64-lane shuffles (``ds_bpermute``/DPP), shared tiles to LDS (``ds_*``).

Compile checks skip (with the reason) when no HIP toolchain is installed: Debian's
``hipcc`` + ``rocm-device-libs`` (``apt-get install -y hipcc rocm-device-libs``, ~30 s) is
what CI uses. Its clang 15 knows gfx90a and gfx940 but not gfx942; gfx940 has gfx942's
MFMA set, so CDNA3 code is compiled for gfx940 here.
"""

from __future__ import annotations

import re

import pytest
from example_kernels import example_kernels, example_tir
from vendor_kernels import matmul, row_reduce

from tilelang.backends.registry import resolve_target
from tilelang.backends.rocm import build as rocm_build
from tilelang.backends.rocm import pipeline

GFX90A = {"kind": "rocm", "arch": "gfx90a"}
GFX940 = {"kind": "rocm", "arch": "gfx940"}
needs_hipcc = pytest.mark.skipif(
    rocm_build.find_toolchain() is None,
    reason="no HIP toolchain (apt-get install -y hipcc rocm-device-libs)",
)
EXAMPLES = list(example_kernels())
CUDA_ONLY = ("__shfl_xor_sync", "mma.sync", "cp.async", "ldmatrix", "wgmma", "cuda.h", "__nv_")


def _mfma(disasm: str) -> set[str]:
    return set(re.findall(r"v_mfma_\w+", disasm))


#: examples whose code object keeps a local array in private memory (scratch): the
#: convolution's vectorized im2col stores ``half`` elements into a local vector that is read
#: back as one 16-byte value, which LLVM does not promote to registers
PRIVATE_MEMORY = {"convolution"}


@needs_hipcc
@pytest.mark.parametrize("target", [GFX90A, GFX940], ids=["gfx90a", "gfx940"])
@pytest.mark.parametrize("kid,path,kernel,args,uses_gemm", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_compiles(kid, path, kernel, args, uses_gemm, target):
    artifact = pipeline.build(example_tir(path, kernel, args), target)
    source = artifact.kernel_source
    assert "#include <hip/hip_runtime.h>" in source
    assert not [tok for tok in CUDA_ONLY if tok in source.split("// ---- kernels", 1)[1]]
    assert artifact.code_object[:4] == b"\x7fELF"
    disasm = rocm_build.disassemble(artifact.code_object)
    # private memory: buffer_* on gfx90a, scratch_* on gfx94x
    private = bool(re.search(r"\b(scratch|buffer)_(load|store)", disasm))
    assert private == (kid in PRIVATE_MEMORY), "private memory use changed"
    if uses_gemm:
        assert _mfma(disasm), f"{kid}: no MFMA in the gemm kernel"
    else:
        assert not _mfma(disasm)


@needs_hipcc
@pytest.mark.parametrize(
    "in_dtype,acc,target,instruction",
    [
        ("float16", "float32", GFX90A, "v_mfma_f32_16x16x16f16"),
        ("bfloat16", "float32", GFX90A, "v_mfma_f32_16x16x16bf16_1k"),
        ("int8", "int32", GFX90A, "v_mfma_i32_16x16x16i8"),
        ("float16", "float32", GFX940, "v_mfma_f32_16x16x16f16"),
        ("int8", "int32", GFX940, "v_mfma_i32_16x16x32_i8"),
        ("float8_e4m3fnuz", "float32", GFX940, "v_mfma_f32_16x16x32_fp8_fp8"),
        ("float8_e5m2fnuz", "float32", GFX940, "v_mfma_f32_16x16x32_bf8_bf8"),
    ],
)
def test_gemm_instruction_per_dtype(in_dtype, acc, target, instruction):
    func = matmul.get_tir(100, 72, 70, in_dtype=in_dtype, accum_dtype=acc, out_dtype=acc)
    artifact = pipeline.build(func, target)
    assert _mfma(rocm_build.disassemble(artifact.code_object)) == {instruction}


@needs_hipcc
def test_float32_gemm_is_the_scalar_fallback():
    func = matmul.get_tir(64, 64, 32, in_dtype="float32")
    artifact = pipeline.build(func, GFX90A)
    assert "tl::mfma" not in artifact.kernel_source.split("// ---- kernels", 1)[1]
    assert not _mfma(rocm_build.disassemble(artifact.code_object))


def test_reduction_shuffles_over_64_lanes():
    # 256 threads over rows of 300: lanes within a wavefront shuffle with width 64, and
    # the four wavefronts meet in LDS
    func = row_reduce.get_tir(10, 300, "max")
    lowered = pipeline.lower(func, GFX90A)
    text = lowered.script()
    assert re.search(r'call_extern\("__shfl_xor", .*, 64', text)
    assert "__shfl_xor_sync" not in text


def test_gemm_lowering_uses_mfma_wrapper_and_lds():
    lowered = pipeline.lower(matmul.get_tir(128, 128, 64), GFX90A)
    text = lowered.script()
    # a 64x64 block tile on 2 wavefronts: 64x32 per wave = 4x2 atoms of 16x16 per k step
    assert text.count('"tl::mfma_f32_16x16x16_f16"') == 8
    assert 'scope="shared.dyn"' in text
    assert "tl.shared_memory" in str(lowered.attrs)


def test_target_strings():
    assert resolve_target("hip") == {"kind": "rocm", "arch": "gfx90a"}
    assert resolve_target("rocm")["kind"] == "rocm"
    assert resolve_target("rocm -mcpu=gfx942")["arch"] == "gfx942"
    assert resolve_target("hip -arch=gfx940")["arch"] == "gfx940"
    assert resolve_target("metal")["kind"] == "metal"
    with pytest.raises(ValueError, match="gfx1100"):
        pipeline.lower(matmul.get_tir(64, 64, 32), {"kind": "rocm", "arch": "gfx1100"})


def test_auto_picks_rocm_for_a_rocm_torch(monkeypatch):
    from tilelang.backends import registry

    monkeypatch.setattr(registry, "_rocm_torch", lambda: True)
    monkeypatch.setattr(registry, "_rocm_arch", lambda: "gfx942")
    assert resolve_target("auto") == {"kind": "rocm", "arch": "gfx942"}
    monkeypatch.setattr(registry, "_rocm_torch", lambda: False)
    assert resolve_target("auto")["kind"] in ("cpu", "cuda")


@needs_hipcc
def test_unknown_arch_names_the_toolchain():
    # Debian's hipcc 5.2 (clang 15) has no gfx942; a toolchain that has it compiles it
    try:
        artifact = pipeline.build(matmul.get_tir(64, 64, 64), {"kind": "rocm", "arch": "gfx942"})
    except rocm_build.HipBuildError as err:
        assert "does not know gfx942" in str(err) and "gfx940" in str(err)
    else:
        assert _mfma(rocm_build.disassemble(artifact.code_object))


def test_hipcc_error_is_reported():
    with pytest.raises(rocm_build.HipBuildError, match="hipcc|toolchain"):
        rocm_build.compile_hip("this is not HIP", "gfx90a")


def test_fp8_refusals_name_the_line():
    from tilelang import errors

    # gfx90a has no fp8 MFMA: the scalar fallback would convert fp8 bytes
    with pytest.raises(
        errors.CompileError, match=r"vendor_kernels.py:\d+: float8_e4m3fnuz arithmetic"
    ):
        pipeline.lower(matmul.get_tir(64, 64, 64, in_dtype="float8_e4m3fnuz"), GFX90A)
    with pytest.raises(
        errors.CompileError, match="float8_e4m3fn .* not supported on the rocm target"
    ):
        pipeline.lower(matmul.get_tir(64, 64, 64, in_dtype="float8_e4m3fn"), GFX940)
