"""Per-call cost of the eager ``@tilelang.jit`` form against calling its JITKernel directly.

    python benchmark/eager_overhead.py            # prints a table
    python benchmark/eager_overhead.py --json

The kernel is ``C = A + B`` on 256 float32 values (one block; on CUDA when a GPU is
present, else the CPU backend), written in the eager form with ``N = T.const("N")``. Each
figure is the minimum over ``--repeat`` batches of ``--inner`` calls (host time of
asynchronous calls, as ``benchmark/overhead.py`` measures it; the minimum because other
processes sharing the cores only ever add time); the paths are timed interleaved so that
drift hits all. "added" is eager minus direct: the Python cost of binding the arguments,
building the shape key and looking the launcher up. "dispatch_only" isolates that cost:
the same eager call with the kernel in the launcher table replaced by a no-op, minus a
call of that no-op.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def eager_add():
    """The eager ``C = A + B`` kernel."""
    import tilelang
    import tilelang.language as T

    @tilelang.jit
    def tiny_add(A, B, block: int = 256):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B: T.Tensor((N,), T.float32)
        C = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
        return C

    return tiny_add


def _batch(fn, inner: int) -> float:
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner * 1e6


def measure(inner: int = 2000, repeat: int = 25) -> dict:
    """Median microseconds per call of each path (see the module docstring)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tiny_add = eager_add()
    a = torch.randn(256, device=device)
    b = torch.randn(256, device=device)
    kernel = tiny_add.compile(a, b)
    torch.testing.assert_close(tiny_add(a, b), a + b)
    stub = eager_add()  # a second function whose launcher is a no-op
    stub(a, b)
    (plan,) = stub._eager_plans.values()
    (key,) = plan.table
    plan.table[key] = noop = lambda *args: None  # noqa: E731
    paths = {
        "direct": lambda: kernel(a, b),
        "eager": lambda: tiny_add(a, b),
        "eager_kw": lambda: tiny_add(a, b, block=256),
        "noop": lambda: noop(a, b),
        "stub": lambda: stub(a, b),
    }
    for fn in paths.values():  # warm up, compile the keyword form's kernel
        _batch(fn, inner // 4)
    samples = {name: [] for name in paths}
    for _ in range(repeat):
        for name, fn in paths.items():
            samples[name].append(_batch(fn, inner))
        if device == "cuda":
            torch.cuda.synchronize()
    med = {name: min(v) for name, v in samples.items()}
    return {
        "device": device,
        "direct_us": med["direct"],
        "eager_us": med["eager"],
        "eager_keyword_us": med["eager_kw"],
        "added_us": med["eager"] - med["direct"],
        "added_keyword_us": med["eager_kw"] - med["direct"],
        "dispatch_only_us": med["stub"] - med["noop"],
        "median_added_us": statistics.median(samples["eager"])
        - statistics.median(samples["direct"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--inner", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=25)
    opts = parser.parse_args()
    result = measure(opts.inner, opts.repeat)
    if opts.json:
        print(json.dumps(result, indent=2))
        return
    print(f"device: {result['device']}")
    for key in [k for k in result if k != "device"]:
        print(f"{key:>18}: {result[key]:7.2f} us")


if __name__ == "__main__":
    main()
