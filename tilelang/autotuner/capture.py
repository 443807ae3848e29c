"""``with set_autotune_inputs(a, b, c):`` -- the tensors the autotuner benchmarks with."""

from __future__ import annotations

import threading

_LOCAL = threading.local()


def _stack() -> list:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


class AutotuneInputsCapture:
    """Context manager pushing one list of input tensors for the autotuner (per thread)."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: list):
        self.tensors = tensors

    def __enter__(self) -> AutotuneInputsCapture:
        _stack().append(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _stack().pop()


def set_autotune_inputs(*args) -> AutotuneInputsCapture:
    """Benchmark autotuned kernels on these tensors: ``set_autotune_inputs(a, b, c)`` or
    ``set_autotune_inputs([a, b, c])`` -- the kernel's inputs in parameter order (all
    parameters when it has no ``out_idx``). Overrides ``supply_prog``.
    """
    if len(args) == 1 and isinstance(args[0], list | tuple):
        return AutotuneInputsCapture(list(args[0]))
    return AutotuneInputsCapture(list(args))


def get_autotune_inputs() -> list | None:
    """The tensors of the innermost active :func:`set_autotune_inputs`, or None."""
    stack = _stack()
    return stack[-1].tensors if stack else None
