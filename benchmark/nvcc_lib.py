"""Build a CUDA source string with ``nvcc`` into a shared library loaded through ctypes.

Benchmarks use it for reference kernels written in plain CUDA (the ``mma.sync`` ceiling,
the driver's launch floor); tilelang itself compiles with NVRTC and never needs this.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


def nvcc_path() -> str:
    """The nvcc on PATH, else ``$CUDA_HOME/bin/nvcc``."""
    for candidate in (
        shutil.which("nvcc"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    raise RuntimeError("nvcc not found (PATH or CUDA_HOME)")


def build_library(source: str, arch: str, name: str, libs: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Compile ``source`` for ``arch`` (e.g. ``sm_90a``) into ``lib<name>.so`` and load it."""
    folder = Path(tempfile.mkdtemp(prefix=f"tl_{name}_"))
    src, lib = folder / f"{name}.cu", folder / f"lib{name}.so"
    src.write_text(source)
    cmd = [nvcc_path(), f"-arch={arch}", "-O3", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib),
           str(src), *(f"-l{x}" for x in libs)]  # fmt: skip
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(str(lib))
