"""A non-editable install of tilelang compiles a CUDA kernel: its device headers ship with it.

The package is installed (``pip install --no-deps --no-build-isolation --target``) from a
copy of the source tree into a temporary directory; a subprocess started outside the
repository imports tilelang from there and compiles a small kernel for sm_80 with nvcc
(no GPU needed). The headers must come from the installed package, not from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tilelang
    import tilelang.language as T
    from tilelang.backends.cuda.headers import template_dir

    @T.prim_func
    def add_one(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(4, threads=64) as bx:
            tile = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64], tile)
            for i in T.Parallel(64):
                tile[i] = tile[i] + 1.0
            T.copy(tile, B[bx * 64])

    kernel = tilelang.compile(add_one, out_idx=[-1], target={"kind": "cuda", "arch": "sm_80"})
    binary = kernel.artifact.device_binary
    print(json.dumps({
        "file": tilelang.__file__,
        "version": tilelang.__version__,
        "templates": str(template_dir()),
        "source_head": kernel.get_kernel_source()[:200],
        "elf": binary is not None and binary[:4] == b"\\x7fELF",
    }))
    """
)


def _copy_source(dest: Path) -> None:
    """What an sdist holds: the project files and the package (no caches, no build output)."""
    for name in ("pyproject.toml", "README.md", "LICENSE", "VERSION"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(
        REPO / "tilelang",
        dest / "tilelang",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"),
    )


@pytest.mark.skipif(
    shutil.which("nvcc") is None or shutil.which("ptxas") is None, reason="nvcc/ptxas not on PATH"
)
def test_installed_package_compiles_a_cuda_kernel(tmp_path):
    source, target, work = tmp_path / "source", tmp_path / "site", tmp_path / "work"
    for path in (source, target, work):
        path.mkdir()
    _copy_source(source)
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    headers = sorted(p.name for p in target.glob("tilelang/**/tl_templates/cuda/*.h"))
    assert "common.h" in headers and "wgmma.h" in headers, headers

    script = work / "compile_add_one.py"  # a file: tracing reads the kernel's source
    script.write_text(_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TILELANG_TEMPLATE_PATH"}
    env["PYTHONPATH"] = str(target)
    env["TILELANG_CACHE_DIR"] = str(tmp_path / "cache")
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).resolve().is_relative_to(target.resolve()), report
    assert Path(report["templates"]).resolve().is_relative_to(target.resolve()), report
    assert report["version"] == (REPO / "VERSION").read_text().strip()
    assert report["source_head"].startswith("// ---- tl_templates/cuda/common.h ----"), report
    assert report["elf"], report
