"""The compiler's engine: pass configs (``pass_config.py``, every knob that changes generated
code), the stage runner (``instrument.py``), ``tilelang.lower`` (``driver.py``) and the
source post-processing hooks (``callback.py``).

``lower``/``LoweredKernel`` load on first use: the pass configs and the stage runner sit low
in the floor plan (the backends import them), ``driver.py`` high (it drives the backends).
"""

from .callback import (  # noqa: F401 - upstream's tilelang.engine names
    register_c_postproc,
    register_c_postproc_callback,
    register_cuda_postproc,
    register_cuda_postproc_callback,
    register_hip_postproc,
    register_hip_postproc_callback,
    register_metal_postproc,
    register_metal_postproc_callback,
)

__all__ = ["LoweredKernel", "lower"]


def __getattr__(name):
    if name in __all__:
        from . import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'tilelang.engine' has no attribute {name!r}")
