"""Per-iteration SASS statistics of the attention kernels the benchmarks build (no GPU needed).

    python benchmark/sass_audit.py [--kernels mla mla_qregs256 mla_qregs128_rowsum fwd128 fwd64 gqa128 bwd128 bwd128_dkfirst bwd256
        bwd256_64x64 bwd256_pds]
        [--pass-configs KEY=VALUE ...] [--keep DIR]

Each kernel is built exactly as its benchmark builds it (``mla_decode.py``: batch 64, 128
heads, 8192 keys, 512 + 64, split 1; ``flash_attention.py`` / ``flash_attention_variants.py``:
B4 H16 S4096 at the examples' default block configs; ``gqa128``: the GQA row, B4 32 query heads
on 4 K/V heads S4096) for sm_90a with nvcc, then
``ptxas -v`` gives registers and spills and ``cuobjdump -sass`` the main loop: the backward
branch spanning the most (H)MMA instructions. Printed per kernel: registers, spill bytes,
the loop's instruction count and the counts of the instructions that matter for issue 13
(HGMMA shapes, barriers, ``fence.proxy.async`` = ``MEMBAR.ALL.CTA``, max/min chains,
shared stores, atomics, local-memory spills, descriptor arithmetic). ``cuobjdump`` comes
from the ``nvidia-cuda-cuobjdump`` wheel or the CUDA toolkit. benchmark/SASS_AUDIT.md holds
the findings.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "examples", "flash_attention"))
sys.path.insert(0, os.path.join(REPO, "examples", "deepseek_mla"))
sys.path.insert(0, os.path.join(REPO, "benchmark"))

from config_args import parse_pass_configs  # noqa: E402

from tilelang.tools.sass_loops import main_loop, opcode_counts  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
#: the SASS opcodes counted per loop iteration (prefix match)
COUNTED = ("HGMMA", "HMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "BAR.SYNC", "MEMBAR",
           "SYNCS", "SHFL", "MUFU", "F2FP", "STS", "LDS", "LDSM", "STSM", "REDG", "LDG",
           "STL", "LDL", "FMNMX", "FSETP", "FSEL", "PLOP3", "R2UR", "ULOP3", "USHF", "UIADD3")  # fmt: skip


def _tir(name):
    """The prim_func ``name`` stands for, built as its benchmark builds it."""
    if name == "mla" or name.startswith("mla_"):
        # mla[_n<block_N>s<stages>][_qregs<N>][_rowsum]: block_N keys per tile in <stages>
        # stages, N latent Q columns in registers, row sums after the loop
        import example_mla_decode as mla

        found = re.search(r"_qregs(\d+)", name)
        tiles = re.search(r"_n(\d+)s(\d+)", name)
        opts = dict(q_reg_cols=int(found.group(1)) if found else 0,
                    defer_rowsum="_rowsum" in name,
                    num_stages=int(tiles.group(2)) if tiles else 2)  # fmt: skip
        block_n = int(tiles.group(1)) if tiles else 64
        return mla.flashattn.get_tir(64, 128, 1, 8192, 512, 64, block_n, 64, 1, **opts), {
            "tl.enable_fast_math": True
        }
    if name.startswith("gqa"):  # flash_attention_variants.py's GQA row: 32 heads on 4 K/V heads
        import example_gqa_fwd_bshd as gqa

        dim = int(name[3:])
        return gqa.flashattn.get_tir(4, 32, 4096, dim, False, 8, **gqa.default_config(dim)), {}
    if name.startswith("fwd"):
        import example_mha_fwd_bhsd as fwd

        dim = int(name[3:])
        return fwd.flashattn.get_tir(4, 16, 4096, 4096, dim, False, **fwd.default_config(dim)), {}
    import example_mha_bwd_bhsd as bwd

    dim = int(name[3:6])
    config = bwd.bwd_config(dim)
    if name.endswith("_64x64"):
        config = dict(block_M=64, block_N=64, threads=256, num_stages=2)
    if name.endswith("_pds"):  # P^T / dS^T read by the gemms from shared (head dim 256)
        config = {**config, "pds_shared": True}
    if name.endswith("_dkfirst"):  # upstream's gemm order (dK before the dS^T store)
        config = {**config, "dq_first": False}
    return bwd.flashattn_bwd.get_tir(4, 16, 4096, dim, False, **config), {}


def cuobjdump() -> str | None:
    """The cuobjdump executable (PATH, then the nvidia-cuda-cuobjdump wheel)."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cuda_cuobjdump", "cu12"):
                path = os.path.join(root, sub, "bin", "cuobjdump")
                if os.path.exists(path):
                    return path
    except ImportError:
        pass
    return None


def loop_stats(sass: str) -> dict:
    """Counts of :data:`COUNTED` opcodes in the main loop (``tilelang.tools.sass_loops``: the
    predicated backward branch spanning the most (H)MMA instructions), plus
    ``instructions`` (all of them) and ``shapes`` (the HGMMA opcodes)."""
    body = main_loop(sass)
    if body is None:
        return {}
    ops = opcode_counts(body)
    out = {"instructions": len(body)}
    for key in COUNTED:
        count = sum(v for op, v in ops.items() if op.startswith(key))
        if count:
            out[key] = count
    shapes = collections.Counter(op for op in ops.elements() if op.startswith("HGMMA"))
    out["shapes"] = dict(shapes)
    return out


def audit(name, pass_configs, keep=None) -> dict:
    """Build ``name`` (see :func:`_tir`), return its ptxas figures and loop statistics."""
    from tilelang.backends.cuda import pipeline

    func, base = _tir(name)
    art = pipeline.build(func, SM90A, {**base, **pass_configs}, compiler="nvcc")
    work = keep or tempfile.mkdtemp(prefix=f"sass_{name}_")
    os.makedirs(work, exist_ok=True)
    cu = os.path.join(work, f"{name}.cu")
    cubin = os.path.join(work, f"{name}.cubin")
    with open(cu, "w") as f:
        f.write(art.kernel_source)
    fast = ["--use_fast_math"] if (base or pass_configs).get("tl.enable_fast_math", True) else []
    res = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", *fast, "-Xptxas", "-v", "-o", cubin, cu],
                         capture_output=True, text=True, check=True)  # fmt: skip
    info = {}
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stderr)
    info["spill_stores"], info["spill_loads"] = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    m = re.search(r"Used (\d+) registers", res.stderr)
    info["registers"] = int(m.group(1)) if m else None
    # C75xx (wgmma serialized) comes as an "info" line, not a warning
    info["ptxas_warnings"] = re.findall(r".*\(C75\d\d\).*", res.stderr)
    tool = cuobjdump()
    if tool is not None:
        sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
        info["loop"] = loop_stats(sass)
    return info


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+",
                        default=["mla", "fwd128", "fwd64", "bwd128", "bwd128_dkfirst", "bwd256",
                                 "bwd256_pds"])  # fmt: skip
    parser.add_argument("--pass-configs", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", default=None, help="write the .cu/.cubin files here")
    args = parser.parse_args(argv)
    configs = parse_pass_configs(args.pass_configs)
    if shutil.which("nvcc") is None:
        raise SystemExit("sass_audit.py needs nvcc")
    results = {}
    for name in args.kernels:
        info = audit(name, configs, args.keep)
        results[name] = info
        loop = dict(info.get("loop", {}))
        shapes = loop.pop("shapes", {})
        print(f"{name}: {info['registers']} registers, spills {info['spill_stores']}/"
              f"{info['spill_loads']} bytes (stores/loads), ptxas C75xx warnings "
              f"{len(info['ptxas_warnings'])}")  # fmt: skip
        if loop:
            print("  loop/iteration: " + ", ".join(f"{k} {v}" for k, v in loop.items()))
            print("  wgmma: " + ", ".join(f"{k} x{v}" for k, v in shapes.items()))
    return results


if __name__ == "__main__":
    main()
