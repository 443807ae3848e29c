"""Text views of IR and unified diffs between two of them."""

from __future__ import annotations

import difflib

from ..engine.instrument import as_text


def ir_diff(a, b, a_name: str = "a", b_name: str = "b", context: int = 3) -> str:
    """Unified diff from ``a`` to ``b`` (IR objects, text, or dump files as ``pathlib.Path``).

    Returns '' when they print the same. ``a_name``/``b_name`` label the two sides and
    ``context`` is the number of unchanged lines shown around each change.
    """
    from pathlib import Path

    if not isinstance(context, int) or context < 0:
        raise ValueError(f"context must be a non-negative int, got {context!r}")
    texts = []
    for value in (a, b):
        texts.append(value.read_text() if isinstance(value, Path) else as_text(value))
    lines = difflib.unified_diff(
        texts[0].splitlines(keepends=True),
        texts[1].splitlines(keepends=True),
        fromfile=a_name,
        tofile=b_name,
        n=context,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
