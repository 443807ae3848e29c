"""Report a run-time value used outside the branch or loop that bound it, at the user's lines.

``x = A[0]`` inside an IR ``if``/loop body binds an IR variable scoped to that body
(as in upstream TileLang); Python keeps the name, so a use after the body traces
into IR that LLVM later rejects with "Instruction does not dominate all uses".
TIRx's well-formedness check finds such uses; this module turns its report into a
:class:`~tilelang.errors.TraceError` naming the variable, the line of the use and
the line of the binding, and the fix (``T.alloc_var``).
"""

from __future__ import annotations

import re

from tvm_tirx.tirx import analysis

from .. import errors

_UNDEFINED = re.compile(
    r"undefined variable (?P<name>\S+) at (?P<use><root>[^ ]*?)\.?\s.*?"
    r"previously defined at (?P<defn><root>[^ ,]*)",
    re.S,
)
_STEP = re.compile(r"(\w+)(?:\[(\d+)\])?")


def _resolve(func, path: str):
    """The last node on ``path`` (``<root>.body.seq[0].value``) that carries a source line."""
    node, found = func, None
    for step in path.split(".")[1:]:
        m = _STEP.fullmatch(step)
        if m is None:
            break
        try:
            node = getattr(node, m.group(1))
            if m.group(2) is not None:
                node = node[int(m.group(2))]
        except (AttributeError, IndexError, TypeError):
            break
        if errors.where(getattr(node, "loc", None)):
            found = node
    return errors.where(found.loc) if found is not None else ""


def check_scopes(func) -> None:
    """Raise a TraceError if ``func`` uses a bound run-time value outside its scope."""
    if analysis.check_well_formed(func, assert_mode=False):
        return
    try:
        analysis.check_well_formed(func, assert_mode=True)
    except Exception as err:  # noqa: BLE001 - TIRx reports through RuntimeError/ValueError
        m = _UNDEFINED.search(str(err))
        if m is None:
            return  # another kind of finding: leave it to the compiler
        name = m.group("name")
        use, defn = _resolve(func, m.group("use")), _resolve(func, m.group("defn"))
        where = f"{use}: " if use else ""
        bound = f" (bound at {defn})" if defn else ""
        raise errors.TraceError(
            f"{where}{name!r} is used outside the if/else branch or loop body that assigned "
            f"it{bound}; a run-time value assigned there only exists there. Declare it before "
            f"with {name} = T.alloc_var(dtype) and assign it in the branch"
        ) from None
