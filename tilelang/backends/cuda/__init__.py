"""CUDA backend: the pipeline (``pipeline.py``), build glue (TIRx -> CudaArtifact) and the
launcher that loads it. Registers itself as the backend of targets of kind ``cuda``."""

from ..registry import register_backend
from .build import CorruptArtifactError, CudaArtifact, CudaBuildError, build_cuda
from .runtime import CudaRuntimeError, load_kernel, load_module


class CudaBackend:
    """Compiles kernels for NVIDIA GPUs through ``pipeline.py``."""

    name = "cuda"

    def build(self, func, *, target, pass_configs=None, compile_flags=None):
        from . import pipeline

        return pipeline.build(func, target, pass_configs, compile_flags)

    def load(self, artifact):
        return load_kernel(artifact)


register_backend("cuda", CudaBackend())

__all__ = [
    "CorruptArtifactError",
    "CudaArtifact",
    "CudaBackend",
    "CudaBuildError",
    "CudaRuntimeError",
    "build_cuda",
    "load_kernel",
    "load_module",
]
