"""Exceptions raised by tilelang, each naming the user's source line where one is known.

The ground floor of the package: this module imports nothing of tilelang. The user's
location during a trace comes from a provider that the tracer installs
(:func:`set_location_provider`; ``tilelang.language.builder`` installs ``user_where``).
"""

from __future__ import annotations

from collections.abc import Callable

_location_provider: Callable[[], str] | None = None


def set_location_provider(provider: Callable[[], str] | None) -> Callable[[], str] | None:
    """Install ``provider`` (returns the user's ``file:line``, or '' when none is known).

    :class:`TraceError` asks it for the prefix of its message. Returns the provider it
    replaces; ``None`` removes it.
    """
    global _location_provider
    previous, _location_provider = _location_provider, provider
    return previous


def current_location() -> str:
    """The user's ``file:line`` as the installed provider reports it ('' without one)."""
    provider = _location_provider
    return provider() if provider is not None else ""


class TileLangError(Exception):
    """Base class of every tilelang error."""


class TraceError(TileLangError):
    """The kernel's Python body could not be traced into IR."""

    def __init__(self, message: str, where: str | None = None):
        """``where``: the ``file:line`` to name; by default the installed location provider's."""
        if where is None:
            where = current_location()
        super().__init__(f"{where}: {message}" if where else message)


class CompileError(TileLangError):
    """A kernel could not be compiled for its target (unsupported op, bad shapes, ...)."""


class KernelArgumentError(TileLangError, ValueError):
    """A kernel was called with arguments that do not fit its signature."""


def where(loc) -> str:
    """``file:line`` of a TIRx Location, or '' when it carries none."""
    name = getattr(loc, "source_name", None)
    line = getattr(loc, "start_line", None)
    if name is None or line is None:
        return ""
    return f"{getattr(name, 'name', name)}:{line}"


def compile_error(message: str, loc=None) -> CompileError:
    """A CompileError prefixed with the user's ``file:line`` from ``loc``."""
    prefix = where(loc) if loc is not None else ""
    return CompileError(f"{prefix}: {message}" if prefix else message)


def __getattr__(name: str):
    """Upstream's internal error helpers are not provided: a clear AttributeError."""
    if name == "enrich_error":
        raise AttributeError(
            "tilelang.errors.enrich_error is upstream's internal helper that rewrites errors "
            "with the user's source line; tilelang's errors carry the line when they are "
            "raised (TileLangError subclasses in tilelang.errors), so nothing needs enriching"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
