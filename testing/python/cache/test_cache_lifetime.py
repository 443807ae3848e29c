"""A CPU kernel keeps working when the files it came from go away (eviction, clear_cache,
deletion), and a fresh CPU compile leaves no temporary directory behind."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.cache import kernel_cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tl_cache_kernels as kernels  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache root and an empty private temp dir; memory caches cleared around."""
    root = tmp_path / "cache"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(root))
    monkeypatch.delenv("TILELANG_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    tilelang.cache.clear_cache()
    yield root
    tilelang.cache.clear_cache()


def _forget_memory():
    from tilelang.jit import _LOCK, _MEMORY_CACHE

    with _LOCK:
        _MEMORY_CACHE.clear()


def _check(kernel, n=256):
    a = torch.randn(n, dtype=torch.float64).float()
    torch.testing.assert_close(kernel(a).double(), (a + 1).double(), rtol=0, atol=0)


def _entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "kernels").glob("*/*/entry.json"))


def _loaded_not_called(root: Path, n=256):
    """A kernel compiled and stored, then loaded from the disk cache and not called yet."""
    tilelang.compile(kernels.add_one(n), out_idx=[-1], target="cpu")
    _forget_memory()
    kernel = tilelang.compile(kernels.add_one(n), out_idx=[-1], target="cpu")
    (entry,) = _entries(root)
    assert kernel.artifact.lib_path.startswith(str(entry))  # really a disk hit
    return kernel, entry


@pytest.mark.parametrize("how", ["clear_cache", "delete_entry", "prune"])
def test_loaded_kernel_survives_its_entry(cache_dir, how):
    kernel, entry = _loaded_not_called(cache_dir)
    if how == "clear_cache":
        tilelang.cache.clear_cache()
    elif how == "delete_entry":
        shutil.rmtree(entry)
    else:
        kernel_cache.KernelCache().prune(0)
    assert not entry.exists()
    _check(kernel)
    _check(kernel)


def test_jit_factory_kernel_survives_clear_cache(cache_dir):
    @tilelang.jit(out_idx=[-1], target="cpu")
    def factory(n):
        return kernels.add_one(n)

    factory(192)
    _forget_memory()

    @tilelang.jit(out_idx=[-1], target="cpu")
    def factory2(n):
        return kernels.add_one(n)

    kernel = factory2(192)  # a disk hit
    tilelang.cache.clear_cache()
    assert factory2(192) is kernel
    _check(factory2(192), 192)


def test_fresh_compile_leaves_no_temp_directory(cache_dir, monkeypatch):
    before = set(Path(tempfile.gettempdir()).iterdir())
    kernel = tilelang.compile(kernels.add_one(320), out_idx=[-1], target="cpu")
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    _forget_memory()
    uncached = tilelang.compile(kernels.add_one(448), out_idx=[-1], target="cpu")
    leftovers = [p for p in Path(tempfile.gettempdir()).iterdir() if p not in before]
    assert [p.name for p in leftovers if p.name.startswith("tilelang_cpu_")] == []
    _check(kernel, 320)
    _check(uncached, 448)


def test_export_library_after_temp_cleanup(cache_dir, tmp_path):
    @T.prim_func
    def neg(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(16):
                B[i] = -A[i]

    kernel = tilelang.compile(neg, target="cpu")
    path = tmp_path / "neg.so"
    kernel.export_library(str(path))
    import tvm_ffi

    a = torch.randn(16)
    b = torch.empty(16)
    tvm_ffi.load_module(str(path))["neg"](a, b)
    torch.testing.assert_close(b, -a)
