"""Fixed costs of tilelang on the device present (CUDA if available, else the CPU backend).

    python benchmark/overhead.py            # prints a table
    python benchmark/overhead.py --json     # the same numbers as JSON

Measures, each a median of several runs:

1. ``import tilelang`` in a fresh interpreter (and ``import torch``, ``import tvm_tirx``
   alone, for scale: tvm_tirx imports torch);
2. cold compile of the README GEMM (128x128x32 tiles, fp16, 4096^3) in a fresh process
   with an empty cache directory: trace + lower + codegen + store, and that compile split
   into its parts (wall time of each, measured by wrapping the function that does it):
   ``lower`` (tilelang's passes: ``backends.<target>.pipeline.lower``), ``device``
   (NVRTC/nvcc: ``tvm_tirx.backend.cuda.compiler.compile_source``, CUDA only), ``host``
   (host library export: ``backends.cuda.host_library._export_host_library``, CUDA only),
   ``store`` (``KernelCache.store``) and ``rest`` (TIRx passes + codegen + glue: the
   compile minus the other parts); the device compiler used is reported too;
3. reload of that kernel from the disk cache in another fresh process: trace + key +
   verify + load, no compilation;
4. the per-call overhead of a cached tiny kernel (``C = A + B`` on 256 floats; the CPU
   backend runs it as a parallel loop) against torch eager (``torch.add(a, b, out=c)``,
   ``a + b``), plus the raw tvm-ffi function without JITKernel's Python wrapper. "call" is
   the host cost: a batch of ``--inner`` asynchronous calls is timed, the synchronize that
   follows is not (100 launches stay far below the launch queue's depth, so the host never
   waits for the GPU); "call+sync" (CUDA only) is the round trip, a sync after every call.

Child processes get a private ``TILELANG_CACHE_DIR`` under a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))  # measure this checkout, not an installed copy
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def readme_gemm(target):
    """The README's GEMM factory under ``@tilelang.jit(out_idx=[-1], target=target)``."""
    import tilelang
    import tilelang.language as T

    @tilelang.jit(out_idx=[-1], target=target)
    def matmul(M, N, K, bM=128, bN=128, bK=32, dtype="float16"):
        @T.prim_func
        def main(
            A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)
        ):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
                As = T.alloc_shared((bM, bK), dtype)
                Bs = T.alloc_shared((bK, bN), dtype)
                Cf = T.alloc_fragment((bM, bN), "float")
                T.clear(Cf)
                for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                    T.copy(A[by * bM, k * bK], As)
                    T.copy(B[k * bK, bx * bN], Bs)
                    T.gemm(As, Bs, Cf)
                T.copy(Cf, C[by * bM, bx * bN])

        return main

    return matmul


def tiny_add_func():
    """The ``C = A + B`` prim_func on 256 float32 values, one block."""
    import tilelang.language as T

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


def tiny_add(target, out_idx):
    """:func:`tiny_add_func` compiled by ``tilelang.compile``."""
    import tilelang

    return tilelang.compile(tiny_add_func(), out_idx=out_idx, target=target)


# --------------------------------------------------------------------------- children


def _child_import() -> dict:
    start = time.perf_counter()
    import tilelang  # noqa: F401

    return {"seconds": time.perf_counter() - start}


def _child_import_torch() -> dict:
    start = time.perf_counter()
    import torch  # noqa: F401

    return {"seconds": time.perf_counter() - start}


def _child_import_tirx() -> dict:
    start = time.perf_counter()
    import tvm_tirx  # noqa: F401  (imports torch through tvm_ffi)

    return {"seconds": time.perf_counter() - start}


SPLIT_PARTS = ("lower", "device", "host", "store")


def _timed_parts(kind: str) -> tuple[dict, dict]:
    """Wrap the functions that do each part of a compile; returns (seconds, info)."""
    import importlib

    seconds = dict.fromkeys(SPLIT_PARTS, 0.0)
    info: dict = {}
    targets = [
        ("lower", f"tilelang.backends.{kind}.pipeline", "lower"),
        ("store", "tilelang.cache.kernel_cache", "KernelCache.store"),
    ]
    if kind == "cuda":
        targets += [
            ("device", "tvm_tirx.backend.cuda.compiler", "compile_source"),
            ("host", "tilelang.backends.cuda.host_library", "_export_host_library"),
        ]
    for part, module_name, attr in targets:
        try:
            owner = importlib.import_module(module_name)
        except ImportError:
            continue
        *path, name = attr.split(".")
        for step in path:
            owner = getattr(owner, step)
        original = getattr(owner, name, None)
        if original is None:
            continue

        def wrapper(*args, _part=part, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_part] += time.perf_counter() - start

        setattr(owner, name, wrapper)
    if kind == "cuda":
        from tilelang.backends.cuda import build as cuda_build

        original_build = cuda_build.build_cuda

        def build_cuda(*args, **kwargs):
            info["compiler"] = kwargs.get("compiler")
            return original_build(*args, **kwargs)

        cuda_build.build_cuda = build_cuda
    return seconds, info


def _child_gemm(target: str) -> dict:
    import tilelang
    from tilelang.backends.registry import get_backend, resolve_target

    kind = resolve_target(target)["kind"]
    backend = type(get_backend(kind))
    builds = []
    original = backend.build

    def counting(self, *args, **kwargs):
        builds.append(1)
        return original(self, *args, **kwargs)

    backend.build = counting
    parts, info = _timed_parts(kind)
    matmul = readme_gemm(target)
    start = time.perf_counter()
    func = matmul.get_tir(4096, 4096, 4096)
    traced = time.perf_counter()
    tilelang.compile(func, out_idx=[-1], target=target)
    done = time.perf_counter()
    result = {"trace": traced - start, "compile": done - traced, "built": len(builds)}
    if builds:  # a cold compile: report its parts
        result.update({f"part_{name}": value for name, value in parts.items()})
        result["part_rest"] = result["compile"] - sum(parts.values())
        result["compiler"] = info.get("compiler")
    return result


def _run_child(mode: str, env: dict, target: str) -> dict:
    proc = subprocess.run(
        [sys.executable, HERE, "--child", mode, "--target", target],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- measurements


def _per_call(fn, repeats: int, inner: int) -> float:
    for _ in range(inner):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def host_cost(fn, sync, inner: int, repeats: int) -> float:
    """Median host seconds per call of ``fn``: ``inner`` asynchronous calls timed, then one
    untimed ``sync()`` (the first batch warms up)."""
    samples = []
    for rep in range(repeats + 1):
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        elapsed = time.perf_counter() - start
        sync()
        if rep:
            samples.append(elapsed / inner)
    return statistics.median(samples)


def measure(target: str, runs: int, repeats: int, inner: int) -> dict:
    """All measurements (seconds); see the module docstring."""
    results = {}
    env = dict(os.environ)
    env.pop("TILELANG_DISABLE_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="tilelang_overhead_") as tmp:
        env["TILELANG_CACHE_DIR"] = os.path.join(tmp, "cache0")
        results["import_tilelang"] = statistics.median(
            _run_child("import", env, target)["seconds"] for _ in range(runs)
        )
        for mode in ("import_torch", "import_tirx"):
            results[mode] = statistics.median(
                _run_child(mode, env, target)["seconds"] for _ in range(runs)
            )
        cold, warm = [], []
        for r in range(runs):
            env["TILELANG_CACHE_DIR"] = os.path.join(tmp, f"cache{r + 1}")
            first = _run_child("gemm", env, target)
            second = _run_child("gemm", env, target)
            assert first["built"] == 1 and second["built"] == 0, (first, second)
            cold.append(first)
            warm.append(second)
        for name, rows in (("cold", cold), ("reload", warm)):
            for part in ("trace", "compile"):
                results[f"gemm_{name}_{part}"] = statistics.median(row[part] for row in rows)
        for part in (*SPLIT_PARTS, "rest"):
            results[f"gemm_cold_{part}"] = statistics.median(row[f"part_{part}"] for row in cold)
        results["gemm_cold_compiler"] = cold[0].get("compiler") or ""

    import torch

    device = "cuda" if target == "cuda" else "cpu"
    a, b, c = (torch.randn(256, device=device) for _ in range(3))
    inplace = tiny_add(target, None)
    allocating = tiny_add(target, [-1])
    raw = inplace.torch_function
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def timed(fn):
        return host_cost(fn, sync, inner, repeats)

    def timed_sync(fn):
        """Round trip per call: launch, then wait for the kernel (sync after every call)."""

        def call():
            fn()
            sync()

        return _per_call(call, repeats, inner)

    calls = {
        "tilelang_inplace": lambda: inplace(a, b, c),
        "tilelang_out_idx": lambda: allocating(a, b),
        "raw_tvm_ffi": lambda: raw(a, b, c),
        "torch_add_out": lambda: torch.add(a, b, out=c),
        "torch_add": lambda: a + b,
    }
    for name, fn in calls.items():
        results[f"call_{name}"] = timed(fn)
    if device == "cuda":
        for name, fn in calls.items():
            results[f"sync_{name}"] = timed_sync(fn)
    return results


def table(results: dict, target: str) -> str:
    """The measurements as an aligned text table."""
    rows = [
        ("import tilelang (fresh process)", results["import_tilelang"], "s"),
        ("import torch alone (fresh process)", results["import_torch"], "s"),
        ("import tvm_tirx alone (fresh process)", results["import_tirx"], "s"),
        ("README GEMM cold: trace", results["gemm_cold_trace"], "s"),
        ("README GEMM cold: compile + store", results["gemm_cold_compile"], "s"),
        ("  of which: our passes (lower)", results["gemm_cold_lower"], "s"),
        (
            f"  of which: device compile ({results.get('gemm_cold_compiler') or 'n/a'})",
            results["gemm_cold_device"],
            "s",
        ),
        ("  of which: host library export", results["gemm_cold_host"], "s"),
        ("  of which: store in the cache", results["gemm_cold_store"], "s"),
        ("  of which: rest (TIRx passes, codegen, glue)", results["gemm_cold_rest"], "s"),
        ("README GEMM reload (2nd process): trace", results["gemm_reload_trace"], "s"),
        ("README GEMM reload (2nd process): key + load", results["gemm_reload_compile"], "s"),
        ("call: tiny kernel, JITKernel, C given", results["call_tilelang_inplace"], "us"),
        ("call: tiny kernel, JITKernel, out_idx", results["call_tilelang_out_idx"], "us"),
        ("call: tiny kernel, raw tvm-ffi function", results["call_raw_tvm_ffi"], "us"),
        ("call: torch.add(a, b, out=c)", results["call_torch_add_out"], "us"),
        ("call: a + b (torch eager)", results["call_torch_add"], "us"),
    ]
    if "sync_torch_add" in results:
        rows += [
            ("call+sync: tiny kernel, JITKernel, C given", results["sync_tilelang_inplace"], "us"),
            ("call+sync: tiny kernel, JITKernel, out_idx", results["sync_tilelang_out_idx"], "us"),
            ("call+sync: raw tvm-ffi function", results["sync_raw_tvm_ffi"], "us"),
            ("call+sync: torch.add(a, b, out=c)", results["sync_torch_add_out"], "us"),
            ("call+sync: a + b (torch eager)", results["sync_torch_add"], "us"),
        ]
    lines = [f"tilelang overhead on {target}", f"{'measurement':<48} {'median':>12}"]
    for name, value, unit in rows:
        shown = value * 1e6 if unit == "us" else value
        lines.append(f"{name:<48} {shown:>9.3f} {unit}")
    return "\n".join(lines)


def main() -> None:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per measurement")
    parser.add_argument("--repeats", type=int, default=200, help="timed batches per call test")
    parser.add_argument("--inner", type=int, default=100, help="calls per timed batch")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = args.target
    if target is None:
        try:
            import torch

            target = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            target = "cpu"
    if args.child is not None:
        child = {
            "import": _child_import,
            "import_torch": _child_import_torch,
            "import_tirx": _child_import_tirx,
        }
        out = child[args.child]() if args.child in child else _child_gemm(target)
        print(json.dumps(out))
        return
    results = measure(target, args.runs, args.repeats, args.inner)
    print(json.dumps(results, indent=1) if args.json else table(results, target))


if __name__ == "__main__":
    main()
