"""The main loop of a ``cuobjdump -sass`` listing (one finder for ``benchmark/sass_audit.py``
and the SASS tests).

A loop is the span from a backward branch's target to the branch. Not loops: an
unpredicated backward branch (the return of an out-of-line slow path, e.g. an mbarrier
try-wait retried past the function's end) and ``BRA.U.ANY`` (a warp's spin on a wait).
The main loop is the one spanning the most (H)MMA instructions (HMMA, HGMMA); among
equals the shortest (the innermost of nested loops).
"""

from __future__ import annotations

import collections
import re

_INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
_BRANCH = re.compile(r"BRA(?:\.\w+)* (?:\S+ )?0x([0-9a-f]+)")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def instructions(sass: str) -> list[tuple[int, str]]:
    """``(address, text)`` of every instruction of the listing, in order."""
    out = []
    for line in sass.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def opcode(text: str) -> str:
    """The opcode with its modifiers, predicate dropped (``@!P0 FMNMX.FTZ R1, ...`` ->
    ``FMNMX.FTZ``)."""
    return _PREDICATE.sub("", text).split()[0]


def loops(sass: str) -> list[list[str]]:
    """The instruction texts of every loop (module docstring), in branch order."""
    ins = instructions(sass)
    out = []
    for addr, text in ins:
        m = _BRANCH.search(text)
        if m is None or ".U.ANY" in text or not text.startswith("@"):
            continue
        target = int(m.group(1), 16)
        if target < addr:
            out.append([t for a, t in ins if target <= a <= addr])
    return out


def main_loop(sass: str) -> list[str] | None:
    """The instruction texts of the loop spanning the most (H)MMA instructions (the
    shortest among equals); None when the listing has no loop."""
    best = None
    for body in loops(sass):
        key = (sum("MMA" in t for t in body), -len(body))
        if best is None or key > best[0]:
            best = (key, body)
    return None if best is None else best[1]


def opcode_counts(body: list[str]) -> collections.Counter:
    """How often each opcode (with modifiers) occurs in ``body``."""
    return collections.Counter(opcode(t) for t in body)
