"""``@deprecated(old, new)``: warn on each call that ``old`` is deprecated in favour of ``new``."""

from __future__ import annotations

import functools
import warnings

__all__ = ["deprecated", "deprecated_warning"]


def deprecated_warning(method_name: str, new_method_name: str, phaseout_version: str | None = None):
    """Emit a DeprecationWarning saying ``method_name`` is replaced by ``new_method_name``."""
    tail = f" and will be removed in {phaseout_version}" if phaseout_version else ""
    warnings.warn(
        f"{method_name} is deprecated, use {new_method_name} instead{tail}",
        DeprecationWarning,
        stacklevel=3,
    )


def deprecated(method_name: str, new_method_name: str, phaseout_version: str | None = None):
    """Decorator: the wrapped function warns (DeprecationWarning) on every call, then runs."""
    for arg, value in (("method_name", method_name), ("new_method_name", new_method_name)):
        if not isinstance(value, str):
            raise TypeError(f"deprecated: {arg} must be a str, got {type(value).__name__}")

    def wrap(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            deprecated_warning(method_name, new_method_name, phaseout_version)
            return func(*args, **kwargs)

        return wrapper

    return wrap
