"""Cold compile time of two CUDA kernels, split per stage (no GPU needed).

    python benchmark/compile_time.py [--kernels gemm fa] [--runs 3] [--compare]
                                     [--pass-timing] [--save DIR] [--sass] [--json]

Kernels (``tilelang.compile(..., target="cuda")``, ``TILELANG_DISABLE_CACHE=1``):

* ``gemm``: ``benchmark/matmul_readme.py``'s program (the README GEMM plus
  ``T.use_swizzle(10)``), fp16, M=N=K=8192, block 128x256x64, 256 threads, 3 stages;
* ``fa``: ``examples/flash_attention/example_mha_fwd_bshd.py`` (b=4, h=16, s=4096, d=128,
  block 128x128, 256 threads, 2 stages, not causal).

Every compile runs in a fresh interpreter, so the first compile's lazy imports count as they
do for a user, except ``tilelang.backends.cuda`` itself (about 25 ms on the dev box), which the
script imports before the clock to set its flags; each number is the best of ``--runs`` (a
busy machine only ever adds time). Each run is done twice: once
plain (the ``wall``/``cpu`` rows) and once observed through the pass-timing session
(``tl.pass_profile``), whose records give the breakdown:

* ``tilelang stages``: our pipeline (``backends/cuda/pipeline.py``), each stage with
  ``--detail``;
* ``TIRx lowering``: the passes of ``tvm_tirx.tirx.compile``'s lowering pipeline;
* ``TIRx device finalize``: StmtSimplify / LowerIntrin on the device functions;
* ``CUDA codegen``: ``target.build.cuda`` minus the device compiler;
* ``NVRTC/nvcc``: ``backends.cuda.headers._compile_device_source`` (tilelang's NVRTC
  driver, or TIRx's ``compile_source``);
* ``host library``: C host codegen + ``_export_host_library`` (gcc, link). With the
  overlap (``backends/cuda/overlap.py``) gcc compiles the host C file while NVRTC runs,
  so this row keeps only what is left to wait for (the link, and gcc if it outlasted
  NVRTC); the CPU row still counts all of gcc. With ``--detail`` two rows below it:
  the C compiler's runs on the host code (``cc -c``) and the link (``cc -shared``), each
  from its start to its exit (wall);
* ``other``: the rest (tracing-free glue, metadata, lazy imports). Three rows below it:
  ``target resolution`` (part of ``other``: ``registry.resolve_target``; on a GPU host
  ``target="cuda"`` asks torch for the device's architecture, which initializes CUDA),
  ``kernel load`` (part of ``other``: ``CudaBackend.load``, the host library's ``dlopen``
  and TIRx's CUDA module; on a GPU host) and ``first imports`` (modules first imported
  during the compile, in whichever row).

``--modes`` picks the builds: ``after`` (the default build), ``sequential`` (the default
build with the host C compile after the device compile: ``overlap.OVERLAP_HOST = False``)
and ``before``. ``--compare`` (= ``--modes before after``) also builds the ``before`` way: the pass config ``tl.compact_source=False``
(TIRx's own pipeline: ``T.unroll`` bodies expanded, device-side StmtSimplify) and
``tilelang.backends.cuda.nvrtc.USE_TILELANG_NVRTC = False`` (TIRx's NVRTC driver), the
build before issue 11; ``after`` is the default build. ``--sass`` prints HGMMA / local-memory (LDL/STL) counts of the
cubins (needs ``cuobjdump`` + ``nvdisasm``, e.g. the ``nvidia-cuda-cuobjdump`` and
``nvidia-cuda-nvdisasm`` wheels). ``--pass-timing`` forwards the children's
``TILELANG_PASS_TIMING`` tables.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

# mode -> (pass config tl.compact_source, nvrtc.USE_TILELANG_NVRTC, overlap.OVERLAP_HOST)
MODES = {
    "after": (True, True, True),
    "sequential": (True, True, False),
    "before": (False, False, False),
}
ROWS = (
    "tilelang stages",
    "TIRx lowering",
    "TIRx device StmtSimplify",
    "TIRx device LowerIntrin",
    "CUDA codegen",
    "NVRTC/nvcc",
    "host library",
    "other",
)
# shown below "other": target resolution is part of it, imports may fall in any row
OTHER_PARTS = ("target resolution", "library load", "imports")
_OTHER_LABELS = {
    "target resolution": "target resolution (in other)",
    "library load": "kernel load: host library dlopen + CUDA module (in other)",
    "imports": "first imports (in any row)",
}
# shown below "host library": the C compiler's runs (wall, from start to exit)
HOST_PARTS = ("host C compile", "host link")
_HOST_LABELS = {
    "host C compile": "C compile of the host code (cc -c)",
    "host link": "link (cc -shared, assembles the cubin's .incbin)",
}


# ------------------------------------------------------------------------------ kernels
def gemm_func():
    """benchmark/matmul_readme.py's README GEMM (use_swizzle(10)), 8192^3 fp16, 128x256x64."""
    sys.path.insert(0, os.path.join(REPO, "benchmark"))
    import importlib

    readme = importlib.import_module("matmul_readme")
    captured = {}
    original = readme.tilelang.compile
    readme.tilelang.compile = lambda func, **kwargs: captured.setdefault("func", func)
    try:
        readme.matmul(8192, 8192, 8192, 128, 256, 64, 256, 3, "float16", {})
    finally:
        readme.tilelang.compile = original
    return captured["func"], [-1]


def fa_func():
    """The FlashAttention forward example, b=4 h=16 s=4096 d=128, 128x128/256t/2 stages."""
    sys.path.insert(0, os.path.join(REPO, "examples", "flash_attention"))
    from example_mha_fwd_bshd import flashattn

    tir = flashattn.get_tir(
        4, 16, 4096, 128, False, block_M=128, block_N=128, num_stages=2, threads=256
    )
    return tir, [3]


KERNELS = {"gemm": gemm_func, "fa": fa_func}


# ------------------------------------------------------------------------------ child
_GROUPS = ("sequential", "_pipeline")  # TIRx pass groups: their passes are listed instead


def _wrap(owner, name, sink, key):
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink[key] = sink.get(key, 0.0) + time.perf_counter() - start

    setattr(owner, name, wrapper)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def child(kernel: str, mode: str, observe: bool, save: str | None) -> dict:
    """One cold compile in this (fresh) process; returns its timings."""
    os.environ["TILELANG_DISABLE_CACHE"] = "1"
    import tvm_tirx.tirx._compile as tirx_compile

    import tilelang
    from tilelang.backends import registry
    from tilelang.backends.cuda import headers as cuda_headers
    from tilelang.backends.cuda import host_library, nvrtc, overlap
    from tilelang.engine import instrument

    compact, nvrtc.USE_TILELANG_NVRTC, overlap.OVERLAP_HOST = MODES[mode]
    parts: dict[str, float] = {}
    inside = {"cuda build": False, "device compile in cuda build": 0.0}
    # every device compile of a build goes through headers._compile_device_source (the
    # cross-compile factory and the tvm_callback_cuda_compile dispatcher call it); with
    # the overlap (backends/cuda/overlap.py) it runs after the CUDA codegen, not inside it
    original_device_compile = cuda_headers._compile_device_source

    def device_compile(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original_device_compile(*args, **kwargs)
        finally:
            took = time.perf_counter() - start
            parts["NVRTC/nvcc"] = parts.get("NVRTC/nvcc", 0.0) + took
            if inside["cuda build"]:
                inside["device compile in cuda build"] += took

    cuda_headers._compile_device_source = device_compile
    _wrap(host_library, "_export_host_library", parts, "host export")
    _time_host_tools(host_library, parts)
    _wrap(registry, "resolve_target", parts, "target resolution")
    from tilelang.backends.cuda import CudaBackend

    _wrap(CudaBackend, "load", parts, "library load")
    builds = parts.setdefault("builds", {})
    original_build = tirx_compile._build_for_target

    def build_for_target(mod, target):
        start = time.perf_counter()
        kind = str(target.kind.name)
        inside["cuda build"] = kind == "cuda"
        try:
            return original_build(mod, target)
        finally:
            inside["cuda build"] = False
            builds[kind] = builds.get(kind, 0.0) + time.perf_counter() - start

    tirx_compile._build_for_target = build_for_target
    if observe:
        _time_imports(parts)
    sessions = []
    original_session = instrument.session

    @contextlib.contextmanager
    def capture(*args, **kwargs):
        with original_session(*args, **kwargs) as sess:
            sessions.append(sess)
            yield sess

    instrument.session = capture
    func, out_idx = KERNELS[kernel]()
    configs = {"tl.compact_source": compact}
    if observe:
        configs["tl.pass_profile"] = True
    cpu0, start = _cpu(), time.perf_counter()
    compiled = tilelang.compile(func, out_idx=out_idx, target="cuda", pass_configs=configs)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    artifact = compiled.artifact
    result = {
        "wall": wall,
        "cpu": cpu,
        "compiler": artifact.meta.get("compiler"),
        "arch": artifact.meta.get("arch"),
        "source_chars": len(artifact.kernel_source),
        "kernel_chars": len(artifact.kernel_source.split("TIRx-generated code follows")[-1]),
    }
    if save:
        os.makedirs(save, exist_ok=True)
        stem = os.path.join(save, f"{kernel}_{mode}")
        with open(stem + ".cu", "w") as handle:
            handle.write(artifact.kernel_source)
        if artifact.device_binary is not None:
            with open(stem + "." + artifact.device_format, "wb") as handle:
                handle.write(artifact.device_binary)
    sess = next((s for s in sessions if s is not None), None)
    if observe and sess is not None:
        rows = dict.fromkeys(ROWS, 0.0)
        stages, tirx_passes = {}, {}
        split, groups = False, 0
        for rec in sess.records:
            if rec.origin == "tilelang":
                stages[rec.name] = stages.get(rec.name, 0.0) + rec.seconds
                rows["tilelang stages"] += rec.seconds
                continue
            if rec.depth == 0 and rec.name == "tirx.Filter":
                split = True  # host/device split done: host, then device finalization follow
            if not split:  # the lowering pipeline: its total at depth 0, then its passes
                if rec.depth == 0:
                    rows["TIRx lowering"] += rec.seconds
                elif rec.name not in _GROUPS and (rec.depth >= 2 or rec.name.endswith("SSA")):
                    # (the compact pipeline wraps TIRx's in one more level: passes at depth 3)
                    tirx_passes[rec.name] = tirx_passes.get(rec.name, 0.0) + rec.seconds
                continue
            if rec.depth == 0 and rec.name != "tirx.Filter":
                groups += 1  # the Sequential of one finalization ended
            if rec.depth != 1:
                continue
            side = "host" if groups == 0 else "device"
            key = f"{side} {rec.name}"
            tirx_passes[key] = tirx_passes.get(key, 0.0) + rec.seconds
            if side == "device" and rec.name in ("tirx.StmtSimplify", "tirx.LowerIntrin"):
                rows[f"TIRx device {rec.name[5:]}"] += rec.seconds
        rows["NVRTC/nvcc"] = parts.get("NVRTC/nvcc", 0.0)
        rows["CUDA codegen"] = builds.get("cuda", 0.0) - inside["device compile in cuda build"]
        rows["host library"] = builds.get("c", 0.0) + parts.get("host export", 0.0)
        rows["other"] = wall - sum(v for k, v in rows.items() if k != "other")
        other = {key: parts.get(key, 0.0) for key in OTHER_PARTS + HOST_PARTS}
        result.update(rows=rows, stages=stages, tirx=tirx_passes, other=other)
    return result


def _time_host_tools(module, parts: dict) -> None:
    """Time the C compiler runs of ``module`` (host_library): ``cc -c`` into
    parts["host C compile"], ``cc -shared`` into parts["host link"] (start to exit)."""
    real = module.subprocess

    def key(cmd):
        return "host link" if "-shared" in cmd else "host C compile" if "-c" in cmd else None

    class TimedPopen(real.Popen):
        def __init__(self, cmd, *args, **kwargs):
            self._clock = (key(cmd), time.perf_counter())
            super().__init__(cmd, *args, **kwargs)

        def communicate(self, *args, **kwargs):
            try:
                return super().communicate(*args, **kwargs)
            finally:
                name, start = self._clock
                if name is not None and start is not None:
                    parts[name] = parts.get(name, 0.0) + time.perf_counter() - start
                    self._clock = (name, None)

    def run(cmd, *args, **kwargs):
        start = time.perf_counter()
        try:
            return real.run(cmd, *args, **kwargs)
        finally:
            name = key(cmd)
            if name is not None:
                parts[name] = parts.get(name, 0.0) + time.perf_counter() - start

    proxy = type(real)("subprocess_timed")
    proxy.__dict__.update(real.__dict__)
    proxy.Popen, proxy.run = TimedPopen, run
    module.subprocess = proxy


def _time_imports(parts: dict) -> None:
    """Add the wall time of the imports first made during the compile to parts["imports"]
    (outermost import statements only; a module imported before the clock costs nothing)."""
    import builtins

    original = builtins.__import__
    depth = [0]

    def timed_import(name, *args, **kwargs):
        if depth[0] or name in sys.modules:
            depth[0] += 1
            try:
                return original(name, *args, **kwargs)
            finally:
                depth[0] -= 1
        depth[0] += 1
        start = time.perf_counter()
        try:
            return original(name, *args, **kwargs)
        finally:
            depth[0] -= 1
            parts["imports"] = parts.get("imports", 0.0) + time.perf_counter() - start

    builtins.__import__ = timed_import


# ------------------------------------------------------------------------------ parent
def run_child(kernel, mode, observe, args) -> dict:
    cmd = [sys.executable, HERE, "--child", kernel, "--mode", mode]
    if observe:
        cmd.append("--observe")
    if args.save:
        cmd += ["--save", args.save]
    env = dict(os.environ, TILELANG_DISABLE_CACHE="1")
    env.pop("TILELANG_PASS_TIMING", None)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{kernel}/{mode} failed:\n{proc.stderr[-4000:]}")
    if observe and args.pass_timing:
        sys.stderr.write(f"--- {kernel}, {mode} ---\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _best(values):
    """The fastest of the runs: on a shared machine the others measure the neighbours."""
    return min(values) if values else 0.0


def summarize(runs: list[dict], observed: list[dict]) -> dict:
    out = {
        "wall": _best([r["wall"] for r in runs]),
        "cpu": _best([r["cpu"] for r in runs]),
        "source_chars": runs[0]["source_chars"],
        "kernel_chars": runs[0]["kernel_chars"],
        "compiler": runs[0]["compiler"],
        "rows": {k: _best([o["rows"][k] for o in observed]) for k in ROWS},
        "stages": {
            k: _best([o["stages"].get(k, 0.0) for o in observed]) for k in observed[0]["stages"]
        },
        "tirx": {k: _best([o["tirx"].get(k, 0.0) for o in observed]) for k in observed[0]["tirx"]},
        "other": {
            k: _best([o["other"].get(k, 0.0) for o in observed]) for k in OTHER_PARTS + HOST_PARTS
        },
    }
    return out


def table(kernel: str, results: dict, detail: bool) -> str:
    modes = list(results)
    width = 12
    head = f"| {kernel} ({results[modes[0]]['compiler']}) | " + " | ".join(
        f"{m:>{width}}" for m in modes
    )
    lines = [head + " |", "|---|" + "---:|" * len(modes)]

    def row(label, values, fmt="{:.1f}"):
        cells = " | ".join(f"{fmt.format(v):>{width}}" for v in values)
        lines.append(f"| {label} | {cells} |")

    for key in ROWS:
        row(f"{key} (ms)", [results[m]["rows"][key] * 1e3 for m in modes])
        if detail and key == "tilelang stages":
            for name in results[modes[0]]["stages"]:
                row(f"&nbsp;&nbsp;{name}", [results[m]["stages"].get(name, 0) * 1e3 for m in modes])
        if key == "other":
            for name in OTHER_PARTS:
                label = _OTHER_LABELS[name]
                row(f"&nbsp;&nbsp;{label}", [results[m]["other"][name] * 1e3 for m in modes])
        if detail and key == "host library":
            for name in HOST_PARTS:
                label = _HOST_LABELS[name]
                values = [results[m]["other"].get(name, 0.0) * 1e3 for m in modes]
                row(f"&nbsp;&nbsp;{label}", values)
        if detail and key == "TIRx lowering":
            names = [n for n in results[modes[0]]["tirx"] if not n.startswith(("device", "host"))]
            for name in names:
                row(f"&nbsp;&nbsp;{name}", [results[m]["tirx"].get(name, 0) * 1e3 for m in modes])
    row("**wall, observed run (ms)**", [sum(results[m]["rows"].values()) * 1e3 for m in modes])
    row("**wall, plain run (ms)**", [results[m]["wall"] * 1e3 for m in modes])
    row("CPU incl. children, plain (ms)", [results[m]["cpu"] * 1e3 for m in modes])
    row("CUDA source (KB, headers incl.)", [results[m]["source_chars"] / 1e3 for m in modes])
    row("generated part (KB)", [results[m]["kernel_chars"] / 1e3 for m in modes])
    return "\n".join(lines)


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for base in sys.path:
        candidate = os.path.join(base, "nvidia", "cu13", "bin", name)
        if os.path.isfile(candidate):
            return candidate
    return None


def sass_stats(path: str) -> str:
    """HGMMA / HMMA / LDL / STL / total instruction counts of a cubin (cuobjdump -sass)."""
    cuobjdump, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        return (
            "cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
        )
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    text = subprocess.run(
        [cuobjdump, "-sass", path], capture_output=True, text=True, env=env
    ).stdout
    ops = [
        line.split("*/", 1)[1].split()
        for line in text.splitlines()
        if line.strip().startswith("/*") and "*/" in line and line.strip()[2:6].isalnum()
    ]
    ops = [o for o in ops if o]
    names = [(o[1] if o[0].startswith("@") and len(o) > 1 else o[0]).split(".")[0] for o in ops]
    count = {k: names.count(k) for k in ("HGMMA", "HMMA", "LDL", "STL")}
    return f"{len(names)} instructions, " + ", ".join(f"{k} {v}" for k, v in count.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", choices=sorted(KERNELS), default=["gemm", "fa"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--compare", action="store_true", help="also time TIRx's own pipeline")
    parser.add_argument("--detail", action="store_true", help="one row per stage / TIRx pass")
    parser.add_argument(
        "--modes", nargs="+", choices=sorted(MODES), help="builds to time (see MODES)"
    )
    parser.add_argument("--pass-timing", action="store_true")
    parser.add_argument("--save", default=None, help="write kernel.cu / cubin per kernel and mode")
    parser.add_argument(
        "--sass", action="store_true", help="SASS counts of the cubins (with --save)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", choices=sorted(KERNELS), help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=sorted(MODES), default="after", help=argparse.SUPPRESS)
    parser.add_argument("--observe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.mode, args.observe, args.save)))
        return
    if args.sass and not args.save:
        parser.error("--sass needs --save DIR")
    modes = args.modes or (["before", "after"] if args.compare else ["after"])
    if sys.flags.dont_write_bytecode and not args.json:
        print(
            "note: PYTHONDONTWRITEBYTECODE is set: every process compiles tilelang's modules "
            "from source (the 'first imports' row and the CPU row include it)\n"
        )
    everything = {}
    for kernel in args.kernels:
        results = {}
        for mode in modes:
            runs, observed = [], []
            for _ in range(args.runs):
                runs.append(run_child(kernel, mode, False, args))
                observed.append(run_child(kernel, mode, True, args))
            results[mode] = summarize(runs, observed)
        everything[kernel] = results
        if not args.json:
            print(table(kernel, results, args.detail))
            if args.sass:
                for mode in modes:
                    for ext in ("cubin", "fatbin"):
                        path = os.path.join(args.save, f"{kernel}_{mode}.{ext}")
                        if os.path.isfile(path):
                            print(f"SASS {kernel} {mode}: {sass_stats(path)}")
            print()
    if args.json:
        print(json.dumps(everything, indent=2))


if __name__ == "__main__":
    main()
