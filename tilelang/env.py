"""``tilelang.env``: the environment variables tilelang reads, in one object (upstream's names).

Every attribute reads ``os.environ`` live; assigning one (``tilelang.env.TILELANG_CACHE_DIR =
"/tmp/c"``) sets the environment variable, so every part of tilelang sees it::

    tilelang.env.TILELANG_CACHE_DIR            # "~/.tilelang/cache" unless set
    tilelang.env.disable_cache()               # same as tilelang.disable_cache()

Variables upstream defines that nothing here reads (CUTLASS paths, ROCm, pass-diff HTML,
...) are kept so programs that read them still work; they have no effect.
"""

from __future__ import annotations

import os
import shutil

__all__ = [
    "CUDA_HOME",
    "ROCM_HOME",
    "TL_ROOT",
    "EnvVar",
    "Environment",
    "disable_cache",
    "enable_cache",
    "env",
    "is_cache_enabled",
]

TL_ROOT = os.path.dirname(os.path.abspath(__file__))

_TRUE = ("1", "true", "yes", "on")


def _truthy(value) -> bool:
    return str(value).strip().lower() in _TRUE


def _find_cuda_home() -> str:
    """CUDA_HOME / CUDA_PATH, else the toolkit around ``nvcc`` on PATH or /usr/local/cuda ("" if none)."""
    for key in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(key)
        if value and os.path.isdir(value):
            return value
    candidates = []
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    candidates.append("/usr/local/cuda")
    for path in candidates:
        if os.path.exists(os.path.join(path, "include", "cuda_runtime.h")):
            return path
    return ""


class EnvVar:
    """One environment variable: its ``key`` and the default used while it is unset."""

    def __init__(self, key: str, default=None):
        self.key = key
        self.default = default

    def get(self):
        """``os.environ[key]`` if set, else the default."""
        if self.key in os.environ:
            return os.environ[self.key]
        return self.default() if callable(self.default) else self.default

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return self.get()

    def __set__(self, instance, value):
        if value is None:
            os.environ.pop(self.key, None)
        else:
            os.environ[self.key] = str(value)

    def __repr__(self) -> str:
        return f"EnvVar({self.key!r}, default={self.default!r})"


class Environment:
    """Tilelang's environment variables as attributes, plus upstream's helper methods."""

    CUDA_HOME = EnvVar("CUDA_HOME", _find_cuda_home)
    ROCM_HOME = EnvVar("ROCM_PATH", "")

    # kernel cache (tilelang/cache)
    TILELANG_CACHE_DIR = EnvVar(
        "TILELANG_CACHE_DIR", lambda: os.path.expanduser("~/.tilelang/cache")
    )
    TILELANG_DISABLE_CACHE = EnvVar("TILELANG_DISABLE_CACHE", "0")
    TILELANG_CACHE_MAX_BYTES = EnvVar("TILELANG_CACHE_MAX_BYTES", "8G")
    TILELANG_CACHE_LOCK_TIMEOUT = EnvVar("TILELANG_CACHE_LOCK_TIMEOUT", "600")

    # autotuner (tilelang/autotuner)
    TILELANG_AUTO_TUNING_DISABLE_CACHE = EnvVar("TILELANG_AUTO_TUNING_DISABLE_CACHE", "0")
    TILELANG_AUTO_TUNING_CPU_UTILITIES = EnvVar("TILELANG_AUTO_TUNING_CPU_UTILITIES", "0.9")
    TILELANG_AUTO_TUNING_CPU_COUNTS = EnvVar("TILELANG_AUTO_TUNING_CPU_COUNTS", "-1")
    TILELANG_AUTO_TUNING_MAX_CPU_COUNT = EnvVar("TILELANG_AUTO_TUNING_MAX_CPU_COUNT", "-1")

    # debugging (tilelang/transform/instrument.py)
    TILELANG_DUMP_IR = EnvVar("TILELANG_DUMP_IR", "")
    TILELANG_PASS_TIMING = EnvVar("TILELANG_PASS_TIMING", "0")

    # compilation defaults
    TILELANG_DEFAULT_TARGET = EnvVar("TILELANG_DEFAULT_TARGET", "auto")
    TILELANG_DEFAULT_EXECUTION_BACKEND = EnvVar("TILELANG_EXECUTION_BACKEND", "auto")
    TILELANG_DEFAULT_VERBOSE = EnvVar("TILELANG_VERBOSE", "0")
    TILELANG_CUDA_DIRECT_LAUNCH = EnvVar("TILELANG_CUDA_DIRECT_LAUNCH", "1")
    TILELANG_CUDA_NVRTC_DRIVER = EnvVar("TILELANG_CUDA_NVRTC_DRIVER", "1")
    TILELANG_CPU_MCPU = EnvVar("TILELANG_CPU_MCPU", "")

    # upstream names with no effect here (read by upstream's C++ build or tools we lack)
    TILELANG_PRINT_ON_COMPILATION = EnvVar("TILELANG_PRINT_ON_COMPILATION", "1")
    TILELANG_CLEANUP_TEMP_FILES = EnvVar("TILELANG_CLEANUP_TEMP_FILES", "1")
    TILELANG_TEMPLATE_PATH = EnvVar("TL_TEMPLATE_PATH", None)
    CUTLASS_INCLUDE_DIR = EnvVar("TL_CUTLASS_PATH", None)
    TVM_IMPORT_PYTHON_PATH = EnvVar("TVM_IMPORT_PYTHON_PATH", None)

    # -- cache switches (the same state as tilelang.cache) --------------------------
    def is_cache_enabled(self) -> bool:
        """Whether compiled kernels are stored in and loaded from the disk cache."""
        from .cache import is_cache_enabled

        return is_cache_enabled()

    def enable_cache(self) -> None:
        """Turn the disk cache back on (``TILELANG_DISABLE_CACHE=1`` still wins)."""
        from .cache import enable_cache

        enable_cache()

    def disable_cache(self) -> None:
        """Turn the disk cache off for this process."""
        from .cache import disable_cache

        disable_cache()

    def is_cache_globally_disabled(self) -> bool:
        """Whether ``TILELANG_DISABLE_CACHE`` turns the cache off."""
        return _truthy(self.TILELANG_DISABLE_CACHE)

    def is_autotune_cache_disabled(self) -> bool:
        """Whether ``TILELANG_AUTO_TUNING_DISABLE_CACHE`` turns off the autotuner's records."""
        return _truthy(self.TILELANG_AUTO_TUNING_DISABLE_CACHE)

    def is_print_on_compilation_enabled(self) -> bool:
        """Upstream's ``TILELANG_PRINT_ON_COMPILATION`` switch (read, but nothing prints here)."""
        return _truthy(self.TILELANG_PRINT_ON_COMPILATION)

    def get_default_target(self) -> str:
        """``TILELANG_DEFAULT_TARGET`` (default ``"auto"``)."""
        return self.TILELANG_DEFAULT_TARGET or "auto"

    def get_default_execution_backend(self) -> str:
        """``TILELANG_EXECUTION_BACKEND`` (default ``"auto"``)."""
        return self.TILELANG_DEFAULT_EXECUTION_BACKEND or "auto"

    def get_default_verbose(self) -> bool:
        """``TILELANG_VERBOSE`` as a bool."""
        return _truthy(self.TILELANG_DEFAULT_VERBOSE)

    def is_light_import(self) -> bool:
        """Always False: tilelang has no light-import mode."""
        return False


env = Environment()
CUDA_HOME = env.CUDA_HOME
ROCM_HOME = env.ROCM_HOME
is_cache_enabled = env.is_cache_enabled
enable_cache = env.enable_cache
disable_cache = env.disable_cache
