"""Every ```python block of README.md and docs/*.md runs as written, on the CPU.

A block opts out with a line ``# doc-test: skip`` (for GPU-only snippets; use sparingly).
Each block is written to a file and run as ``__main__`` (tracing needs the kernel's source
file), with CUDA hidden so that ``target="auto"`` picks the CPU backend.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP_MARK = "# doc-test: skip"
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks():
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for k, match in enumerate(_BLOCK.finditer(text)):
            line = text.count("\n", 0, match.start()) + 1
            out.append(pytest.param(match.group(1), id=f"{path.name}:{line}#{k}"))
    return out


BLOCKS = _blocks()


def test_docs_have_python_blocks():
    names = {p.id.split(":")[0] for p in BLOCKS}
    assert "README.md" in names and "language.md" in names


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_block_runs(code, tmp_path, monkeypatch):
    if SKIP_MARK in code:
        pytest.skip("marked # doc-test: skip")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    script = tmp_path / "doc_block.py"
    script.write_text(code)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
