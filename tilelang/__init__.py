"""tilelang: a Python DSL for tile-level GPU kernels, compiled through TVM's TIRx."""

from __future__ import annotations

# upstream's top-level helpers (see docs/api-coverage.md for what is and is not provided)
from . import (  # noqa: F401
    cache,
    carver,
    contrib,
    dtypes,
    language,
    math,
    profiler,
    testing,
    tools,
    transform,
    tvm,
    utils,
)
from ._logging import logger, set_log_level  # noqa: F401
from .autotuner import autotune  # noqa: F401
from .cache import clear_cache, disable_cache, enable_cache, is_cache_enabled  # noqa: F401
from .engine.callback import (  # noqa: F401
    register_c_postproc,
    register_cuda_postproc,
    register_hip_postproc,
    register_metal_postproc,
)
from .engine.driver import lower  # noqa: F401
from .engine.pass_config import PassConfigKey  # noqa: F401
from .env import env  # noqa: F401
from .errors import CompileError, KernelArgumentError, TileLangError, TraceError  # noqa: F401
from .jit import JITImpl, compile, jit  # noqa: F401
from .jit.autograd import autograd_function  # noqa: F401
from .jit.kernel import JITKernel  # noqa: F401
from .jit.par_compile import par_compile  # noqa: F401
from .jit.torch_op import torch_op  # noqa: F401
from .layout import Fragment, Layout  # noqa: F401
from .math import cdiv, next_power_of_2  # noqa: F401
from .profiler import Profiler, TensorSupplyType  # noqa: F401
from .tvm import DataType  # noqa: F401
from .utils import build_date, deprecated  # noqa: F401
from .version import __version__  # noqa: F401

# isort: split
from .utils import upstream_modules as _upstream_modules

_upstream_modules.install()  # `import tilelang.cuda...` (upstream-only): a clear error


def __getattr__(name: str):
    """``tilelang.cuda`` (upstream's intrinsic emitters) is imported on first use; the other
    upstream-only packages: an AttributeError saying why."""
    if name == "cuda":
        import importlib

        return importlib.import_module(".cuda", __name__)
    raise _upstream_modules.attribute_error(__name__, name)
