"""The compiler's engine: pass configs (``pass_config.py``, every knob that changes generated
code), the stage runner (``instrument.py``) and ``tilelang.lower`` (``driver.py``).

``lower``/``LoweredKernel`` load on first use: the pass configs and the stage runner sit low
in the floor plan (the backends import them), ``driver.py`` high (it drives the backends).
"""

__all__ = ["LoweredKernel", "lower"]


def __getattr__(name):
    if name in __all__:
        from . import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'tilelang.engine' has no attribute {name!r}")
