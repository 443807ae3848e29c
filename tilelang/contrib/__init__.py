"""Toolchain helpers (upstream's ``tilelang.contrib``): :mod:`tilelang.contrib.nvcc`."""

from . import nvcc  # noqa: F401

__all__ = ["nvcc"]
