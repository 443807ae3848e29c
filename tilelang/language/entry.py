"""``@T.prim_func`` and ``@T.macro``: trace Python kernel source into a TIRx function."""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T
from tvm_tirx.script.ir_builder import IRBuilder

from .. import dtypes, errors
from ..utils import pyast
from . import builder, diagnostics
from .ast_rewrite import BUILDER, rewrite_function
from .proxy import TensorAnnotation
from .scope_check import check_scopes


def _closure_values(func) -> dict:
    values = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # not bound yet
            pass
    return values


class _Rewritten:
    """The rewritten code of one user function, instantiated against fresh globals."""

    def __init__(self, func):
        self.func = func
        tree, self.filename, _ = rewrite_function(func)
        module_code = pyast.compile_tree(tree, self.filename)
        builder.register_user_code(module_code)
        self.code = next(
            c
            for c in module_code.co_consts
            if isinstance(c, types.CodeType) and c.co_name == func.__name__
        )
        self.module_code = module_code

    def instantiate(self):
        namespace = dict(self.func.__globals__)
        namespace.update(_closure_values(self.func))
        namespace[BUILDER] = builder
        exec(self.module_code, namespace)  # defines the rewritten function
        fn = namespace[self.func.__name__]
        fn.__defaults__ = self.func.__defaults__  # evaluated in the defining scope
        fn.__kwdefaults__ = self.func.__kwdefaults__
        return fn


def _def_line(func) -> str:
    """``file:line`` of ``func``'s ``def`` statement (after its decorators)."""
    import linecache

    code = getattr(func, "__code__", None)
    if code is None:
        return ""
    line = code.co_firstlineno
    for k in range(line, line + 50):
        text = linecache.getline(code.co_filename, k).lstrip()
        if text.startswith(("def ", "async def ")):
            line = k
            break
    return f"{code.co_filename}:{line}"


def _param_type(name, annotation, func):
    if isinstance(annotation, TensorAnnotation):
        return annotation.ir_type()
    if isinstance(annotation, str | dtypes.dtype):
        return ir.PrimType(dtypes.canonical(annotation))
    if isinstance(annotation, ir.PrimType):
        return annotation
    raise errors.TraceError(
        f"{_def_line(func)}: parameter {name!r} of {func.__qualname__} needs an annotation T.Tensor(shape, dtype) "
        f"or a scalar dtype such as T.int32, got {annotation!r}"
    )


def _is_dtype_name(text: str) -> bool:
    try:
        dtypes.canonical(text)
    except TypeError:
        return False
    return True


def _annotated_params(func, namespace) -> list[inspect.Parameter]:
    """``func``'s parameters with their annotations as Python evaluated them at definition
    (in the enclosing scope); string annotations (``from __future__ import annotations``)
    are evaluated now in ``namespace`` (globals, the defining scope's locals, closure)."""
    params = []
    for p in inspect.signature(func).parameters.values():
        if type(p.annotation) is str and not _is_dtype_name(p.annotation):
            try:
                p = p.replace(annotation=eval(p.annotation, namespace))  # noqa: S307
            except Exception as err:  # noqa: BLE001 - name the annotation and parameter
                reason = re.sub(r"^\S+:\d+: ", "", str(err))
                raise errors.TraceError(
                    f"{_def_line(func)}: annotation {p.annotation!r} of parameter {p.name!r} of "
                    f"{func.__qualname__} cannot be evaluated: {reason}"
                ) from err
        params.append(p)
    return params


def trace(func, name: str | None = None, outer_locals: dict | None = None) -> ir.Expr:
    """Run ``func``'s rewritten body under an IRBuilder and return the TIRx Function.

    ``outer_locals`` are the locals of the scope defining ``func`` (where string
    annotations, under ``from __future__ import annotations``, are evaluated).
    """
    rewritten = _Rewritten(func)
    fn = rewritten.instantiate()
    namespace = {**func.__globals__, **(outer_locals or {}), **_closure_values(func)}
    params = _annotated_params(func, namespace)
    with builder.tracing() as st, IRBuilder() as ib:
        with _T.function_():
            _T.func_name_(name or func.__name__)
            args = []
            for p in params:
                if p.annotation is inspect.Parameter.empty:
                    raise errors.TraceError(
                        f"{_def_line(func)}: parameter {p.name!r} of {func.__qualname__} has "
                        "no annotation: write T.Tensor(shape, dtype) or a scalar dtype"
                    )
                args.append(_T.arg_(p.name, _param_type(p.name, p.annotation, func)))
            try:
                fn(*args)
            except errors.TileLangError:
                raise
            except Exception as err:  # noqa: BLE001 - Python/TIRx error in the user's body
                # the original traceback stays: its frames include the user's line
                raise diagnostics.trace_error(err).with_traceback(err.__traceback__) from err
    traced = builder.with_func_attrs(ib.get(), st)
    check_scopes(traced)
    from ..transform.check_bounds import check_static_bounds
    from ..transform.negative_index import legalize_negative_indices

    traced = legalize_negative_indices(traced)
    check_static_bounds(traced)
    return traced


def prim_func(func=None, *, private=False, check_well_formed=False):
    """Decorator: trace a kernel function into a TIRx ``Function`` (upstream ``T.prim_func``)."""
    if func is None:
        return functools.partial(prim_func, private=private, check_well_formed=check_well_formed)
    return trace(func, outer_locals=sys._getframe(1).f_locals)


def macro(func=None, *, hygienic=True):
    """Decorator: a helper whose body is inlined, with its control flow, where it is called."""
    if func is None:
        return functools.partial(macro, hygienic=hygienic)
    cache = {}

    @functools.wraps(func)
    def call(*args, **kwargs):
        if "fn" not in cache:
            cache["rewritten"] = _Rewritten(func)
            cache["fn"] = True
        return cache["rewritten"].instantiate()(*args, **kwargs)

    call.__tilelang_macro__ = True
    return call
