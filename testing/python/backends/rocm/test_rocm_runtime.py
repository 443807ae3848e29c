"""Host side of the ROCm backend, as far as a machine without an AMD GPU allows: the kernel
signature, argument checks and packing, grid evaluation and the hipModuleLaunchKernel call
(through a fake driver); the real libamdhip64 (when installed) refusing without a device."""

from __future__ import annotations

import ctypes

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.rocm import build as rocm_build
from tilelang.backends.rocm import pipeline, runtime

n = T.dynamic("n")


@T.prim_func
def add_one(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
    with T.Kernel(T.ceildiv(n, 4), threads=256) as bx:
        for i, j in T.Parallel(4, 64):
            B[bx * 4 + i, j] = A[bx * 4 + i, j] + 1.0


class FakeDriver:
    """Records what the launcher asks of the HIP runtime."""

    def __init__(self):
        self.calls = []

    def set_device(self, index):
        self.calls.append(("set_device", index))

    def load_module(self, image):
        self.calls.append(("load_module", image[:4]))
        return "module"

    def get_function(self, module, name):
        self.calls.append(("get_function", module, name))
        return "fn"

    def launch(self, fn, grid, block, shared, stream, args):
        values = [a.value for a in args]
        self.calls.append(("launch", fn, grid, block, shared, stream, values))


@pytest.fixture(scope="module")
def artifact():
    art = pipeline.build(add_one, {"kind": "rocm", "arch": "gfx90a"})
    if art.code_object is None:  # no hipcc: the launcher still needs a code object to accept
        art = rocm_build.HipArtifact(art.kernel_source, b"\x7fELF-fake", art.meta)
    return art


def test_signature_and_launch_config(artifact):
    kernel = runtime.load_kernel(artifact, FakeDriver(), device_type="cpu")
    assert kernel.signature == [("float*", "A_ptr"), ("float*", "B_ptr"), ("int", "n")]
    a, b = torch.zeros(10, 64), torch.zeros(10, 64)
    tensors, dims = kernel.bind((a, b))
    assert dims == {"n": 10}
    assert kernel.launch_config(dims) == ((3, 1, 1), (256, 1, 1), 0)
    values = [v.value for v in kernel.pack(tensors, dims)]
    assert values == [a.data_ptr(), b.data_ptr(), 10]


def test_launch_goes_to_the_current_stream(artifact, monkeypatch):
    driver = FakeDriver()
    kernel = runtime.load_kernel(artifact, driver, device_type="cpu")

    class Stream:
        cuda_stream = 0x1234

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    a, b = torch.zeros(7, 64), torch.zeros(7, 64)
    kernel(a, b)
    kernel(a, b)
    kinds = [c[0] for c in driver.calls]
    assert kinds == ["set_device", "load_module", "get_function", "launch", "launch"]
    launch = driver.calls[-1]
    assert launch[1:6] == ("fn", (2, 1, 1), (256, 1, 1), 0, 0x1234)
    assert launch[6] == [a.data_ptr(), b.data_ptr(), 7]


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((torch.zeros(4, 64),), TypeError, "expected 2 arguments"),
        (
            (torch.zeros(4, 64), torch.zeros(4, 64, dtype=torch.float16)),
            TypeError,
            "B must be float32",
        ),
        ((torch.zeros(4, 64), torch.zeros(4, 63)), ValueError, r"B.shape\[1\] must be 64"),
        ((torch.zeros(4, 64), torch.zeros(5, 64)), ValueError, "but n = 4"),
        ((torch.zeros(4, 64), torch.zeros(64, 4).t()), ValueError, "rank|contiguous|must be 64"),
    ],
)
def test_bad_arguments_name_the_parameter(artifact, args, error, match):
    kernel = runtime.load_kernel(artifact, FakeDriver(), device_type="cpu")
    with pytest.raises(error, match=match):
        kernel(*args)


def test_host_tensors_are_refused(artifact):
    kernel = runtime.load_kernel(artifact, FakeDriver())
    with pytest.raises(ValueError, match="A must be on the GPU, got one on cpu"):
        kernel(torch.zeros(4, 64), torch.zeros(4, 64))


def test_eval_extent():
    assert runtime.eval_extent("(n + 128 - 1) // 128", {"n": 300}) == 3
    assert runtime.eval_extent("min(n, 4) * 2", {"n": 3}) == 6
    with pytest.raises(runtime.HipRuntimeError, match="unbound"):
        runtime.eval_extent("m + 1", {})
    with pytest.raises(runtime.HipRuntimeError, match="cannot evaluate"):
        runtime.eval_extent("__import__('os')", {})


def test_artifact_without_code_object_is_refused(artifact):
    bare = rocm_build.HipArtifact(artifact.kernel_source, None, artifact.meta)
    with pytest.raises(runtime.HipRuntimeError, match="no code object"):
        runtime.load_kernel(bare)


def test_real_runtime_without_a_device(artifact):
    try:
        driver = runtime.HipDriver()
    except runtime.HipRuntimeError as err:
        pytest.skip(f"libamdhip64 not installed: {err}")
    kernel = runtime.load_kernel(artifact, driver)
    with pytest.raises(runtime.HipRuntimeError, match="hipSetDevice|hipModuleLoadData"):
        kernel._function(0)
    assert isinstance(driver.lib, ctypes.CDLL)


def test_compile_for_hip_target_through_tilelang_compile():
    kernel = tilelang.compile(add_one, target="hip")
    assert kernel.artifact.meta["arch"] == "gfx90a"
    assert kernel.artifact.meta["kernel_names"] == ["add_one_kernel"]
    lowered = tilelang.lower(add_one, target="rocm")
    assert "lower_tile_ops" in lowered.stages and "__global__" in lowered.stages["source"]


def test_jit_kernel_call_path(artifact, monkeypatch):
    # the JITKernel path of a ROCm kernel: out_idx allocation + launch through the loader
    driver = FakeDriver()
    from tilelang.backends.rocm import RocmBackend

    monkeypatch.setattr(
        RocmBackend, "load", lambda self, art: runtime.load_kernel(art, driver, device_type="cpu")
    )

    class Stream:
        cuda_stream = 7

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    kernel = tilelang.compile(add_one, out_idx=-1, target="hip")
    a = torch.randn(9, 64)
    out = kernel(a)
    assert out.shape == (9, 64) and out.dtype == torch.float32
    launch = driver.calls[-1]
    assert launch[0] == "launch" and launch[2] == (3, 1, 1) and launch[5] == 7
    assert launch[6] == [a.data_ptr(), out.data_ptr(), 9]


@pytest.mark.parametrize("target", ["hip", "metal"])
def test_artifacts_go_through_the_disk_cache(target, tmp_path, monkeypatch):
    from tilelang.backends.metal import pipeline as metal_pipeline

    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    module = pipeline if target == "hip" else metal_pipeline
    builds = []
    real = module.build
    monkeypatch.setattr(module, "build", lambda *a, **k: builds.append(1) or real(*a, **k))
    from tilelang.jit import clear_memory_cache

    clear_memory_cache()
    first = tilelang.compile(add_one, target=target)
    clear_memory_cache()  # the second compile must come from disk, not from memory
    second = tilelang.compile(add_one, target=target)
    assert len(builds) == 1, "the second compile must be served from the disk cache"
    assert second.artifact.kernel_source == first.artifact.kernel_source
    assert second.artifact.meta == first.artifact.meta
    if target == "hip":
        assert second.artifact.code_object == first.artifact.code_object
    saved = first.artifact.save(tmp_path / "copy")
    (saved / ("kernel.hip" if target == "hip" else "kernel.metal")).write_text("tampered")
    with pytest.raises(tilelang.errors.CompileError, match="does not match"):
        type(first.artifact).load(saved)


def test_several_kernel_blocks_compile_but_do_not_launch(monkeypatch):
    from vendor_kernels import two_kernels

    from tilelang.backends.metal import pipeline as metal_pipeline

    func = two_kernels.get_tir(100)
    monkeypatch.setattr(rocm_build, "find_toolchain", lambda: None)
    artifact = pipeline.build(func, {"kind": "rocm", "arch": "gfx90a"})
    assert len(artifact.meta["kernel_names"]) == 2
    assert artifact.kernel_source.count('extern "C" __global__') == 4  # declaration + definition
    with pytest.raises(runtime.HipRuntimeError, match="one T.Kernel block; this one has 2"):
        runtime.load_kernel(
            rocm_build.HipArtifact(artifact.kernel_source, b"\x7fELF", artifact.meta)
        )
    msl = metal_pipeline.build(func, {"kind": "metal"}).kernel_source
    assert msl.count("kernel void ") == 2
