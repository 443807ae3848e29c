"""The mma gemm + cp.async pipeline compile with nvcc for sm_80 and sm_90a, without spills.

Built through the CUDA pipeline with ``tl.disable_wgmma`` (the mma.sync path on sm_90a too).
GPU runs are marked ``cuda``.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_kernels import build_mma, make  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ARCH_FLAGS = {
    "sm_80": ["-arch=sm_80"],
    "sm_90": ["-arch=sm_90"],
    "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"],
}


def ptxas_report(source: str, arch: str, tmp_path) -> dict:
    """Registers/spills of ``source`` from ``nvcc -Xptxas -v``, and its PTX text."""
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    flags = ARCH_FLAGS[arch]
    out = subprocess.run(
        [
            "nvcc",
            "-cubin",
            *flags,
            "--use_fast_math",
            "-Xptxas",
            "-v",
            "-o",
            str(tmp_path / "k.cubin"),
            str(cu),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    ptx = subprocess.run(
        ["nvcc", "-ptx", *flags, "-o", "-", str(cu)], capture_output=True, text=True, check=True
    ).stdout
    regs = int(re.search(r"Used (\d+) registers", out).group(1))
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", out)]
    return {"registers": regs, "spill_bytes": sum(spills), "log": out, "ptx": ptx}


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_readme_gemm_no_spills(arch, tmp_path):
    art = build_mma(make(bM=128, bN=128, bK=32, threads=128, stages=3), arch)
    rep = ptxas_report(art.get_kernel_source(), arch, tmp_path)
    assert rep["spill_bytes"] == 0, rep["log"]
    assert rep["registers"] <= 255
    assert rep["ptx"].count("mma.sync.aligned.m16n8k16") == 64  # 4x8 tiles x 2 k16 per warp
    assert "ldmatrix.sync.aligned.m8n8.x4" in rep["ptx"]
    assert "cp.async.cg.shared.global" in rep["ptx"]
    assert "cp.async.wait_group 1" in rep["ptx"]


@needs_nvcc
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_transposes_compile(ta, tb, dtype, tmp_path):
    art = build_mma(make(ta=ta, tb=tb, dtype=dtype, stages=2), "sm_80")
    rep = ptxas_report(art.get_kernel_source(), "sm_80", tmp_path)
    assert rep["spill_bytes"] == 0, rep["log"]
    kind = "bf16" if dtype == "bfloat16" else "f16"
    assert f"m16n8k16.row.col.f32.{kind}.{kind}.f32" in rep["ptx"]


@needs_nvcc
@pytest.mark.parametrize(
    "cfg",
    [
        dict(bM=128, bN=256, bK=32, threads=256, stages=3),
        dict(bM=128, bN=128, bK=32, threads=256, stages=4),
    ],
)
def test_benchmark_configs_no_spills(cfg, tmp_path):
    art = build_mma(make(M=4096, N=4096, K=4096, **cfg), "sm_90a")
    rep = ptxas_report(art.get_kernel_source(), "sm_90a", tmp_path)
    assert rep["spill_bytes"] == 0, rep["log"]


# The best mma.sync configs of benchmark/matmul.py on the H200 (bK=64, 8 warps, up to 192 KB
# of dynamic shared memory), built for sm_90 (no wgmma) as the benchmark builds them.
BIG_MMA_CONFIGS = [
    dict(bM=128, bN=256, bK=64, threads=256, stages=4),
    dict(bM=256, bN=128, bK=64, threads=256, stages=3),
]


@needs_nvcc
@pytest.mark.parametrize("cfg", BIG_MMA_CONFIGS)
def test_big_mma_configs_no_spills(cfg, tmp_path):
    import tilelang

    kernel = tilelang.compile(make(M=8192, N=8192, K=8192, **cfg), target="cuda -arch=sm_90")
    rep = ptxas_report(kernel.get_kernel_source(), "sm_90", tmp_path)
    assert rep["spill_bytes"] == 0, rep["log"]
    assert "mma.sync.aligned.m16n8k16" in rep["ptx"]
    assert "wgmma" not in rep["ptx"]


@pytest.mark.cuda
@pytest.mark.parametrize("cfg", BIG_MMA_CONFIGS)
def test_big_mma_configs_match_torch_with_tails(cfg):
    """The benchmark's large mma.sync tiles on shapes that are not tile multiples."""
    import torch

    import tilelang

    m, n, k = 300, 520, 200
    kernel = tilelang.compile(make(M=m, N=n, K=k, **cfg), target="cuda -arch=sm_90")
    a = torch.randn((m, k), dtype=torch.float16, device="cuda")
    b = torch.randn((k, n), dtype=torch.float16, device="cuda")
    c = torch.empty((m, n), dtype=torch.float32, device="cuda")
    kernel(a, b, c)
    torch.testing.assert_close(c, a.double().matmul(b.double()).float(), rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(256, 256, 128), (200, 136, 96)])
def test_gemm_matches_torch(ta, tb, dtype, shape):
    import torch

    from tilelang.backends.cuda.runtime import load_kernel

    m, n, k = shape
    cap = torch.cuda.get_device_capability()
    arch = "sm_90a" if cap[0] == 9 else f"sm_{cap[0]}{cap[1]}"
    kern = load_kernel(build_mma(make(M=m, N=n, K=k, ta=ta, tb=tb, dtype=dtype), arch))
    tdt = getattr(torch, dtype)
    a = torch.randn((k, m) if ta else (m, k), dtype=tdt, device="cuda")
    b = torch.randn((n, k) if tb else (k, n), dtype=tdt, device="cuda")
    c = torch.empty((m, n), dtype=torch.float32, device="cuda")
    kern(a, b, c)
    ref = (a.T if ta else a).float() @ (b.T if tb else b).float()
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_pipelined_copy_with_zero_fill_and_alignment_fallback_builds(arch):
    """A pipelined copy whose tile start is not provably 16-byte aligned (K = 500) and that
    zero-fills its tail has two forms (vector / scalar fallback) that both hold the zero fill:
    each form gets loop variables of its own (TIRx rejects a loop variable bound twice).
    The kernel: the split-K example at the shape that found it."""
    from example_loader import load_example

    from tilelang.backends.cuda import pipeline

    example = load_example("gemm_splitk/example_gemm_splitk.py")
    func = example.matmul_splitk.get_tir(100, 72, 500, split_k=3)
    artifact = pipeline.build(func, {"kind": "cuda", "arch": arch, "compiler": "nvcc"})
    assert "tl::is_aligned" in artifact.get_kernel_source()  # both forms are there
