"""Where the time of one cached CUDA kernel call goes (run on a GPU).

    python benchmark/launch_path.py [--inner 100] [--repeats 200]

Host cost per call (a batch of asynchronous calls timed, the sync after it untimed), from
the floor up:

1. a tvm-ffi call of a trivial global function with three torch CUDA tensors (Python ->
   C++ dispatch + DLPack exchange, no launch);
2. ``torch.cuda._sleep(0)``: torch's cheapest kernel launch (dispatcher + cudaLaunchKernel);
3. our tiny kernel (``C = A + B``, 256 floats) through the raw tvm-ffi function: the C
   host module's argument checks + TIRx's CUDA module launch (cuLaunchKernel);
4. the same through ``JITKernel.__call__``;
5. the same kernel built with ``DIRECT_LAUNCH=True`` (``tilelang.backends.cuda.build``):
   the host library launches it with ``cuLaunchKernel`` itself instead of a second packed
   call into TIRx's CUDA module (built through ``pipeline.build`` + ``load_kernel``, no
   cache; its result is checked against torch before timing);
6. ``torch.add(a, b, out=c)`` for scale.
"""

from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def direct_launch_kernel():
    """The tiny ``C = A + B`` kernel built with DIRECT_LAUNCH=True, loaded without cache."""
    import tilelang.language as T
    from tilelang.backends.cuda import build as cuda_build
    from tilelang.backends.cuda import pipeline
    from tilelang.backends.cuda.runtime import load_kernel

    @T.prim_func
    def tiny_add_kernel(
        A: T.Tensor((256,), "float32"),
        B: T.Tensor((256,), "float32"),
        C: T.Tensor((256,), "float32"),
    ):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(256):
                C[i] = A[i] + B[i]

    import torch

    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    saved = cuda_build.DIRECT_LAUNCH
    cuda_build.DIRECT_LAUNCH = True
    try:
        artifact = pipeline.build(tiny_add_kernel, {"kind": "cuda", "arch": arch})
    finally:
        cuda_build.DIRECT_LAUNCH = saved
    return artifact, load_kernel(artifact)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    import torch
    import tvm_ffi

    from benchmark.overhead import host_cost, tiny_add

    a, b, c = (torch.randn(256, device="cuda") for _ in range(3))
    kernel = tiny_add("cuda", None)
    raw = kernel.torch_function
    artifact, direct = direct_launch_kernel()
    print(
        "direct launch: kernels",
        artifact.meta.get("direct_launch_kernels"),
        "skipped",
        artifact.meta.get("direct_launch_skipped"),
    )
    c.zero_()
    direct(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a + b)
    print("direct launch: result matches torch")
    trivial = tvm_ffi.get_global_func("ffi.Array")  # builds a 3-element array of tensors
    sync = torch.cuda.synchronize
    rows = [
        ("tvm-ffi call, 3 CUDA tensors, no launch", lambda: trivial(a, b, c)),
        ("torch.cuda._sleep(0) (torch's cheapest launch)", lambda: torch.cuda._sleep(0)),
        ("tiny kernel, raw tvm-ffi function", lambda: raw(a, b, c)),
        ("tiny kernel, JITKernel", lambda: kernel(a, b, c)),
        ("tiny kernel, DIRECT_LAUNCH=True, raw function", lambda: direct(a, b, c)),
        ("torch.add(a, b, out=c)", lambda: torch.add(a, b, out=c)),
    ]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, fn in rows:
        cost = host_cost(fn, sync, args.inner, args.repeats)
        print(f"{name:<52} {cost * 1e6:8.3f} us")


if __name__ == "__main__":
    main()
