"""Thread-safe conversions between Python source, ``ast`` trees and code objects.

CPython 3.11 keeps the recursion counter of its AST <-> object converters in one
interpreter-wide slot. When two threads convert at once and a garbage collection during
one conversion runs Python code (a ``__del__``), the interpreter may switch threads
mid-conversion and the other thread's conversion raises ``SystemError: AST constructor
recursion depth mismatch``. Every tilelang call that parses source or compiles a tree goes
through this module, which serialises them behind one lock, so compiling kernels from
several threads at once is safe (the conversions take microseconds to milliseconds).
"""

from __future__ import annotations

import ast
import threading
import types

_CONVERSION_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse`` under the process-wide conversion lock."""
    with _CONVERSION_LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def compile_tree(tree: ast.AST, filename: str, mode: str = "exec") -> types.CodeType:
    """``compile(tree, filename, mode, dont_inherit=True)`` under the conversion lock."""
    with _CONVERSION_LOCK:
        return compile(tree, filename, mode, dont_inherit=True)
