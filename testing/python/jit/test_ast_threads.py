"""Parsing and compiling user source from many threads at once never trips CPython 3.11's
shared AST-converter recursion counter (``SystemError: AST constructor recursion depth
mismatch``), which made test_threads fail once in CI."""

from __future__ import annotations

import gc
import re
import sys
import threading
from pathlib import Path

from tilelang.utils import pyast

_SOURCE = (Path(__file__).resolve().parents[3] / "tilelang/language/ast_rewrite.py").read_text()


class _CyclicFinalizer:
    """Garbage that only the cycle collector frees, running Python code when it does: a
    collection inside one thread's AST conversion then lets the interpreter switch threads."""

    def __init__(self):
        self.me = self

    def __del__(self):
        sum(range(200))


def _hammer(convert, rounds: int = 30, threads: int = 8) -> list[str]:
    errors: list[str] = []

    def work():
        for _ in range(rounds):
            for _ in range(300):
                _CyclicFinalizer()
            try:
                convert()
            except SystemError as err:
                errors.append(str(err))
                return

    old_threshold, old_interval = gc.get_threshold(), sys.getswitchinterval()
    gc.set_threshold(50)
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        gc.set_threshold(*old_threshold)
        sys.setswitchinterval(old_interval)
    return errors


def _parse_and_compile():
    tree = pyast.parse(_SOURCE, filename="ast_rewrite.py")
    pyast.compile_tree(tree, "ast_rewrite.py")


def test_locked_conversions_from_eight_threads():
    assert _hammer(_parse_and_compile) == []


def test_no_module_converts_outside_the_lock():
    """Every ``ast.parse`` / ``compile(<tree>)`` in the package goes through ``pyast``."""
    root = Path(pyast.__file__).resolve().parents[1]
    direct = re.compile(r"\bast\.parse\(|\bcompile\(tree\b|\bast\.literal_eval\(")
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "pyast.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert offenders == []
