"""benchmark/matmul.py ``+lbN`` configs: ``__launch_bounds__(T, N)`` only while N is set."""

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


def _bench():
    sys.path.insert(0, str(ROOT / "benchmark"))
    try:
        import matmul
    finally:
        sys.path.pop(0)
    return matmul


def _bounds(src):
    return sorted({line.split("__launch_bounds__")[1].split(")")[0] + ")" for line in
                   src.splitlines() if "__launch_bounds__" in line})  # fmt: skip


def test_launch_bounds_hook_min_blocks():
    from tilelang.backends.cuda import build as cuda_build
    from tilelang.backends.cuda import pipeline

    if not cuda_build._nvrtc_available() and not shutil.which("nvcc"):
        pytest.skip("no CUDA compiler")
    matmul = _bench()
    func = matmul.matmul_kernel(256, 256, 256, 128, 128, 32, 256, 3, "float16", "float16")
    matmul._install_launch_bounds_hook()
    matmul._install_launch_bounds_hook()  # idempotent
    matmul._MIN_BLOCKS[0] = 2
    try:
        src = pipeline.build(func, {"kind": "cuda", "arch": "sm_90"}).get_kernel_source()
    finally:
        matmul._MIN_BLOCKS[0] = 0
    assert _bounds(src) == ["(256, 2)"]
    assert "tl::mma_m16n8k16" in src  # headers still pasted by the backend's own hook
    src = pipeline.build(func, {"kind": "cuda", "arch": "sm_90"}).get_kernel_source()
    assert _bounds(src) == ["(256)"]
    names = [c["name"] for c in matmul.CONFIGS + matmul.EXTRA]
    assert "128x128x32/256t/4s+lb2" in names
