"""Tests of the CUDA backend's build + launch glue and of the tl_templates device headers.

CPU tests (need `nvcc`/`ptxas`): hand-written thread-level TIRx kernels go through
`build_cuda`, artifacts round-trip through save/load, damaged artifacts are rejected, the
path never touches TIRx's LLVM backend or orcjit, and every header function compiles for
sm_80 and sm_90a. GPU tests (`@pytest.mark.cuda`) launch the same kernels on torch CUDA
tensors and compare with torch.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from cuda_build_kernels import (
    GPU_KERNELS,
    LDMATRIX_VARIANTS,
    expected_ldmatrix,
    make_atomics,
    make_block_reverse,
    make_cp_async,
    make_ldmatrix,
    make_mma_k16,
    make_mma_s8,
    make_mma_tf32,
    make_swizzle,
    make_transpose,
    make_vadd,
    make_warp_reduce,
    raster_column,
    raster_row,
)
from tvm_tirx.script import tirx as T

from tilelang.backends.cuda import (
    CorruptArtifactError,
    CudaArtifact,
    CudaBuildError,
    CudaRuntimeError,
    build_cuda,
    load_kernel,
)
from tilelang.backends.cuda.build import header_prelude, template_dir

REPO = Path(__file__).resolve().parents[4]
HAVE_NVCC = shutil.which("nvcc") is not None and shutil.which("ptxas") is not None
HAVE_NVRTC = importlib.util.find_spec("cuda") is not None and (
    importlib.util.find_spec("cuda.bindings") is not None
)
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc/ptxas not on PATH")
CPU_ARCHS = ["sm_80", "sm_90a"]

# --------------------------------------------------------------------------- CPU: build


@needs_nvcc
@pytest.mark.parametrize("arch", CPU_ARCHS)
def test_build_vadd_nvcc(arch):
    art = build_cuda(make_vadd(), arch=arch, compiler="nvcc")
    src = art.get_kernel_source()
    assert src.startswith("// ---- tl_templates/cuda/common.h ----")
    assert "namespace tl" in src and "vadd_kernel" in src
    assert art.device_binary[:4] == b"\x7fELF" and art.device_format == "cubin"
    assert art.host_library[:4] == b"\x7fELF"
    # CUDA cubins record the SM number in bits 8..15 of e_flags.
    e_flags = int.from_bytes(art.device_binary[0x30:0x34], "little")
    assert (e_flags >> 8) & 0xFF == int(re.sub(r"\D", "", arch))
    meta = art.meta
    assert meta["entry_name"] == "vadd" and meta["kernel_names"] == ["vadd_kernel"]
    assert meta["arch"] == arch and meta["compiler"] == "nvcc"
    assert meta["symbolic_dims"] == ["n"]
    assert meta["functions"]["vadd"] == [
        {"name": x, "kind": "tensor", "dtype": "float32", "shape": ["n"]} for x in "ABC"
    ]
    assert meta["host_embeds"] == "binary"
    json.dumps(meta)
    # The host library embeds this very cubin, not the source.
    assert art.device_binary in art.host_library


@needs_nvcc
@pytest.mark.parametrize("arch", CPU_ARCHS)
@pytest.mark.parametrize("scope", ["shared", "shared.dyn"])
def test_build_transpose_nvcc(arch, scope):
    art = build_cuda(make_transpose(scope), arch=arch, compiler="nvcc")
    src = art.get_kernel_source()
    decl = "extern __shared__" if scope == "shared.dyn" else "__shared__"
    assert decl in src
    assert art.meta["functions"]["transpose"][0]["shape"] == ["n", 64]
    assert art.meta["functions"]["transpose"][1]["shape"] == [64, "n"]
    if scope == "shared.dyn":  # dynamic smem bytes travel as the last launch argument
        assert "(int64_t)16640" in art.get_host_source()


@needs_nvcc
@pytest.mark.parametrize("name", sorted(GPU_KERNELS))
def test_gpu_test_kernels_build_on_cpu(name):
    """Every kernel the GPU tests launch compiles here (nvcc, sm_90a)."""
    art = build_cuda(GPU_KERNELS[name](), arch="sm_90a", compiler="nvcc")
    assert art.device_binary is not None


@needs_nvcc
def test_extra_headers_and_flags():
    none = build_cuda(make_vadd(), arch="sm_80", compiler="nvcc", extra_headers=False)
    assert "tl_templates" not in none.get_kernel_source() and none.meta["extra_headers"] == []
    some = build_cuda(make_vadd(), arch="sm_80", compiler="nvcc", extra_headers=["copy.h"])
    src = some.get_kernel_source()
    assert "cuda/common.h ----" in src and "cuda/copy.h ----" in src and "mma.h" not in src

    @T.function
    def uses_macro(C: T.Tensor((32,), "int32")):
        with T.launch_thread("threadIdx.x", 32) as tx:
            C[tx] = T.call_extern("TL_TEST_VALUE", ty="int32")

    with pytest.raises(CudaBuildError, match="nvcc"):
        build_cuda(uses_macro, arch="sm_80", compiler="nvcc")
    art = build_cuda(
        uses_macro,
        arch="sm_80",
        compiler="nvcc",
        compile_flags=["-DTL_TEST_VALUE()=7"],
        ptxas_flags=["--allow-expensive-optimizations=true"],
    )
    assert "-DTL_TEST_VALUE()=7" in art.meta["backend_config"]["nvcc"]
    assert art.meta["backend_config"]["ptxas"][-1] == "--allow-expensive-optimizations=true"


def test_bad_arguments():
    vadd = make_vadd()
    with pytest.raises(ValueError, match="arch"):
        build_cuda(vadd, arch="sm90")
    with pytest.raises(ValueError, match="compiler"):
        build_cuda(vadd, compiler="clang")
    with pytest.raises(TypeError, match="compile_flags"):
        build_cuda(vadd, compiler="nvcc", compile_flags="-O3")
    with pytest.raises(ValueError, match="compile_flags"):
        build_cuda(vadd, compiler="nvcc", compile_flags=["-arch=sm_80"])
    with pytest.raises(ValueError, match="extra_headers"):
        build_cuda(vadd, compiler="nvcc", extra_headers=["nope.h"])
    with pytest.raises(TypeError, match="mod"):
        build_cuda(42)
    with pytest.raises(ValueError, match="entry_name"):
        build_cuda(vadd, compiler="nvcc", entry_name="other")
    with pytest.raises(TypeError, match="artifact"):
        load_kernel(3.5)


@pytest.mark.skipif(HAVE_NVRTC, reason="cuda-bindings is installed")
def test_nvrtc_without_cuda_bindings_keeps_source():
    with pytest.warns(RuntimeWarning, match="cuda-bindings"):
        art = build_cuda(make_vadd(), arch="sm_90a", compiler="nvrtc")
    assert art.device_binary is None and art.meta["host_embeds"] == "source"
    assert art.meta["device_format"] is None


def test_header_prelude_is_self_contained():
    text = header_prelude(True)
    assert not re.search(r'^\s*#\s*include\s+"', text, re.M)  # local includes are inlined
    for name in ("common.h", "copy.h", "ldsm.h", "mma.h", "reduce.h", "atomic.h"):
        assert f"tl_templates/cuda/{name} ----" in text
    assert text.count("#define TL_TEMPLATES_CUDA_COMMON_H_") == 1


# --------------------------------------------------------------------------- CPU: artifacts


@pytest.fixture(scope="module")
def vadd_artifact():
    if not HAVE_NVCC:
        pytest.skip("nvcc/ptxas not on PATH")
    return build_cuda(make_vadd(), arch="sm_90a", compiler="nvcc")


def test_save_load_roundtrip(vadd_artifact, tmp_path):
    out = vadd_artifact.save(tmp_path / "art")
    names = sorted(os.listdir(out))
    assert names == ["host.c", "host.so", "kernel.cu", "kernel.cubin", "meta.json"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["files"]["kernel.cubin"]["size"] == len(vadd_artifact.device_binary)
    assert len(meta["files"]["host.so"]["sha256"]) == 64
    loaded = CudaArtifact.load(out)
    assert loaded == vadd_artifact
    assert loaded.get_kernel_source() == vadd_artifact.get_kernel_source()
    # Saving over an existing artifact replaces it and leaves no temporary files.
    vadd_artifact.save(out)
    assert sorted(os.listdir(out)) == names
    assert CudaArtifact.load(str(out)) == vadd_artifact


@pytest.mark.parametrize(
    "damage",
    ["truncate_cubin", "flip_host_so", "delete_source", "delete_meta", "garbage_meta", "bad_path"],
)
def test_corrupt_artifact_is_rejected(vadd_artifact, tmp_path, damage):
    out = vadd_artifact.save(tmp_path / "art")
    if damage == "truncate_cubin":
        data = (out / "kernel.cubin").read_bytes()
        (out / "kernel.cubin").write_bytes(data[: len(data) // 2])
    elif damage == "flip_host_so":
        data = bytearray((out / "host.so").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (out / "host.so").write_bytes(bytes(data))
    elif damage == "delete_source":
        (out / "kernel.cu").unlink()
    elif damage == "delete_meta":
        (out / "meta.json").unlink()
    elif damage == "garbage_meta":
        (out / "meta.json").write_text('{"kind": "tilelang.cuda", "format_')
    elif damage == "bad_path":
        meta = json.loads((out / "meta.json").read_text())
        meta["files"]["../escape"] = {"size": 0, "sha256": "0" * 64}
        (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorruptArtifactError):
        CudaArtifact.load(out)
    with pytest.raises(CorruptArtifactError):
        load_kernel(out)


def test_load_kernel_without_cuda_runtime_says_why(vadd_artifact):
    import tvm_ffi

    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True):
        pytest.skip("TIRx's CUDA runtime is loaded on this machine")
    with pytest.raises(CudaRuntimeError, match="libcuda"):
        load_kernel(vadd_artifact)


def test_save_into_a_file_path_fails(vadd_artifact, tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(NotADirectoryError):
        vadd_artifact.save(target)


LLVM_FREE_SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys, warnings

    class BlockOrcJit(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "tvm_ffi_orcjit":
                raise ImportError("hidden for this test: " + name)
            return None

    sys.meta_path.insert(0, BlockOrcJit())
    import tvm_ffi.libinfo as libinfo

    real_find = libinfo._find_library_by_basename

    def find(package, name, *args, **kwargs):
        if "llvm" in name:
            raise RuntimeError("hidden for this test: " + name)
        return real_find(package, name, *args, **kwargs)

    libinfo._find_library_by_basename = find
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    import tvm_tirx
    import cuda_build_kernels as kernels
    from tilelang.backends.cuda import CudaArtifact, build_cuda

    assert not tvm_tirx.runtime.enabled("llvm"), "LLVM backend still loaded"
    art = build_cuda(kernels.make_transpose("shared.dyn"), arch="sm_90a", compiler="nvcc")
    art.save(sys.argv[3])
    assert CudaArtifact.load(sys.argv[3]) == art
    with open("/proc/self/maps") as maps:
        mapped = maps.read()
    assert "llvm_backend" not in mapped, "an LLVM backend library got mapped"
    assert "orcjit" not in mapped, "orcjit got mapped"
    assert not [m for m in sys.modules if "orcjit" in m], "orcjit got imported"
    print("LLVM_FREE_OK")
    """
)


@needs_nvcc
def test_cuda_path_needs_no_llvm_backend(tmp_path):
    """build/save/load in a process where TIRx's LLVM backend and orcjit are hidden."""
    script = tmp_path / "llvm_free.py"
    script.write_text(LLVM_FREE_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(REPO), str(Path(__file__).parent), str(tmp_path / "a")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "LLVM_FREE_OK" in proc.stdout


# --------------------------------------------------------------------------- CPU: headers

HEADER_SMOKE_CU = (Path(__file__).parent / "header_smoke.cu").read_text()

EXPECTED_PTX = [
    "cp.async.cg.shared.global",
    "cp.async.ca.shared.global",
    "cp.async.commit_group",
    "cp.async.wait_group 1",
    "cp.async.wait_all",
    "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    "cvt.rna.tf32.f32",
    "shfl.sync.bfly.b32",
    "atom.global.cas.b32",
    "atom.global.cas.b16",
]

PTXAS_LINE = re.compile(
    r"ptxas info\s*: Used (\d+) registers.*?(\d+) bytes smem", re.MULTILINE | re.DOTALL
)


@needs_nvcc
@pytest.mark.parametrize(
    "arch_flags,sm",
    [(["-arch=sm_80"], "sm_80"), (["-gencode=arch=compute_90a,code=sm_90a"], "sm_90a")],
)
def test_headers_compile_with_nvcc(tmp_path, arch_flags, sm):
    src = tmp_path / "header_smoke.cu"
    src.write_text(HEADER_SMOKE_CU)
    inc = f"-I{template_dir().parent.parent}"
    cmd = ["nvcc", *arch_flags, inc, "-Werror", "all-warnings", "--cubin", "-Xptxas", "-v"]
    proc = subprocess.run(
        [*cmd, "-o", str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    log = proc.stdout + proc.stderr
    assert f"Compiling entry function 'header_smoke' for '{sm}'" in log
    match = PTXAS_LINE.search(log)
    assert match, log
    registers, smem = int(match.group(1)), int(match.group(2))
    assert 0 < registers <= 255 and smem == 2048
    ptx = tmp_path / "k.ptx"
    proc = subprocess.run(
        ["nvcc", *arch_flags, inc, "--ptx", "-o", str(ptx), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    text = ptx.read_text()
    missing = [op for op in EXPECTED_PTX if op not in text]
    assert not missing, missing


@pytest.mark.skipif(not HAVE_NVRTC, reason="NVRTC needs the cuda-bindings package")
@pytest.mark.parametrize("arch", CPU_ARCHS)
def test_headers_compile_with_nvrtc(arch):
    from tvm_tirx.support.nvcc import _compile_cuda_nvrtc

    code = header_prelude(True) + HEADER_SMOKE_CU.split('threadblock_swizzle.h"', 1)[1]
    binary, _log = _compile_cuda_nvrtc(code, "cubin", arch, [])
    assert bytes(binary)[:4] == b"\x7fELF"


@needs_nvcc
def test_rasterization_is_a_bijection_on_host(tmp_path):
    """Run tl::rasterize_2d_row/column on the host and compare with the Python model."""
    grids = [(1, 1, 1), (3, 5, 7), (4, 8, 8), (2, 3, 10), (5, 16, 3), (8, 1, 9)]
    body = "".join(f"  dump({pw}, {gx}, {gy});\n" for pw, gx, gy in grids)
    src = tmp_path / "raster.cu"
    src.write_text(
        '#include "tl_templates/cuda/threadblock_swizzle.h"\n#include <cstdio>\n'
        "static void dump(unsigned pw, unsigned gx, unsigned gy) {\n"
        "  for (unsigned by = 0; by < gy; ++by) for (unsigned bx = 0; bx < gx; ++bx) {\n"
        "    uint2 r = tl::rasterize_2d_row(pw, bx, by, gx, gy);\n"
        "    uint2 c = tl::rasterize_2d_column(pw, bx, by, gx, gy);\n"
        '    std::printf("%u %u %u %u %u %u %u %u %u\\n", pw, gx, gy, bx, by, r.x, r.y, c.x, c.y);\n'
        "  }\n}\nint main() {\n" + body + "  return 0;\n}\n"
    )
    exe = tmp_path / "raster"
    inc = f"-I{template_dir().parent.parent}"
    build = subprocess.run(["nvcc", inc, "-o", str(exe), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    seen = {}
    for line in lines.split("\n"):
        if not line:
            continue
        pw, gx, gy, bx, by, rx, ry, cx, cy = map(int, line.split())
        assert (rx, ry) == raster_row(pw, bx, by, gx, gy)
        assert (cx, cy) == raster_column(pw, bx, by, gx, gy)
        seen.setdefault((pw, gx, gy), []).append(((rx, ry), (cx, cy)))
    assert set(seen) == set(grids)
    for (_pw, gx, gy), pairs in seen.items():
        cells = {(x, y) for x in range(gx) for y in range(gy)}
        assert {p[0] for p in pairs} == cells and len(pairs) == gx * gy
        assert {p[1] for p in pairs} == cells


# --------------------------------------------------------------------------- GPU tests


def _gpu_arch():
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major == 9 else "")


GPU_COMPILERS = [
    pytest.param("nvrtc", marks=pytest.mark.skipif(not HAVE_NVRTC, reason="no cuda-bindings")),
    pytest.param("nvcc", marks=needs_nvcc),
]


def _gpu_build(kernel, compiler="nvrtc"):
    if compiler == "nvrtc" and not HAVE_NVRTC:
        compiler = "nvcc"
    with warnings.catch_warnings():  # no silent fall back to a source-only artifact
        warnings.filterwarnings("error", message=".*cuda-bindings", category=RuntimeWarning)
        art = build_cuda(kernel, arch=_gpu_arch(), compiler=compiler)
    assert art.device_binary is not None
    return load_kernel(art)


@pytest.mark.cuda
@pytest.mark.parametrize("compiler", GPU_COMPILERS)
def test_gpu_vadd(compiler):
    import torch

    f = _gpu_build(make_vadd(), compiler)
    for n in (1, 127, 128, 1000, 4099):
        a = torch.randn(n, device="cuda")
        b = torch.randn(n, device="cuda")
        c = torch.empty_like(a)
        f(a, b, c)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("scope", ["shared", "shared.dyn"])
def test_gpu_transpose(scope):
    import torch

    f = _gpu_build(make_transpose(scope))
    for n in (64, 320):
        a = torch.randn(n, 64, device="cuda")
        b = torch.empty(64, n, device="cuda")
        f(a, b)
        torch.testing.assert_close(b, a.t(), rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("elems", [24576, 51200])  # 96 KB and 200 KB of dynamic smem
def test_gpu_dynamic_shared_memory_above_48kb(elems):
    import torch

    f = _gpu_build(make_block_reverse(elems))
    nblk = 3
    a = torch.randn(nblk * elems, device="cuda")
    b = torch.empty_like(a)
    f(a, b)
    torch.testing.assert_close(b, a.view(nblk, elems).flip(1).reshape(-1), rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_host_library_embeds_binary():
    """With the CUDA runtime loaded, TIRx compiles during build: no compile at load time."""
    art = build_cuda(make_vadd(), arch=_gpu_arch(), compiler="nvrtc" if HAVE_NVRTC else "nvcc")
    assert art.meta["host_embeds"] == "binary"
    assert art.device_binary in art.host_library


@pytest.mark.cuda
def test_gpu_saved_artifact_and_current_stream(tmp_path):
    """Run from a saved directory, and capture into a CUDA graph on a side stream.

    Graph capture only records work issued on the capturing stream; a launch on any
    other stream would either break the capture or not be replayed.
    """
    import torch

    art = build_cuda(make_vadd(), arch=_gpu_arch(), compiler="nvrtc" if HAVE_NVRTC else "nvcc")
    f = load_kernel(art.save(tmp_path / "vadd"))
    n = 1000
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f(a, b, c)  # warm-up: loads the CUDA module outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        f(a, b, c)
    a.copy_(torch.randn(n, device="cuda"))
    b.copy_(torch.randn(n, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_warp_reduce():
    import torch

    f = _gpu_build(make_warp_reduce())
    a = torch.randint(-50, 50, (32,), device="cuda").float()
    i = torch.randint(-1000, 1000, (32,), device="cuda", dtype=torch.int32)
    o = torch.empty(4, 32, device="cuda")
    oi = torch.empty(32, device="cuda", dtype=torch.int32)
    f(a, i, o, oi)
    lane = torch.arange(32, device="cuda")
    grid = a.view(8, 4)  # lane l sits at row l // 4, column l % 4
    torch.testing.assert_close(o[0], a.sum().expand(32), rtol=0, atol=0)
    torch.testing.assert_close(o[1], grid.max(0).values[lane % 4], rtol=0, atol=0)
    torch.testing.assert_close(o[2], grid.min(1).values[lane // 4], rtol=0, atol=0)
    torch.testing.assert_close(o[3], a.view(2, 16).sum(0)[lane % 16], rtol=0, atol=0)
    torch.testing.assert_close(oi, i.sum().to(torch.int32).expand(32), rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_cp_async():
    import torch

    f = _gpu_build(make_cp_async())
    a = torch.randn(256, device="cuda").half()
    x = torch.randn(64, device="cuda")
    o = torch.full((2, 256), 7.0, device="cuda").half()
    of = torch.full((2, 64), 7.0, device="cuda")
    f(a, x, o, of)
    torch.testing.assert_close(o[0], a, rtol=0, atol=0)
    torch.testing.assert_close(o[1], torch.cat([a[:128], torch.zeros_like(a[128:])]))
    torch.testing.assert_close(of[0], x, rtol=0, atol=0)
    keep = torch.arange(32, device="cuda") % 2 == 0
    tail = torch.where(keep, x[32:], torch.zeros_like(x[32:]))
    torch.testing.assert_close(of[1], torch.cat([x[:32], tail]), rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_atomics():
    import torch

    f = _gpu_build(make_atomics())
    dev = "cuda"
    a = torch.randint(-100, 100, (256,), device=dev).float()
    h = torch.randint(-4, 5, (256,), device=dev).half()
    bf = torch.randint(-1, 2, (256,), device=dev).bfloat16()
    i = torch.randint(-1000, 1000, (256,), device=dev, dtype=torch.int32)

    def init(dtype):
        if dtype == torch.int32:
            info = torch.iinfo(dtype)
            return torch.tensor([0, info.min, info.max], device=dev, dtype=dtype)
        return torch.tensor([0.0, float("-inf"), float("inf")], device=dev, dtype=dtype)

    outs = [init(t.dtype) for t in (a, h, bf, i)]
    f(a, h, bf, i, *outs)
    for src, out in zip((a, h, bf, i), outs):
        # Integer-valued inputs keep every partial sum exact, so the order is irrelevant.
        expect = torch.stack([src.sum().to(src.dtype), src.max(), src.min()])
        torch.testing.assert_close(out, expect, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_mma_m16n8k16(dtype):
    import torch

    f = _gpu_build(make_mma_k16(dtype))
    tdt = getattr(torch, dtype)
    a = torch.randint(-3, 4, (16, 16), device="cuda").to(tdt)
    bt = torch.randint(-3, 4, (8, 16), device="cuda").to(tdt)
    d = torch.empty(16, 8, device="cuda")
    f(a, bt, d)
    torch.testing.assert_close(d, a.float() @ bt.float().t(), rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_mma_tf32_and_s8():
    import torch

    f = _gpu_build(make_mma_tf32())
    a = torch.randint(-8, 9, (16, 8), device="cuda").float() / 4  # exact in tf32
    bt = torch.randint(-8, 9, (8, 8), device="cuda").float() / 4
    d = torch.empty(16, 8, device="cuda")
    f(a, bt, d)
    expect = (a.double() @ bt.double().t()).float()
    torch.testing.assert_close(d, expect, rtol=0, atol=0)

    g = _gpu_build(make_mma_s8())
    a8 = torch.randint(-128, 128, (16, 32), device="cuda", dtype=torch.int8)
    b8 = torch.randint(-128, 128, (8, 32), device="cuda", dtype=torch.int8)
    d32 = torch.empty(16, 8, device="cuda", dtype=torch.int32)
    g(a8, b8, d32)
    expect32 = (
        (a8.cpu().long() @ b8.cpu().long().t()).to(torch.int32).cuda()
    )  # no int64 matmul on CUDA
    torch.testing.assert_close(d32, expect32, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", range(len(LDMATRIX_VARIANTS)))
def test_gpu_ldmatrix(variant):
    import torch

    f = _gpu_build(make_ldmatrix(variant))
    a = torch.arange(256, device="cuda").view(16, 16).half()  # exact small integers
    o = torch.empty(32, 8, device="cuda").half()
    f(a, o)
    _, count, trans = LDMATRIX_VARIANTS[variant]
    expect = torch.tensor(expected_ldmatrix(a.tolist(), count, trans), device="cuda").half()
    torch.testing.assert_close(o, expect, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("order,panel,gx,gy", [("Row", 3, 5, 7), ("Column", 2, 6, 5)])
def test_gpu_rasterization(order, panel, gx, gy):
    import torch

    f = _gpu_build(make_swizzle(order, panel, gx, gy))
    o = torch.full((gy, gx), -1, device="cuda", dtype=torch.int32)
    f(o)
    model = raster_row if order == "Row" else raster_column
    expect = torch.full((gy, gx), -1, dtype=torch.int32)
    for by in range(gy):
        for bx in range(gx):
            x, y = model(panel, bx, by, gx, gy)
            expect[y, x] = bx + by * gx
    assert sorted(expect.flatten().tolist()) == list(range(gx * gy))
    torch.testing.assert_close(o.cpu(), expect, rtol=0, atol=0)
