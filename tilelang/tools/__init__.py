"""Inspection tools: IR diffs, and (re-exported) ``lower`` with every stage's IR.

- ``tilelang.tools.ir_diff(a, b)``: unified diff between two IRs (or texts, or dump files).
- ``tilelang.tools.plot_layout(layout, ...)``: draw a ``T.Layout`` / ``T.Fragment`` (matplotlib).
- ``tilelang.lower(func, target=...)``: see ``tilelang.engine.driver``.
- IR dumps and pass timing: ``TILELANG_DUMP_IR=<dir>``, ``TILELANG_PASS_TIMING=1`` (or the
  pass configs in ``tilelang.PassConfigKey``); see ``tilelang.engine.instrument``.
"""

from ..engine.driver import LoweredKernel, lower
from .ir_diff import as_text, ir_diff
from .plot_layout import plot_layout

__all__ = ["LoweredKernel", "as_text", "ir_diff", "lower", "plot_layout"]
