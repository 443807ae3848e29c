"""tilelang: a Python DSL for tile-level GPU kernels, compiled through TVM's TIRx."""

from __future__ import annotations

from . import cache, language, tools  # noqa: F401
from .autotuner import autotune  # noqa: F401
from .engine.driver import lower  # noqa: F401
from .engine.pass_config import PassConfigKey  # noqa: F401
from .errors import CompileError, KernelArgumentError, TileLangError, TraceError  # noqa: F401
from .jit import compile, jit  # noqa: F401
from .jit.autograd import autograd_function  # noqa: F401
from .jit.kernel import JITKernel  # noqa: F401
from .jit.torch_op import torch_op  # noqa: F401
from .profiler import TensorSupplyType  # noqa: F401
from .version import __version__  # noqa: F401
