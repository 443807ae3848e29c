"""ROCm backend: the pipeline (``pipeline.py``), HIP source (``codegen.py``), hipcc build
(``build.py``) and the HIP module launcher (``runtime.py``). Registers itself as the
backend of targets of kind ``rocm`` (user spellings ``"hip"``, ``"rocm"``)."""

from ..registry import register_backend
from .build import HipArtifact, HipBuildError, build_hip, disassemble, find_toolchain


class RocmBackend:
    """Compiles kernels for AMD CDNA GPUs (gfx90a, gfx940/941/942) through ``pipeline.py``."""

    name = "rocm"
    artifact_type = HipArtifact  # saved to and loaded from the kernel cache

    def build(self, func, *, target, pass_configs=None, compile_flags=None):
        """A :class:`HipArtifact` of ``func`` (source; code object when hipcc is installed)."""
        from . import pipeline

        return pipeline.build(func, target, pass_configs, compile_flags)

    def load(self, artifact):
        """A callable launching the artifact's kernel on the current HIP stream."""
        from .runtime import load_kernel

        return load_kernel(artifact)


register_backend("rocm", RocmBackend())

__all__ = [
    "HipArtifact",
    "HipBuildError",
    "RocmBackend",
    "build_hip",
    "disassemble",
    "find_toolchain",
]
