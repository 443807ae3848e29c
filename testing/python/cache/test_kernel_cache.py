"""The disk kernel cache: hits in and across processes, corruption, concurrency, keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import tilelang
from tilelang.backends.cpu import CpuArtifact, CpuBackend
from tilelang.cache import kernel_cache

HERE = Path(__file__).resolve().parent
REPO = str(Path(tilelang.__file__).resolve().parents[1])
sys.path.insert(0, str(HERE))
import tl_cache_kernels as kernels  # noqa: E402


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache root for this test; memory caches cleared before and after."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(root))
    for name in ("TILELANG_DISABLE_CACHE", "TILELANG_DUMP_IR", "TILELANG_PASS_TIMING"):
        monkeypatch.delenv(name, raising=False)
    tilelang.cache.clear_cache()
    yield root
    tilelang.cache.clear_cache()


@pytest.fixture
def build_count(monkeypatch):
    """Counts CPU builds (the cache must avoid them on a hit)."""
    calls = []
    lock = threading.Lock()
    original = CpuBackend.build

    def counting(self, *args, **kwargs):
        with lock:
            calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CpuBackend, "build", counting)
    return calls


def _forget_memory():
    from tilelang.jit import _LOCK, _MEMORY_CACHE

    with _LOCK:
        _MEMORY_CACHE.clear()


def _entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in (root / "kernels").glob("*/*/entry.json"))


def _check(kernel):
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a + 1)


def test_hit_in_process_loads_without_building(cache_dir, build_count):
    func = kernels.add_one()
    _check(tilelang.compile(func, out_idx=[-1], target="cpu"))
    assert len(build_count) == 1
    (entry,) = _entries(cache_dir)
    meta = json.loads((entry / "entry.json").read_text())
    assert meta["material"]["target"] == {"kind": "cpu"}
    assert set(meta["files"]) == {
        "artifact/kernel.so",
        "artifact/kernel_source.py",
        "artifact/meta.json",
    }
    _forget_memory()
    kernel = tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")  # traced again
    assert len(build_count) == 1
    assert kernel.artifact.lib_path.startswith(str(entry))
    assert "add_one_kernel" in kernel.get_kernel_source()
    _check(kernel)


_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path[:0] = [{repo!r}, {here!r}]  # the tilelang under test, not an installed copy
    import tilelang, torch
    from tilelang.backends.cpu import CpuBackend
    import tl_cache_kernels as kernels

    built = []
    original = CpuBackend.build
    def counting(self, *a, **k):
        built.append(1)
        return original(self, *a, **k)
    CpuBackend.build = counting

    func = kernels.add_one()
    barrier = {barrier!r}
    if barrier:
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.time() + 60
        while len(os.listdir(barrier)) < 2 and time.time() < deadline:
            time.sleep(0.005)
    kernel = tilelang.compile(func, out_idx=[-1], target="cpu")
    a = torch.randn(256)
    torch.testing.assert_close(kernel(a), a + 1)
    print("BUILT", len(built))
    """
)


def _spawn(cache_dir: Path, barrier: str = "") -> subprocess.Popen:
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache_dir))
    env.pop("TILELANG_DISABLE_CACHE", None)
    script = _SCRIPT.format(here=str(HERE), repo=REPO, barrier=barrier)
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _built(proc: subprocess.Popen) -> int:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return int(out.split("BUILT")[1].split()[0])


def test_second_process_reloads_without_compiling(cache_dir):
    assert _built(_spawn(cache_dir)) == 1
    assert _built(_spawn(cache_dir)) == 0
    assert len(_entries(cache_dir)) == 1


def test_two_processes_at_once_build_one_entry(cache_dir, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_spawn(cache_dir, str(barrier)) for _ in range(2)]
    assert sorted(_built(p) for p in procs) == [0, 1]
    (entry,) = _entries(cache_dir)
    CpuArtifact.load(entry / "artifact")  # verifies every file
    assert not list((cache_dir / "tmp").iterdir())


def test_threads_compiling_one_kernel_build_it_once(cache_dir, build_count):
    func = kernels.add_one(block=32)
    results, failures = [], []
    start = threading.Barrier(4)

    def work():
        try:
            start.wait()
            results.append(tilelang.compile(func, out_idx=[-1], target="cpu"))
        except Exception as err:  # noqa: BLE001 - reported below
            failures.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(build_count) == 1
    assert len(_entries(cache_dir)) == 1
    for kernel in results:
        _check(kernel)


@pytest.mark.parametrize(
    "damage",
    ["truncate_library", "flip_source_byte", "garbage_entry_json", "delete_artifact_meta"],
)
def test_corrupt_entry_is_discarded_and_rebuilt(cache_dir, build_count, damage):
    tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")
    (entry,) = _entries(cache_dir)
    if damage == "truncate_library":
        lib = entry / "artifact" / "kernel.so"
        lib.write_bytes(lib.read_bytes()[:100])
    elif damage == "flip_source_byte":
        src = entry / "artifact" / "kernel_source.py"
        data = bytearray(src.read_bytes())
        data[10] ^= 1
        src.write_bytes(bytes(data))
    elif damage == "garbage_entry_json":
        (entry / "entry.json").write_text("{not json")
    else:
        (entry / "artifact" / "meta.json").unlink()
    _forget_memory()
    with pytest.warns(UserWarning, match="rebuilding a bad entry"):
        kernel = tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")
    _check(kernel)
    assert len(build_count) == 2
    (entry,) = _entries(cache_dir)
    CpuArtifact.load(entry / "artifact")
    _forget_memory()
    _check(tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu"))
    assert len(build_count) == 2  # the rebuilt entry is good


def test_disable_env_var_is_honoured(cache_dir, build_count, monkeypatch):
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    assert not tilelang.cache.is_cache_enabled()
    _check(tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu"))
    _forget_memory()
    _check(tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu"))
    assert len(build_count) == 2
    assert not (cache_dir / "kernels").exists()


def test_disable_cache_api(cache_dir, build_count):
    tilelang.cache.disable_cache()
    try:
        tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")
        assert not (cache_dir / "kernels").exists()
    finally:
        tilelang.cache.enable_cache()


def test_clear_cache_removes_entries(cache_dir):
    tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")
    assert _entries(cache_dir)
    tilelang.cache.clear_cache()
    assert not _entries(cache_dir)


def _key(func, **overrides):
    options = dict(
        target={"kind": "cpu"},
        out_idx=[-1],
        execution_backend="auto",
        pass_configs=None,
        compile_flags=None,
    )
    options.update(overrides)
    return kernel_cache.cache_key(func, **options)


def test_key_covers_ir_target_and_options():
    func = kernels.add_one()
    base = _key(func)
    assert _key(kernels.add_one()) == base  # traced again: same key
    assert _key(kernels.add_one(block=32)) != base
    assert _key(kernels.add_one(dtype="float16")) != base
    assert _key(func, target={"kind": "cuda", "arch": "sm_90a"}) != base
    assert _key(func, target={"kind": "cuda", "arch": "sm_80"}) != _key(
        func, target={"kind": "cuda", "arch": "sm_90a"}
    )
    assert _key(func, pass_configs={"tl.disable_warp_specialized": True}) != base
    assert _key(func, pass_configs={"tl.disable_warp_specialized": False}) != _key(
        func, pass_configs={"tl.disable_warp_specialized": True}
    )
    assert _key(func, out_idx=None) != base
    assert _key(func, out_idx=1) == base  # the same output, spelled differently
    assert _key(func, compile_flags=["-O3"]) != base
    # observing a build changes no code: no new key
    assert _key(func, pass_configs={tilelang.PassConfigKey.TL_PASS_PROFILE: True}) == base


def test_key_covers_versions(monkeypatch):
    func = kernels.add_one()
    base = _key(func)
    monkeypatch.setattr(kernel_cache, "_versions", lambda: {"tilelang": "9.9.9"})
    assert _key(func) != base


def test_cpu_artifact_round_trip(tmp_path):
    artifact = CpuBackend().build(kernels.add_one(), target={"kind": "cpu"})
    artifact.save(tmp_path / "a")
    loaded = CpuArtifact.load(tmp_path / "a")
    assert loaded.entry == artifact.entry
    assert loaded.kernel_source == artifact.kernel_source
    (tmp_path / "a" / "kernel.so").write_bytes(b"\0" * 10)
    with pytest.raises(ValueError, match="kernel.so"):
        CpuArtifact.load(tmp_path / "a")


def test_cuda_artifact_is_cached_without_a_gpu(cache_dir, monkeypatch):
    """CudaArtifact.save/load through the cache (compiling needs no GPU; running would)."""
    from tilelang.backends.registry import get_backend

    backend = type(get_backend("cuda"))
    try:
        first = tilelang.compile(kernels.add_one(), out_idx=[-1], target="cuda -arch=sm_80")
    except Exception as err:  # noqa: BLE001 - no CUDA toolchain here
        pytest.skip(f"cannot build for CUDA on this machine: {err}")
    (entry,) = _entries(cache_dir)
    assert (entry / "artifact" / "kernel.cu").is_file()

    def refuse(self, *args, **kwargs):
        raise AssertionError("the cached CUDA artifact should have been loaded")

    monkeypatch.setattr(backend, "build", refuse)
    _forget_memory()
    again = tilelang.compile(kernels.add_one(), out_idx=[-1], target="cuda -arch=sm_80")
    assert again.artifact == first.artifact
    assert again.get_kernel_source() == first.get_kernel_source()


def _sizes(root: Path) -> dict[str, int]:
    return {key: size for _, size, key in kernel_cache.KernelCache(root).entries()}


def test_size_limit_evicts_least_recently_used(cache_dir, monkeypatch):
    blocks = (32, 64, 128)
    for block in blocks:  # three entries, oldest first
        tilelang.compile(kernels.add_one(block=block), out_idx=[-1], target="cpu")
    keys = [_key(kernels.add_one(block=block)) for block in blocks]
    sizes = _sizes(cache_dir)
    assert set(sizes) == set(keys) and all(size > 0 for size in sizes.values())
    for age, key in zip((300, 200, 100), keys):  # distinct last-use times, block 32 oldest
        meta = cache_dir / "kernels" / key[:2] / key / "entry.json"
        os.utime(meta, (meta.stat().st_atime - age, meta.stat().st_mtime - age))
    # a load marks an entry used: block 32 becomes the newest, block 64 the oldest
    _forget_memory()
    _check(tilelang.compile(kernels.add_one(block=32), out_idx=[-1], target="cpu"))
    # room for the new entry and one more: the least recently used two go
    monkeypatch.setenv("TILELANG_CACHE_MAX_BYTES", str(sizes[keys[0]] + sizes[keys[2]] + 2 * 4096))
    _forget_memory()
    tilelang.compile(kernels.add_one(block=16), out_idx=[-1], target="cpu")
    left = set(_sizes(cache_dir))
    assert _key(kernels.add_one(block=16)) in left  # the entry just stored is kept
    assert keys[1] not in left and keys[0] in left, left
    total = sum(_sizes(cache_dir).values())
    assert total <= sizes[keys[0]] + sizes[keys[2]] + 2 * 4096


def test_prune_cache_and_unlimited(cache_dir, monkeypatch):
    tilelang.compile(kernels.add_one(), out_idx=[-1], target="cpu")
    monkeypatch.setenv("TILELANG_CACHE_MAX_BYTES", "none")
    assert tilelang.cache.get_cache_max_bytes() is None
    assert tilelang.cache.prune_cache() == 0 and _entries(cache_dir)
    removed = tilelang.cache.prune_cache(max_bytes=0)
    assert removed > 0 and not _entries(cache_dir)


@pytest.mark.parametrize(
    "text,expected",
    [("8G", 8 << 30), ("512m", 512 << 20), ("1.5K", 1536), ("1000", 1000), ("2GiB", 2 << 30),
     ("0", None), ("none", None)],
)  # fmt: skip
def test_size_limit_parsing(monkeypatch, text, expected):
    monkeypatch.setenv("TILELANG_CACHE_MAX_BYTES", text)
    assert tilelang.cache.get_cache_max_bytes() == expected


@pytest.mark.parametrize("text", ["lots", "-5G", "G"])
def test_bad_size_limit_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("TILELANG_CACHE_MAX_BYTES", text)
    with pytest.raises(ValueError, match="TILELANG_CACHE_MAX_BYTES"):
        tilelang.cache.get_cache_max_bytes()


def test_key_covers_the_cpu_model(monkeypatch):
    func = kernels.add_one()
    monkeypatch.setenv("TILELANG_CPU_MCPU", "generic")
    generic = _key(func)
    monkeypatch.setenv("TILELANG_CPU_MCPU", "x86-64-v3")
    assert _key(func) != generic
    # CUDA keys do not depend on the host CPU model
    cuda = {"kind": "cuda", "arch": "sm_90a"}
    v3 = _key(func, target=cuda)
    monkeypatch.setenv("TILELANG_CPU_MCPU", "generic")
    assert _key(func, target=cuda) == v3
