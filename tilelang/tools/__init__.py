"""Inspection tools: IR diffs, and (re-exported) ``lower`` with every stage's IR.

- ``tilelang.tools.ir_diff(a, b)``: unified diff between two IRs (or texts, or dump files).
- ``tilelang.tools.Analyzer.analysis(func, device)``: FLOPs, global bytes and a roofline
  time estimate of a traced kernel (upstream's tool).
- ``tilelang.tools.plot_layout(layout, ...)``: draw a ``T.Layout`` / ``T.Fragment`` (matplotlib).
- ``tilelang.lower(func, target=...)``: see ``tilelang.engine.driver``.
- IR dumps and pass timing: ``TILELANG_DUMP_IR=<dir>``, ``TILELANG_PASS_TIMING=1`` (or the
  pass configs in ``tilelang.PassConfigKey``); see ``tilelang.engine.instrument``.
"""

from ..engine.driver import LoweredKernel, lower
from .Analyzer import AnalysisResult, Analyzer
from .ir_diff import as_text, ir_diff
from .plot_layout import plot_layout

__all__ = [
    "AnalysisResult",
    "Analyzer",
    "LoweredKernel",
    "as_text",
    "ir_diff",
    "lower",
    "plot_layout",
]
