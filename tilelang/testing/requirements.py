"""``requires_*`` decorators: a test runs only where what it needs is present, else it skips.

A :class:`Feature` is applied as ``@requires_cuda`` (or ``requires_cuda(func)``); its
``marks()`` are the pytest marks it adds, for composing with ``pytest.mark.parametrize`` etc.
Checks run when a decorator is applied (test collection), not when this module is imported.
"""

from __future__ import annotations

import functools
import importlib.util

__all__ = [
    "Feature",
    "ascend_backend_compiled",
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
]


def _apply(func, marks):
    for mark in marks:
        func = mark(func)
    return func


class Feature:
    """A test requirement: ``name`` (also a pytest marker name when ``marker`` is set), a
    human ``long_name``, and ``check()`` -> bool (cached after the first call)."""

    def __init__(self, name: str, long_name: str, check, marker: str | None = None):
        self.name = name
        self.long_name = long_name
        self._check = check
        self.marker = marker

    @functools.cached_property
    def available(self) -> bool:
        """Whether the requirement is met on this machine."""
        try:
            return bool(self._check())
        except Exception:  # noqa: BLE001 - a failing probe means "not available"
            return False

    def marks(self) -> list:
        """The pytest marks: the feature's marker (if any), then a skip unless available."""
        import pytest

        out = [getattr(pytest.mark, self.marker)] if self.marker else []
        out.append(pytest.mark.skipif(not self.available, reason=f"Requires {self.long_name}"))
        return out

    def __call__(self, func):
        if not callable(func):
            raise TypeError(
                f"requires_{self.name}: decorates a test function or class, got {func!r}"
            )
        return _apply(func, self.marks())

    def __repr__(self) -> str:
        return f"<Feature requires_{self.name}: {'available' if self.available else 'missing'}>"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _llvm_available() -> bool:
    import tvm_tirx

    return bool(tvm_tirx.runtime.enabled("llvm"))


def _never() -> bool:
    return False


requires_cuda = Feature("cuda", "CUDA (an NVIDIA GPU visible to torch)", _cuda_available, "cuda")
requires_llvm = Feature("llvm", "LLVM (tilelang's CPU backend)", _llvm_available)
requires_rocm = Feature("rocm", "ROCm (tilelang has no ROCm backend)", _never)
requires_metal = Feature("metal", "Metal (tilelang has no Metal backend)", _never)
requires_ascend = Feature("ascend", "Ascend (tilelang has no Ascend backend)", _never)
requires_cdna = Feature("cdna", "a CDNA ROCm GPU (tilelang has no ROCm backend)", _never)
requires_gfx950 = Feature("gfx950", "gfx950 (tilelang has no ROCm backend)", _never)
requires_cuda_or_cdna = Feature("cuda_or_cdna", "CUDA or CDNA ROCm", _cuda_available, "cuda")


def ascend_backend_compiled() -> bool:
    """Whether this build has the Ascend backend: never, tilelang compiles for CPU and CUDA."""
    return False


def requires_package(*packages: str):
    """Skip unless every named Python package can be imported (``requires_package("scipy")``)."""
    if not packages or not all(isinstance(p, str) and p for p in packages):
        raise TypeError(f"requires_package: packages must be non-empty strings, got {packages!r}")
    missing = [p for p in packages if importlib.util.find_spec(p.split(".")[0]) is None]

    def decorate(func):
        import pytest

        reason = f"Requires package(s) {', '.join(missing)}"
        return pytest.mark.skipif(bool(missing), reason=reason)(func)

    return decorate


_MODES = {
    "ge": lambda have, need: have >= need,
    "gt": lambda have, need: have > need,
    "le": lambda have, need: have <= need,
    "lt": lambda have, need: have < need,
    "eq": lambda have, need: have == need,
}


def _device_compute_version() -> tuple[int, int]:
    """(major, minor) of GPU 0, or (0, 0) without one."""
    from ..contrib import nvcc

    try:
        return nvcc.parse_compute_version(nvcc.get_target_compute_version())
    except (ValueError, RuntimeError):
        return (0, 0)


def requires_cuda_compute_version(major_version: int, minor_version: int = 0, mode: str = "ge"):
    """Run the test only on a GPU whose compute capability compares to ``major.minor`` as
    ``mode`` says (``"ge"``, ``"gt"``, ``"le"``, ``"lt"``, ``"eq"``); implies :data:`requires_cuda`."""
    if mode not in _MODES:
        raise ValueError(
            f"requires_cuda_compute_version: mode must be one of {sorted(_MODES)}, got {mode!r}"
        )
    for name, value in (("major_version", major_version), ("minor_version", minor_version)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(
                f"requires_cuda_compute_version: {name} must be an int >= 0, got {value!r}"
            )
    need = (major_version, minor_version)

    def decorate(func):
        import pytest

        have = _device_compute_version()
        ok = _MODES[mode](have, need)
        reason = f"Requires CUDA compute {mode} {need[0]}.{need[1]}, but have {have[0]}.{have[1]}"
        return _apply(func, [pytest.mark.skipif(not ok, reason=reason), *requires_cuda.marks()])

    return decorate


def requires_cuda_compute_version_ge(major_version: int, minor_version: int = 0):
    """Compute capability >= ``major.minor`` (see :func:`requires_cuda_compute_version`)."""
    return requires_cuda_compute_version(major_version, minor_version, "ge")


def requires_cuda_compute_version_gt(major_version: int, minor_version: int = 0):
    """Compute capability > ``major.minor``."""
    return requires_cuda_compute_version(major_version, minor_version, "gt")


def requires_cuda_compute_version_le(major_version: int, minor_version: int = 0):
    """Compute capability <= ``major.minor``."""
    return requires_cuda_compute_version(major_version, minor_version, "le")


def requires_cuda_compute_version_lt(major_version: int, minor_version: int = 0):
    """Compute capability < ``major.minor``."""
    return requires_cuda_compute_version(major_version, minor_version, "lt")


def requires_cuda_compute_version_eq(major_version: int, minor_version: int = 0):
    """Compute capability == ``major.minor``."""
    return requires_cuda_compute_version(major_version, minor_version, "eq")
