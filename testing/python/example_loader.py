"""Load an example script of ``examples/`` as a module (shared by the test files)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(relpath: str):
    """``examples/<relpath>`` executed as a fresh module (its folder importable meanwhile)."""
    path = EXAMPLES / relpath
    name = "example_" + relpath.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module
