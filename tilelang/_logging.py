"""``tilelang.logger`` and ``tilelang.set_log_level`` (upstream's names)."""

from __future__ import annotations

import logging

logger = logging.getLogger("tilelang")

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _init() -> None:
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s  [TileLang:%(name)s:%(levelname)s]: %(message)s", "%Y-%m-%d %H:%M:%S"
        )
    )
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)


def set_log_level(level) -> None:
    """Set the level of the ``tilelang`` logger: a name (``"DEBUG"`` ... ``"CRITICAL"``) or int."""
    if isinstance(level, str):
        name = level.strip().upper()
        if name not in _LEVELS:
            raise ValueError(
                f"set_log_level: level must be one of {_LEVELS} or an int, got {level!r}"
            )
        level = getattr(logging, name)
    elif not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"set_log_level: level must be a str or int, got {type(level).__name__}")
    logger.setLevel(level)


_init()
