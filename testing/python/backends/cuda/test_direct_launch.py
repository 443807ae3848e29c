"""Direct kernel launch from the C host library (``direct_launch.DIRECT_LAUNCH``).

With the option on, ``build_cuda`` rewrites each kernel launch of TIRx's C host code (a
``TVMFFIFunctionCall`` into TIRx's CUDA module) into a ``cuLaunchKernel`` of a function
loaded from a second, raw copy of the cubin. CPU tests check the rewrite (it compiles, no
packed launch call is left, the flag-off path is unchanged); GPU tests (``cuda``) compare
results with torch on the default and on a side stream.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tilelang.language as T
from tilelang.backends.cuda import direct_launch as cuda_direct_launch
from tilelang.backends.cuda import pipeline

ARCH = "sm_90a"


def _arch():
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    except ImportError:
        pass
    return ARCH


def _build(func, direct, monkeypatch):
    monkeypatch.setattr(cuda_direct_launch, "DIRECT_LAUNCH", direct)
    return pipeline.build(func, {"kind": "cuda", "arch": _arch()})


def tiny_add():
    @T.prim_func
    def tiny_add_kernel(
        A: T.Tensor((256,), "float32"),
        B: T.Tensor((256,), "float32"),
        C: T.Tensor((256,), "float32"),
    ):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(256):
                C[i] = A[i] + B[i]

    return tiny_add_kernel


def gemm(M=512, N=512, K=512, bM=128, bN=128, bK=64, stages=4, dtype="float16"):
    """The README GEMM with 128x128x64 tiles and 4 stages: 128 KB of dynamic shared memory."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), dtype)
            Bs = T.alloc_shared((bK, bN), dtype)
            Cf = T.alloc_fragment((bM, bN), "float")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bM, bx * bN])

    return main


def scale_dynamic():
    """Symbolic length, an int32 and a float32 kernel parameter, grid from the shape."""
    N = T.dynamic("N")

    @T.prim_func
    def scale(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32"), s: T.float32):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    C[bx * 128 + i] = A[bx * 128 + i] * s

    return scale


def _launch_calls(source):
    """Packed calls left in the host code, except the TIRx runtime's (TMA map encoding)."""
    calls = re.findall(r"TVMFFIFunctionCall\((\w+)_packed", source)
    return [c for c in calls if not c.startswith("runtime_")]


# --------------------------------------------------------------------------- CPU


@pytest.mark.parametrize("factory", [tiny_add, gemm, scale_dynamic])
def test_rewrite_compiles_and_drops_packed_launch(factory, monkeypatch):
    artifact = _build(factory(), True, monkeypatch)
    meta = artifact.meta
    assert meta["direct_launch"] is True
    assert meta["direct_launch_kernels"] == meta["kernel_names"], meta["direct_launch_skipped"]
    source = artifact.get_host_source()
    for name in meta["kernel_names"]:
        # The only packed call left is the fallback inside the launch helper.
        assert f"{name}_packed, (TVMFFIAny*) stack_ffi_any" in source
        assert f"TVMFFIFunctionCall({name}_packed" not in source
    assert _launch_calls(source) == []
    assert "__tl_dl_launch0(" in source and "cuLaunchKernel" in source
    assert artifact.host_library[:4] == b"\x7fELF"
    nm = shutil.which("nm")
    if nm:
        path = Path(pytest.importorskip("tempfile").mkdtemp()) / "host.so"
        path.write_bytes(artifact.host_library)
        symbols = subprocess.run([nm, str(path)], capture_output=True, text=True).stdout
        assert "__tilelang_cubin" in symbols
        dynamic = subprocess.run([nm, "-D", str(path)], capture_output=True, text=True).stdout
        assert "cuLaunchKernel" not in dynamic  # resolved with dlsym, libcuda not linked
        assert "__tvm_ffi___tilelang_direct_launch_counts" in dynamic


def test_gemm_passes_dynamic_shared_memory(monkeypatch):
    artifact = _build(gemm(), True, monkeypatch)
    source = artifact.get_host_source()
    assert "unsigned smem = (unsigned)args[" in source
    sizes = [int(v) for v in re.findall(r"v_int64\) = \(int64_t\)(\d+);", source)]
    assert max(sizes) > 48 * 1024


def test_flag_off_leaves_host_code_unchanged(monkeypatch):
    off = _build(tiny_add(), False, monkeypatch)
    assert off.meta["direct_launch"] is False
    assert off.meta["direct_launch_kernels"] == []
    source = off.get_host_source()
    assert "__tl_dl_" not in source and "__tilelang_cubin" not in source
    assert _launch_calls(source) == off.meta["kernel_names"]
    on = _build(tiny_add(), True, monkeypatch)
    # The rewrite only adds the helpers and swaps the call.
    stripped = on.get_host_source()
    start = stripped.index("\n/* ---- tilelang direct launch")
    end = stripped.index("#ifdef __cplusplus", start)
    stripped = stripped[:start] + stripped[end:]
    stripped = re.sub(
        r"__tl_dl_launch0\((\w+_packed), (\(TVMFFIAny\*\) \w+), (\d+), (&\w+), \w+\)",
        r"TVMFFIFunctionCall(\1, \2, \3, \4)",
        stripped,
    )
    assert stripped == source


def test_environment_variable_is_read_at_each_build(monkeypatch):
    """``TILELANG_CUDA_DIRECT_LAUNCH`` decides while the module flag is None (the switch
    itself: ``test_compile_time.py::test_build_driver_switch``)."""
    monkeypatch.setattr(cuda_direct_launch, "DIRECT_LAUNCH", None)
    monkeypatch.setenv("TILELANG_CUDA_DIRECT_LAUNCH", "0")
    off = pipeline.build(tiny_add(), {"kind": "cuda", "arch": _arch()})
    assert off.meta["direct_launch"] is False
    assert _launch_calls(off.get_host_source()) == off.meta["kernel_names"]
    monkeypatch.setenv("TILELANG_CUDA_DIRECT_LAUNCH", "1")
    on = pipeline.build(tiny_add(), {"kind": "cuda", "arch": _arch()})
    assert on.meta["direct_launch"] is True and on.meta["direct_launch_kernels"]


def test_unsupported_kernels_keep_the_packed_call():
    host = (
        "#include <x.h>\n#ifdef __cplusplus\n#endif\nint f(void) {\n"
        "  int32_t s = TVMBackendSetDevice(2, dev_id);\n"
        "  if (TVMFFIFunctionCall(k_kernel_packed, (TVMFFIAny*) stack_ffi_any, 3, &r) != 0) {}\n"
        "}\n"
    )
    info = {
        "arg_types": ["handle"],
        "launch_param_tags": ["blockIdx.x", "threadIdx.x"],
        "arg_extra_tags": [0],
        "cuda_launch_fields": 0,
        "cuda_kernel_attrs": 0,
    }
    out, applied, skipped = cuda_direct_launch._direct_launch_source(host, {"k_kernel": info})
    assert applied == ["k_kernel"] and skipped == {}
    assert "__tl_dl_launch0(k_kernel_packed, (TVMFFIAny*) stack_ffi_any, 3, &r, dev_id)" in out
    cases = {
        "launch tag": {"launch_param_tags": ["blockIdx.x", "tirx.use_cooperative_launch"]},
        "passes 3 values": {"launch_param_tags": ["blockIdx.x"]},
        "parameter type": {"arg_types": ["float16"]},
        "parameter tags": {"arg_extra_tags": [2]},  # 1 (a grid-constant tensor map) is fine
        "launch fields": {"cuda_launch_fields": 1},
    }
    for why, change in cases.items():
        out, applied, skipped = cuda_direct_launch._direct_launch_source(
            host, {"k_kernel": {**info, **change}}
        )
        assert out == host and applied == []
        assert why in skipped["k_kernel"], skipped
    out, applied, skipped = cuda_direct_launch._direct_launch_source(host, {})
    assert out == host and applied == [] and skipped == {}


# --------------------------------------------------------------------------- GPU


def _load(artifact):
    from tilelang.backends.cuda.runtime import load_kernel

    return load_kernel(artifact)


def _on_streams(run):
    """Run ``run()`` on the current stream, then on a side stream; sync after each."""
    import torch

    run()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    side.synchronize()


@pytest.mark.cuda
def test_gpu_tiny_add(monkeypatch):
    import torch

    artifact = _build(tiny_add(), True, monkeypatch)
    assert artifact.meta["direct_launch_kernels"] == artifact.meta["kernel_names"]
    fn = _load(artifact)
    a, b = (torch.randn(256, device="cuda") for _ in range(2))
    for _ in range(2):
        c = torch.zeros(256, device="cuda")
        _on_streams(lambda c=c: fn(a, b, c))
        torch.testing.assert_close(c, a + b)
    with torch.cuda.stream(torch.cuda.Stream()):
        c = torch.empty(256, device="cuda")
        a2, b2 = a * 2, b * 3
        fn(a2, b2, c)
        torch.cuda.current_stream().synchronize()
        torch.testing.assert_close(c, a2 + b2)


@pytest.mark.cuda
@pytest.mark.parametrize("out_idx", [None, [-1]])
def test_gpu_jit_kernel_calls_launch_directly(out_idx):
    """tilelang.compile's default build: every call a cuLaunchKernel, none the packed call."""
    import torch

    import tilelang
    from tilelang.backends.cuda.runtime import direct_launch_counts

    kernel = tilelang.compile(tiny_add(), out_idx=out_idx, target="cuda")
    assert kernel.artifact.meta["direct_launch_kernels"] == kernel.artifact.meta["kernel_names"]
    a, b = (torch.randn(256, device="cuda") for _ in range(2))
    for _ in range(5):
        if out_idx:
            c = kernel(a, b)
        else:
            c = torch.empty(256, device="cuda")
            kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b)
    assert direct_launch_counts(kernel.torch_function) == (5, 0)


@pytest.mark.cuda
def test_gpu_gemm_large_dynamic_shared_memory(monkeypatch):
    import torch

    artifact = _build(gemm(), True, monkeypatch)
    assert artifact.meta["direct_launch_kernels"] == artifact.meta["kernel_names"]
    fn = _load(artifact)
    a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    c = torch.zeros(512, 512, device="cuda", dtype=torch.float16)
    _on_streams(lambda: fn(a, b, c))
    torch.testing.assert_close(c, a @ b, rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
def test_gpu_dynamic_shape(monkeypatch):
    import torch

    artifact = _build(scale_dynamic(), True, monkeypatch)
    assert artifact.meta["direct_launch_kernels"] == artifact.meta["kernel_names"]
    fn = _load(artifact)
    for n in (1, 127, 128, 1000, 65537):
        a = torch.randn(n, device="cuda")
        c = torch.zeros(n, device="cuda")
        _on_streams(lambda a=a, c=c: fn(a, c, 2.5))
        torch.testing.assert_close(c, a * 2.5)


@pytest.mark.cuda
def test_gpu_matches_packed_path(monkeypatch):
    import torch

    direct = _load(_build(scale_dynamic(), True, monkeypatch))
    packed = _load(_build(scale_dynamic(), False, monkeypatch))
    a = torch.randn(4096, device="cuda")
    c1, c2 = torch.zeros_like(a), torch.zeros_like(a)
    direct(a, c1, -1.5)
    packed(a, c2, -1.5)
    torch.cuda.synchronize()
    torch.testing.assert_close(c1, c2, rtol=0, atol=0)


@pytest.mark.cuda
def test_gpu_argument_errors_still_raised(monkeypatch):
    import torch

    fn = _load(_build(tiny_add(), True, monkeypatch))
    a = torch.randn(128, device="cuda")
    with pytest.raises(ValueError):
        fn(a, a, a)
