"""Where the time of one cached CUDA kernel call goes (run on a GPU).

    python benchmark/launch_path.py [--inner 100] [--repeats 200] [--rounds 5]

Host cost per call (a batch of ``--inner`` asynchronous calls timed, the sync after it
untimed). The rows are measured in ``--rounds`` interleaved rounds (median of the rounds'
medians), so a drift of the machine does not favour one row:

1. a tvm-ffi call of a trivial global function with three torch CUDA tensors (Python ->
   C++ dispatch + DLPack exchange, no launch);
2. ``torch.cuda._sleep(0)``: torch's cheapest kernel launch (dispatcher + cudaLaunchKernel);
3. our tiny kernel (``C = A + B``, 256 floats) built with ``DIRECT_LAUNCH=False``: the C
   host code's argument checks, then a second packed call into TIRx's CUDA module, which
   launches (built through ``pipeline.build`` + ``load_kernel``, no cache);
4. the same with ``DIRECT_LAUNCH=True``: the host code calls ``cuLaunchKernel`` itself;
5. ``JITKernel.__call__`` of the kernel as ``tilelang.compile`` builds it by default;
6. ``torch.add(a, b, out=c)`` for scale;
7. the driver's floor: a C loop of ``cuLaunchKernel`` of an empty kernel with three
   pointer parameters on torch's stream (built with nvcc, ``benchmark/nvcc_lib.py``; one
   ctypes call per batch, so no Python cost per launch). Skipped when nvcc is missing.

Each built kernel's result is checked against torch before timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def build_tiny_add(direct: bool):
    """The tiny ``C = A + B`` kernel built with ``DIRECT_LAUNCH=direct``, loaded without cache."""
    import torch

    from benchmark.overhead import tiny_add_func
    from tilelang.backends.cuda import direct_launch as cuda_direct_launch
    from tilelang.backends.cuda import pipeline
    from tilelang.backends.cuda.runtime import load_kernel

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    saved = cuda_direct_launch.DIRECT_LAUNCH
    cuda_direct_launch.DIRECT_LAUNCH = direct
    try:
        artifact = pipeline.build(tiny_add_func(), {"kind": "cuda", "arch": arch})
    finally:
        cuda_direct_launch.DIRECT_LAUNCH = saved
    return artifact, load_kernel(artifact)


_LAUNCH_FLOOR = r"""
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <time.h>

typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void*, void**, void**);

__global__ void empty_kernel(float* a, float* b, float* c) {}

/* Seconds spent launching empty_kernel n times with cuLaunchKernel (no sync inside). */
extern "C" double launch_floor(int n, float* a, float* b, float* c, void* stream) {
  static launch_t launch = NULL;
  cudaFunction_t fn;
  if (launch == NULL) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    launch = lib ? (launch_t)dlsym(lib, "cuLaunchKernel") : NULL;
    if (launch == NULL) return -1.0;
  }
  if (cudaGetFuncBySymbol(&fn, (const void*)empty_kernel) != cudaSuccess) return -1.0;
  void* params[3] = {&a, &b, &c};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < n; ++i) {
    if (launch((void*)fn, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL))
      return -1.0;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
}
"""


def launch_floor_sampler(arch: str, a, b, c, inner: int):
    """A function returning one batch's seconds per cuLaunchKernel, or None without nvcc."""
    import ctypes

    import torch

    sys.path.insert(0, os.path.join(REPO, "benchmark"))
    from nvcc_lib import build_library

    try:
        library = build_library(_LAUNCH_FLOOR, arch, "launch_floor")
    except Exception as err:  # noqa: BLE001 - optional row
        print(f"launch floor skipped: {type(err).__name__}: {err}")
        return None
    library.launch_floor.restype = ctypes.c_double
    library.launch_floor.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4

    def sample() -> float:
        stream = torch.cuda.current_stream().cuda_stream
        seconds = library.launch_floor(inner, a.data_ptr(), b.data_ptr(), c.data_ptr(), stream)
        torch.cuda.synchronize()
        if seconds < 0:
            raise RuntimeError("cuLaunchKernel failed")
        return seconds / inner

    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch
    import tvm_ffi

    from benchmark.overhead import host_cost, tiny_add
    from tilelang.backends.cuda.runtime import direct_launch_counts

    a, b, c = (torch.randn(256, device="cuda") for _ in range(3))
    kernel = tiny_add("cuda", None)
    print(
        f"JITKernel artifact: direct-launched kernels {kernel.artifact.meta.get('direct_launch_kernels')}"
    )
    built = {direct: build_tiny_add(direct) for direct in (False, True)}
    for direct, (artifact, fn) in built.items():
        c.zero_()
        fn(a, b, c)
        torch.cuda.synchronize()
        torch.testing.assert_close(c, a + b)
        kernels = artifact.meta.get("direct_launch_kernels")
        print(f"DIRECT_LAUNCH={direct}: result matches torch; direct-launched kernels {kernels}")
    trivial = tvm_ffi.get_global_func("ffi.Array")  # builds a 3-element array of tensors
    packed, direct = built[False][1], built[True][1]
    rows = [
        ("tvm-ffi call, 3 CUDA tensors, no launch", lambda: trivial(a, b, c)),
        ("torch.cuda._sleep(0) (torch's cheapest launch)", lambda: torch.cuda._sleep(0)),
        ("tiny kernel, DIRECT_LAUNCH=False, raw function", lambda: packed(a, b, c)),
        ("tiny kernel, DIRECT_LAUNCH=True, raw function", lambda: direct(a, b, c)),
        ("tiny kernel, JITKernel (default build)", lambda: kernel(a, b, c)),
        ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c)),
    ]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    major, minor = torch.cuda.get_device_capability()
    floor = launch_floor_sampler(f"sm_{major}{minor}", a, b, c, args.inner)
    floor_name = "cuLaunchKernel in a C loop, empty kernel (driver floor)"
    per_round = max(1, args.repeats // args.rounds)
    samples = {name: [] for name, _ in rows}
    samples[floor_name] = []
    for _ in range(args.rounds):
        for name, fn in rows:
            samples[name].append(host_cost(fn, torch.cuda.synchronize, args.inner, per_round))
        if floor is not None:
            samples[floor_name].append(statistics.median(floor() for _ in range(per_round)))
    if floor is not None:
        rows.append((floor_name, None))
    for name, _ in rows:
        print(f"{name:<52} {statistics.median(samples[name]) * 1e6:8.3f} us")
    for label, loaded in (("raw DIRECT_LAUNCH=True", direct), ("JITKernel", kernel.torch_function)):
        launched, fallbacks = direct_launch_counts(loaded)
        print(f"{label}: {launched} direct launches, {fallbacks} through the packed call")


if __name__ == "__main__":
    main()
