"""Turn errors raised by Python or TIRx while tracing or compiling a kernel into tilelang errors.

Tracing: an exception escaping the user's kernel body that is not a
:class:`~tilelang.errors.TileLangError` (``A + B`` on tensors, ``A[0, 1]`` on a 1-D
tensor, a TIRx type check) becomes a :class:`~tilelang.errors.TraceError` naming the
kernel line (and the helper's line, for a plain helper function) that raised it; it also
stays an instance of the original exception class (``except TypeError`` still works),
and the original is chained as ``__cause__``.

Compiling: an exception from a backend's build that is not a TileLangError becomes a
:class:`~tilelang.errors.CompileError` naming the kernel, its first source line and the
target, with the foundation's message shortened to its first lines.
"""

from __future__ import annotations

import os

import tvm_ffi
from tvm_tirx import ir

from .. import errors

_MAX_LINES = 4
_CLASSES: dict = {}


def short_message(err: BaseException) -> str:
    """The first few non-empty lines of ``err``'s message (TIRx appends long context)."""
    lines = [line.rstrip() for line in str(err).splitlines() if line.strip()]
    text = "\n  ".join(lines[:_MAX_LINES])
    if len(lines) > _MAX_LINES:
        text += "\n  ..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _library_file(filename: str) -> bool:
    from .trace_guards import _library_dirs

    return filename.startswith(_library_dirs()) or filename.startswith("<")


def user_lines(tb) -> tuple[str, str]:
    """(``file:line`` of the innermost kernel-source frame, of the innermost non-library
    frame) on traceback ``tb``; '' where none."""
    from .builder import USER_CODE

    kernel, other = "", ""
    while tb is not None:
        code = tb.tb_frame.f_code
        where = f"{code.co_filename}:{tb.tb_lineno}"
        if code in USER_CODE:
            kernel = where
        elif not _library_file(os.path.abspath(code.co_filename)):
            other = where
        tb = tb.tb_next
    return kernel, other


def _error_class(base: type, family: type) -> type:
    """A subclass of both ``family`` (a TileLangError) and ``base`` (the original class)."""
    key = (base, family)
    if key not in _CLASSES:
        try:
            _CLASSES[key] = type(f"{family.__name__}[{base.__name__}]", (family, base), {})
        except TypeError:  # incompatible layouts: the tilelang class alone
            _CLASSES[key] = family
    return _CLASSES[key]


def trace_error(err: Exception) -> errors.TraceError:
    """A TraceError (also of ``err``'s class) naming the user's line where ``err`` rose."""
    kernel, other = user_lines(err.__traceback__)
    where = kernel or other
    helper = f" (in {other})" if other and kernel and other != kernel else ""
    message = f"{where}: {short_message(err)}{helper}" if where else short_message(err)
    cls = _error_class(type(err), errors.TraceError)
    try:
        return cls(message, where="")  # the message already names the line
    except Exception:  # noqa: BLE001 - an exception class with an exotic constructor
        return errors.TraceError(message, where="")


def first_line(func) -> str:
    """``file:line`` of the first statement of a traced function that carries a location."""
    found = []

    def visit(node):
        if found:
            return tvm_ffi.WalkResult.SKIP
        where = errors.where(getattr(node, "loc", None))
        if where:
            found.append(where)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(func.body, [(ir.Stmt, visit)], order="pre")
    return found[0] if found else ""


def compile_error(err: Exception, func, target) -> errors.CompileError:
    """A CompileError naming the kernel, its source and the target for a foundation error."""
    name = "kernel"
    if func.attrs and "global_symbol" in func.attrs:
        name = str(func.attrs["global_symbol"])
    where = first_line(func)
    kind = target.get("kind", "?") if isinstance(target, dict) else str(target)
    arch = f" {target['arch']}" if isinstance(target, dict) and "arch" in target else ""
    prefix = f"{where}: " if where else ""
    message = (
        f"{prefix}compiling kernel {name!r} for {kind}{arch} failed inside the compiler "
        f"(please report it with the kernel): {short_message(err)}"
    )
    made = errors.CompileError(message)
    return made
