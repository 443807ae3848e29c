"""Exceptions raised by tilelang, each naming the user's source line where one is known."""

from __future__ import annotations


class TileLangError(Exception):
    """Base class of every tilelang error."""


class TraceError(TileLangError):
    """The kernel's Python body could not be traced into IR."""

    def __init__(self, message: str):
        from .language.builder import user_where

        where = user_where()
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
