"""Hardware descriptions for tuning (upstream's ``tilelang.carver``): :mod:`tilelang.carver.arch`.

Upstream's roller / ``MatmulTemplate`` hint generator is not provided: ``@tilelang.autotune``
over explicit config lists is tilelang's tuning path.
"""

from . import arch  # noqa: F401

__all__ = ["arch"]
