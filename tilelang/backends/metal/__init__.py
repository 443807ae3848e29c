"""Metal backend: the pipeline (``pipeline.py``) and MSL source (``codegen.py``). Registers
itself as the backend of targets of kind ``metal``. Kernels are compiled to source only: no
Metal compiler or device exists on the machines this project builds on, so ``load`` raises."""

from ... import errors
from ..registry import register_backend
from .codegen import MetalArtifact, MetalCodegenError, generate_msl


class MetalBackend:
    """Generates MSL for Apple GPUs through ``pipeline.py``."""

    name = "metal"
    artifact_type = MetalArtifact  # saved to and loaded from the kernel cache

    def build(self, func, *, target, pass_configs=None, compile_flags=None):
        """A :class:`MetalArtifact` (MSL source) of ``func``."""
        from . import pipeline

        return pipeline.build(func, target, pass_configs, compile_flags)

    def load(self, artifact):
        """Running Metal kernels is not implemented: raises a CompileError saying so."""
        raise errors.CompileError(
            "the metal target generates MSL source only (artifact.kernel_source); launching "
            "Metal kernels is not implemented"
        )


register_backend("metal", MetalBackend())

__all__ = ["MetalArtifact", "MetalBackend", "MetalCodegenError", "generate_msl"]
