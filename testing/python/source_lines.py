"""Helpers for tests that check error messages name the user's source line."""

from __future__ import annotations

import inspect


def line_of(func, needle: str) -> int:
    """Absolute line number of the first line of ``func``'s source containing ``needle``."""
    lines, first = inspect.getsourcelines(func)
    for k, text in enumerate(lines):
        if needle in text:
            return first + k
    raise AssertionError(f"{needle!r} not in the source of {func.__name__}")
