"""tilelang: a Python DSL for tile-level GPU kernels, compiled through TVM's TIRx."""

from __future__ import annotations

import os as _os

from . import cache, language, tools  # noqa: F401
from .autotuner import autotune  # noqa: F401
from .engine import lower  # noqa: F401
from .engine.pass_config import PassConfigKey  # noqa: F401
from .errors import CompileError, KernelArgumentError, TileLangError, TraceError  # noqa: F401
from .jit import compile, jit  # noqa: F401
from .jit.autograd import autograd_function  # noqa: F401
from .jit.kernel import JITKernel  # noqa: F401
from .jit.torch_op import torch_op  # noqa: F401
from .profiler import TensorSupplyType  # noqa: F401


def _read_version() -> str:
    here = _os.path.dirname(__file__)
    for path in (_os.path.join(here, "VERSION"), _os.path.join(here, "..", "VERSION")):
        if _os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
    try:
        from importlib.metadata import version

        return version("tilelang")
    except Exception:  # noqa: BLE001
        return "0.0.0"


__version__ = _read_version()
