"""The host C compile overlapped with the device compile (backends/cuda/overlap.py).

CPU tests (nvcc/ptxas on PATH, or NVRTC through cuda-bindings, and a C compiler): the
overlapped build must produce the same artifact as the sequential one (CUDA source,
device binary, host code, direct-launch report), link the object compiled early, and
clean up after itself when the early guess is wrong or the device compile fails.
"""

import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from cuda_build_kernels import make_vadd

from tilelang.backends.cuda import build_cuda, overlap
from tilelang.backends.cuda import headers as cuda_headers
from tilelang.backends.cuda import host_library as cuda_host_library
from tilelang.backends.cuda.errors import CudaBuildError

HAVE_NVCC = shutil.which("nvcc") is not None and shutil.which("ptxas") is not None
HAVE_CC = cuda_host_library._c_compiler() is not None and sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(
    not (HAVE_NVCC and HAVE_CC), reason="needs nvcc/ptxas and a C compiler on Linux"
)
_REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def early_jobs(monkeypatch):
    """The HostObjects started during the test, in order."""
    jobs = []
    original = cuda_host_library.start_host_object

    def spy(*args, **kwargs):
        job = original(*args, **kwargs)
        jobs.append(job)
        return job

    monkeypatch.setattr(cuda_host_library, "start_host_object", spy)
    return jobs


def _build(on: bool, monkeypatch, **kwargs):
    monkeypatch.setattr(overlap, "OVERLAP_HOST", on)
    return build_cuda(make_vadd(), arch="sm_90a", compiler="nvcc", **kwargs)


def _same_artifact(a, b):
    assert a.kernel_source == b.kernel_source
    assert a.device_binary == b.device_binary
    assert a.host_source == b.host_source
    for key in ("direct_launch_kernels", "device_format"):
        assert a.meta[key] == b.meta[key]
    # the reasons may name the build's temporary files
    temp = re.compile(r"/\S*/tilelang_cuda_\w+/((early|workspace)/)?")
    skipped = [
        {k: temp.sub("<tmp>/", v) for k, v in x.meta["direct_launch_skipped"].items()}
        for x in (a, b)
    ]
    assert skipped[0] == skipped[1]


def _closed(job):
    return not os.path.exists(job.root) and job.proc.poll() is not None


@pytest.mark.parametrize("direct_launch", [True, False])
def test_overlapped_build_is_the_sequential_build(monkeypatch, early_jobs, direct_launch):
    sequential = _build(False, monkeypatch, direct_launch=direct_launch)
    assert early_jobs == []
    overlapped = _build(True, monkeypatch, direct_launch=direct_launch)
    _same_artifact(overlapped, sequential)
    assert overlapped.meta["direct_launch_kernels"] == (["vadd_kernel"] if direct_launch else [])
    (job,) = early_jobs
    assert job.used, "the export compiled the host file again instead of linking the early object"
    assert _closed(job)
    assert overlapped.device_binary in overlapped.host_library


def test_switch_reads_the_environment(monkeypatch):
    monkeypatch.setattr(overlap, "OVERLAP_HOST", None)
    monkeypatch.delenv("TILELANG_CUDA_OVERLAP_HOST", raising=False)
    assert not overlap.overlap_enabled()  # opt-in
    monkeypatch.setenv("TILELANG_CUDA_OVERLAP_HOST", "0")
    assert not overlap.overlap_enabled()
    monkeypatch.setenv("TILELANG_CUDA_OVERLAP_HOST", "1")
    assert overlap.overlap_enabled()
    monkeypatch.setenv("TILELANG_CUDA_OVERLAP_HOST", "maybe")
    with pytest.raises(ValueError, match="TILELANG_CUDA_OVERLAP_HOST"):
        overlap.overlap_enabled()


def test_a_wrong_guess_is_compiled_again(monkeypatch, early_jobs):
    """The early compile took other text: the export compiles its own file and links it."""
    sequential = _build(False, monkeypatch)
    original = cuda_host_library._direct_launch_source

    def other_text(text, kernels):
        patched, applied, skipped = original(text, kernels)
        return patched + "\n/* not what the export writes */\n", applied, skipped

    monkeypatch.setattr(cuda_host_library, "_direct_launch_source", other_text)
    overlapped = _build(True, monkeypatch)
    _same_artifact(overlapped, sequential)
    (job,) = early_jobs
    assert not job.used and _closed(job)


def test_device_compile_error_stops_the_early_compile(monkeypatch, early_jobs):
    def failing(source, config):
        time.sleep(0.2)
        raise RuntimeError("device compiler says no")

    monkeypatch.setattr(cuda_headers, "_compile_device_source", failing)
    with pytest.raises(CudaBuildError, match="device compiler says no"):
        _build(True, monkeypatch)
    (job,) = early_jobs
    assert _closed(job)


def test_early_compile_failure_falls_back_to_the_packed_call(monkeypatch, tmp_path, early_jobs):
    """A C compiler that rejects the direct-launch code: the original host code is used
    (as without the overlap), and the early object is not linked."""
    real = cuda_host_library._c_compiler()
    fake = tmp_path / "cc"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in *.c) '
        'if grep -q __tilelang_cubin "$a"; then echo no direct launch >&2; exit 1; fi;; '
        "esac; done\n"
        f'exec {" ".join(real)} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    sequential = _build(False, monkeypatch)
    overlapped = _build(True, monkeypatch)
    _same_artifact(overlapped, sequential)
    assert overlapped.meta["direct_launch_kernels"] == []
    assert "did not compile" in overlapped.meta["direct_launch_skipped"]["*"]
    (job,) = early_jobs
    assert job.used and _closed(job)


@pytest.fixture
def runtime_factory():
    """A stand-in for the CUDA runtime's ``ffi.Module.create.cuda`` (which compiles the
    source it is given when called), as on a GPU host; removed afterwards."""
    import tvm_ffi

    name = cuda_headers._FACTORY_NAME
    if tvm_ffi.get_global_func(name, allow_missing=True) is not None:
        pytest.skip("a real CUDA module factory is registered in this process")
    calls = []
    fallback = tvm_ffi.get_global_func(cuda_headers._FALLBACK_FACTORY_NAME)

    def factory(data, fmt, fmap, source_map):
        # as TIRx's CUDA runtime does: the compile callback, with the group's backend config
        calls.append((str(fmt), time.monotonic()))
        compile_callback = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
        code = bytes(data).decode()
        binary, binary_format = compile_callback(code, source_map["backend_config"])
        return fallback(bytes(binary), str(binary_format), fmap, source_map)

    tvm_ffi.register_global_func(name, factory)
    try:
        yield calls
    finally:
        tvm_ffi.remove_global_func(name)
        cuda_headers._REAL_FACTORY = None


@pytest.mark.parametrize("direct_launch", [True, False])
def test_overlap_with_the_cuda_runtime_factory(
    monkeypatch, runtime_factory, early_jobs, direct_launch
):
    sequential = _build(False, monkeypatch, direct_launch=direct_launch)
    started = []
    original_start = cuda_host_library.HostObject.start

    def start(self, cc):
        started.append(time.monotonic())
        return original_start(self, cc)

    monkeypatch.setattr(cuda_host_library.HostObject, "start", start)
    overlapped = _build(True, monkeypatch, direct_launch=direct_launch)
    _same_artifact(overlapped, sequential)
    assert [fmt for fmt, _ in runtime_factory] == ["cuda", "cuda"]
    (job,) = early_jobs
    assert job.used and _closed(job)
    # the runtime's factory (the device compile) ran after the host compile started
    assert started and runtime_factory[-1][1] >= started[0]


def test_readme_gemm_source_is_unchanged(monkeypatch, early_jobs):
    """The README GEMM (persistent, TMA, wgmma): same CUDA source, cubin and host code."""
    sys.path.insert(0, str(_REPO / "benchmark"))
    try:
        import compile_time
    finally:
        sys.path.pop(0)
    from tilelang.jit.kernel import JITKernel

    func, out_idx = compile_time.gemm_func()
    target = {"kind": "cuda", "arch": "sm_90a"}
    monkeypatch.setattr(overlap, "OVERLAP_HOST", False)
    sequential = JITKernel(func, out_idx=out_idx, target=target).artifact
    monkeypatch.setattr(overlap, "OVERLAP_HOST", True)
    overlapped = JITKernel(func, out_idx=out_idx, target=target).artifact
    _same_artifact(overlapped, sequential)
    assert "wgmma" in overlapped.kernel_source and overlapped.device_binary
    (job,) = early_jobs
    assert job.used and _closed(job)


def test_c_host_hook_runs_only_at_the_export(monkeypatch, early_jobs):
    """With ``register_c_postproc`` hooked, the host file is compiled by the export only
    (after the hook), and the hook runs as often as without the overlap."""
    import tilelang
    from tilelang.engine import callback

    seen = []

    def hook(code, target):
        seen.append(code)
        return code + "\nint tilelang_overlap_hook_marker = 1;\n"

    tilelang.register_c_postproc(hook)
    try:
        sequential = _build(False, monkeypatch)
        calls = len(seen)
        overlapped = _build(True, monkeypatch)
    finally:
        callback.clear("c")
    assert early_jobs == [None]
    assert calls >= 1 and len(seen) == 2 * calls
    _same_artifact(overlapped, sequential)
    assert b"tilelang_overlap_hook_marker" in overlapped.host_library
