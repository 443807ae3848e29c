"""Exceptions of the CUDA build glue (``build.py`` and the modules it is split into)."""

from __future__ import annotations

__all__ = ["CorruptArtifactError", "CudaBuildError"]


class CudaBuildError(RuntimeError):
    """Raised when a module cannot be built into a CUDA artifact."""


class CorruptArtifactError(RuntimeError):
    """Raised by :meth:`CudaArtifact.load` when a saved artifact is missing or damaged."""
