"""The CPU backend: LLVM through TIRx; see ``pipeline.py`` for the pass order."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..registry import register_backend
from . import pipeline


@dataclass
class CpuArtifact:
    """A built CPU kernel: the shared library, its entry point and its source views."""

    lib_path: str
    entry: str
    kernel_source: str
    files: dict = field(default_factory=dict)


class CpuBackend:
    """Compiles kernels to host code; blocks run in parallel over cores."""

    name = "cpu"

    def build(self, func, *, target, pass_configs=None, compile_flags=None, out_dir=None):
        lib_path, lowered = pipeline.build(func, pass_configs, out_dir=out_dir)
        entry = (
            str(func.attrs["global_symbol"])
            if func.attrs and "global_symbol" in func.attrs
            else "main"
        )
        return CpuArtifact(lib_path, entry, lowered.script(), {"kernel.so": lib_path})

    def load(self, artifact: CpuArtifact):
        if not os.path.exists(artifact.lib_path):
            raise FileNotFoundError(artifact.lib_path)
        return pipeline.load(artifact.lib_path, artifact.entry)


register_backend("cpu", CpuBackend())
