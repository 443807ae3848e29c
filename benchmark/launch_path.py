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
6. ``torch.add(a, b, out=c)`` for scale.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch
    import tvm_ffi

    from benchmark.overhead import host_cost, tiny_add

    a, b, c = (torch.randn(256, device="cuda") for _ in range(3))
    kernel = tiny_add("cuda", None)
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
    per_round = max(1, args.repeats // args.rounds)
    samples = {name: [] for name, _ in rows}
    for _ in range(args.rounds):
        for name, fn in rows:
            samples[name].append(host_cost(fn, torch.cuda.synchronize, args.inner, per_round))
    for name, _ in rows:
        print(f"{name:<52} {statistics.median(samples[name]) * 1e6:8.3f} us")


if __name__ == "__main__":
    main()
