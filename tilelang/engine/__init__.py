"""Compiler driver entry points: ``tilelang.lower`` (every stage's IR of one build)."""

from .lower import LoweredKernel, lower

__all__ = ["LoweredKernel", "lower"]
