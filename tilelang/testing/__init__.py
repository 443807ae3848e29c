"""Test helpers upstream programs and tests import as ``tilelang.testing`` (upstream's names).

- Requirement decorators, each a pytest skip when unmet: :data:`requires_cuda` (adds the
  ``cuda`` marker too), :func:`requires_cuda_compute_version` and its ``_ge/_gt/_le/_lt/_eq``
  forms, :func:`requires_package`, :data:`requires_llvm`; the ROCm / Metal / Ascend ones always
  skip (tilelang has no such backend).
- :func:`main` (run the calling test file with pytest), :func:`set_random_seed`,
  :func:`torch_assert_close`, and the benchmark runners :func:`process_func` /
  :func:`regression` of upstream's examples.

Kept light: pytest is imported when a decorator is applied or ``main`` runs, not here.
"""

from __future__ import annotations

from ..contrib import nvcc  # noqa: F401
from ..utils.target import determine_target, target_is_cuda  # noqa: F401
from ..utils.tensor import torch_assert_close
from .perf_regression import process_func, regression
from .requirements import (
    Feature,
    ascend_backend_compiled,
    requires_ascend,
    requires_cdna,
    requires_cuda,
    requires_cuda_compute_version,
    requires_cuda_compute_version_eq,
    requires_cuda_compute_version_ge,
    requires_cuda_compute_version_gt,
    requires_cuda_compute_version_le,
    requires_cuda_compute_version_lt,
    requires_cuda_or_cdna,
    requires_gfx950,
    requires_llvm,
    requires_metal,
    requires_package,
    requires_rocm,
)

__all__ = [
    "Feature",
    "ascend_backend_compiled",
    "main",
    "process_func",
    "regression",
    "requires_ascend",
    "requires_cdna",
    "requires_cuda",
    "requires_cuda_compute_version",
    "requires_cuda_compute_version_eq",
    "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt",
    "requires_cuda_compute_version_le",
    "requires_cuda_compute_version_lt",
    "requires_cuda_or_cdna",
    "requires_gfx950",
    "requires_llvm",
    "requires_metal",
    "requires_package",
    "requires_rocm",
    "set_random_seed",
    "torch_assert_close",
]


def target_is_cdna(target) -> bool:
    """Whether ``target`` is a CDNA ROCm target: never, tilelang has no ROCm backend."""
    return False


def target_is_gfx950(target) -> bool:
    """Whether ``target`` is a gfx950 ROCm target: never, tilelang has no ROCm backend."""
    return False


def main() -> None:
    """Run pytest on the file that called ``main()`` (plus ``sys.argv``'s options); exits."""
    import inspect
    import sys

    import pytest

    caller = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([caller, *sys.argv[1:]]))


def set_random_seed(seed: int = 42) -> None:
    """Seed Python's ``random``, numpy's global generator and torch (every CUDA device too)."""
    import random

    import numpy as np
    import torch

    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"set_random_seed: seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
