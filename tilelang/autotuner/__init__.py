"""The autotuner: ``@tilelang.autotune`` over ``@tilelang.jit`` (see ``tuner.py``)."""

from .capture import get_autotune_inputs, set_autotune_inputs
from .param import AutotuneResult, CompileArgs, ProfileArgs
from .tuner import AutoTuneImpl, AutoTuner, autotune, clear_memory_cache

__all__ = [
    "AutoTuneImpl",
    "AutoTuner",
    "AutotuneResult",
    "CompileArgs",
    "ProfileArgs",
    "autotune",
    "clear_memory_cache",
    "get_autotune_inputs",
    "set_autotune_inputs",
]
