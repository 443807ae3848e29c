"""``build_date``: the build date encoded in a tilelang version string."""

from __future__ import annotations

import re

__all__ = ["build_date"]


def build_date(version_str: str | None = None) -> int | None:
    """The ``YYYYMMDD`` of a version like ``0.1.7.post3+cuda.d20260127.gita17230e4`` as an int.

    ``None`` when the string carries no ``.dYYYYMMDD.`` part; defaults to ``tilelang.__version__``.
    """
    if version_str is None:
        from ..version import __version__ as version_str
    if not isinstance(version_str, str):
        raise TypeError(f"build_date: version_str must be a str, got {type(version_str).__name__}")
    match = re.search(r"\.d(\d{8})(?:\.|$)", version_str)
    return int(match.group(1)) if match else None
