"""Python names assigned under run-time control flow, and Python truth of run-time values.

A kernel body runs once, as Python, while tracing. Under an ``if`` on a run-time value
both arms run, one after the other, so a Python name assigned in both arms holds the
last arm's value afterwards; under an IR loop a name holds the value of the traced
(symbolic) iteration. This module gives such names a meaning after the statement:

- assigned a number or a scalar IR expression in an IR ``if``/``else``: the value is
  merged into ``T.if_then_else(cond, then_value, else_value)`` (the condition is bound
  to a variable before the ``if`` when it reads memory, so stores in the arms cannot
  change it);
- anything else (a buffer, a list, a value assigned in an IR loop, a name assigned in
  one arm only): the name is replaced by a :class:`BranchLocal` that raises a
  :class:`~tilelang.errors.TraceError` naming the use's line and the fix
  (``T.alloc_var``) as soon as it is used.

It also makes ``bool()`` of a run-time value outside rewritten kernel source (a plain
helper function's ``if x == 0:``) a TraceError instead of TIRx's silent identity
test (``==``) or its generic ValueError (``<``, ``>``...).
"""

from __future__ import annotations

import os
import sys

from tvm_tirx import ir

from .. import errors

MISSING = object()  # a name not bound (NameError) at a snapshot
KEEP = object()  # merge result: leave the Python name as it is


def snapshot(*thunks) -> list:
    """The current values of some names (MISSING for an unbound name)."""
    out = []
    for thunk in thunks:
        try:
            out.append(thunk())
        except NameError:
            out.append(MISSING)
    return out


class BranchLocal:
    """Stands for a Python name that has no single value after run-time control flow.

    Any use raises a TraceError at the user's line; re-assigning the name is fine.
    """

    __slots__ = ("_tl_name", "_tl_why")

    def __init__(self, name: str, why: str):
        object.__setattr__(self, "_tl_name", name)
        object.__setattr__(self, "_tl_why", why)

    def _tl_fail(self, *args, **kwargs):
        name = object.__getattribute__(self, "_tl_name")
        why = object.__getattribute__(self, "_tl_why")
        raise errors.TraceError(
            f"{name!r} is used after {why}, so it has no single value here. Declare it before "
            f"that statement with `{name} = T.alloc_var(dtype)` (or `{name}: T.int32 = init`) "
            f"and assign it inside; for a value picked by a condition write "
            f"`{name} = T.if_then_else(cond, a, b)`"
        )

    def __getattr__(self, attr):
        self._tl_fail()

    def __setattr__(self, attr, value):
        self._tl_fail()

    def __repr__(self):
        return f"<{object.__getattribute__(self, '_tl_name')}: no single value after a branch>"


for _dunder in (
    "__bool__ __int__ __float__ __index__ __iter__ __len__ __call__ __getitem__ __setitem__ "
    "__neg__ __pos__ __abs__ __invert__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__ __hash__ "
    "__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ "
    "__floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ __rand__ __or__ "
    "__ror__ __xor__ __rxor__ __lshift__ __rlshift__ __rshift__ __rrshift__ __matmul__"
).split():
    setattr(BranchLocal, _dunder, BranchLocal._tl_fail)


def _scalar(value):
    """``value`` as a scalar IR expression, or None when it is not a number/scalar expr."""
    from . import builder

    value = builder.unwrap(value)
    if isinstance(value, bool):
        return ir.const(value, "bool")
    if isinstance(value, int):
        return ir.const(value, "int32" if -(2**31) <= value < 2**31 else "int64")
    if isinstance(value, float):
        return ir.const(value, "float32")
    if builder.is_expr(value) and not builder.is_var_cell(value):
        return value
    return None


def _is_py_number(value) -> bool:
    return isinstance(value, bool | int | float)


def _merge_one(name, cond, then_v, else_v, what):
    from .. import dtypes
    from . import builder

    then_v, else_v = builder.unwrap(then_v), builder.unwrap(else_v)
    if then_v is else_v:
        return KEEP
    if then_v is MISSING or else_v is MISSING:
        return BranchLocal(name, f"the {what}, which assigns it in one arm only")
    if builder.is_var_cell(then_v) or builder.is_var_cell(else_v):
        return BranchLocal(name, f"the {what}, which rebinds the T.alloc_var name")
    a, b = _scalar(then_v), _scalar(else_v)
    if a is None or b is None:
        return BranchLocal(name, f"the {what}, which assigns it a non-scalar value")
    if str(a.ty) != str(b.ty):
        # a Python number takes the other arm's type, as it does in arithmetic
        py_a, py_b = _is_py_number(then_v), _is_py_number(else_v)
        if py_a and py_b:
            common = "float32" if isinstance(then_v, float) or isinstance(else_v, float) else None
            common = common or ("int64" if "int64" in (str(a.ty), str(b.ty)) else "int32")
            a, b = dtypes.convert(then_v, common), dtypes.convert(else_v, common)
        elif py_a:
            a = dtypes.convert(then_v, str(b.ty))
        elif py_b:
            b = dtypes.convert(else_v, str(a.ty))
        if str(a.ty) != str(b.ty):
            return BranchLocal(
                name, f"the {what}, which assigns it values of types {a.ty} and {b.ty}"
            )
    from .math import if_then_else

    return if_then_else(cond, a, b)


def merge_if(cond, names, before, then_vals, else_vals, line):
    """Values of ``names`` after an IR ``if`` (KEEP, a merged expression or a BranchLocal)."""
    then_vals = then_vals if then_vals is not None else before
    else_vals = else_vals if else_vals is not None else before
    what = f"if/else on a run-time value at line {line}"
    return [
        _merge_one(n, cond, t, e, what) if not (t is b and e is b) else KEEP
        for n, b, t, e in zip(names, before, then_vals, else_vals)
    ]


def after_loop(names, before, after, line, kind):
    """Values of ``names`` after an IR loop: a BranchLocal for each name the body rebound."""
    out = []
    for n, b, a in zip(names, before, after):
        if a is b or a is MISSING:
            out.append(KEEP)
            continue
        from . import builder

        if builder.is_var_cell(a) and builder.is_var_cell(b) and a.same_as(b):
            out.append(KEEP)
            continue
        out.append(BranchLocal(n, f"the {kind} loop at line {line}, which assigns it"))
    return out


# ---------------------------------------------------------------------------
# bool() of run-time values outside rewritten source
# ---------------------------------------------------------------------------
def _package_dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


_LIBRARY_DIRS: tuple[str, ...] = ()


def _library_dirs() -> tuple[str, ...]:
    global _LIBRARY_DIRS
    if not _LIBRARY_DIRS:
        import tvm_ffi
        import tvm_tirx

        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        _LIBRARY_DIRS = (*(_package_dir(m) for m in (tvm_ffi, tvm_tirx)), package)
    return _LIBRARY_DIRS


def _called_from_user(depth: int) -> bool:
    """Whether the frame ``depth`` levels up runs the user's code (not tilelang/TIRx)."""
    from . import builder

    if not builder.tracing_now():
        return False
    frame = sys._getframe(depth + 1)
    if frame.f_code in builder.USER_CODE:
        return True
    filename = frame.f_code.co_filename
    return not filename.startswith(_library_dirs()) and not filename.startswith("<")


class RuntimeTruthError(errors.TraceError, ValueError):
    """A run-time value was asked for its Python truth (``if``, ``==``...) outside the trace's
    rewritten source; a ValueError too, as TIRx raised before."""


def _helper_where(frame) -> str:
    """`` (in helper f at file:line)`` for a frame outside the rewritten kernel source."""
    from . import builder

    if frame.f_code in builder.USER_CODE:
        return ""
    code = frame.f_code
    return f" (in {code.co_name} at {code.co_filename}:{frame.f_lineno})"


def _runtime_truth_error(value, how: str) -> errors.TraceError:
    return RuntimeTruthError(
        f"{how} on a value only known when the kernel runs ({value}) cannot decide Python "
        "control flow. In the kernel body `if`/`while`/`and`/`or` trace it as run-time "
        "control flow; in a helper function decorate the helper with @T.macro, or pick a "
        "value with T.if_then_else(cond, a, b)"
    )


def _is_prim(value) -> bool:
    try:
        return isinstance(value, ir.Expr) and ir.is_prim_expr(value)
    except Exception:  # noqa: BLE001 - not an expression TIRx can classify
        return False


def _install() -> None:
    from tvm_tirx.ir import _prim_expr_overload as overload
    from tvm_tirx.ir import expr as expr_mod

    from . import builder

    for cls, op in ((overload.EqualOp, "=="), (overload.NotEqualOp, "!=")):
        original = cls.__bool__
        if getattr(original, "__tilelang_guard__", False):
            continue

        def guarded(self, _original=original, _op=op):
            if _called_from_user(1):
                a, b = builder.static_value(self.a), builder.static_value(self.b)
                if a is not None and b is not None:
                    return (a == b) if _op == "==" else (a != b)
                if builder.is_expr(self.a) or builder.is_expr(self.b):
                    raise _runtime_truth_error(
                        f"{self.a} {_op} {self.b}", f"`{_op}`{_helper_where(sys._getframe(1))}"
                    )
            return _original(self)

        guarded.__tilelang_guard__ = True
        cls.__bool__ = guarded

    for cls in (expr_mod.ExprWithOp, overload.ExprOp):
        original = cls.__bool__
        if getattr(original, "__tilelang_guard__", False):
            continue

        def guarded_expr(self, _original=original):
            if builder.tracing_now() and _is_prim(self):
                where = _helper_where(sys._getframe(1)) if _called_from_user(1) else ""
                raise _runtime_truth_error(self, f"Python truth (if/and/or/not){where}")
            return _original(self)

        guarded_expr.__tilelang_guard__ = True
        cls.__bool__ = guarded_expr


_install()
