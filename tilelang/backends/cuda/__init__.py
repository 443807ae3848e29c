"""CUDA backend: build glue (TIRx -> CudaArtifact) and the launcher that loads it."""

from .build import CorruptArtifactError, CudaArtifact, CudaBuildError, build_cuda
from .runtime import CudaRuntimeError, load_kernel, load_module

__all__ = [
    "CorruptArtifactError",
    "CudaArtifact",
    "CudaBuildError",
    "CudaRuntimeError",
    "build_cuda",
    "load_kernel",
    "load_module",
]
