"""Passes shared by the backends; ``from tilelang.transform import PassConfigKey`` (upstream's
import path; the pass configs live in ``tilelang.engine.pass_config``)."""

from ..engine.pass_config import PassConfigKey  # noqa: F401

__all__ = ["PassConfigKey"]
