"""Eager-form kernels: ``T.const``, ``T.empty`` and the trace of an eager ``@tilelang.jit`` body.

In the eager form (upstream TileLang's lead example) the decorated function *is* the
kernel body: its tensor parameters get their types from annotations inside the body
(``A: T.Tensor((M, K), T.float16)``), ``T.const("M, N, K")`` names dimensions that are
read from the arguments' shapes when the function is called, and ``T.empty`` declares
outputs that the launcher allocates and returns::

    @tilelang.jit
    def add(A, B, block: int = 128):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B: T.Tensor((N,), T.float32)
        C = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            ...
        return C

The body is traced twice per distinct compile-time arguments (``tilelang/jit/eager.py``
drives it): phase 1 runs it up to the first ``T.Kernel`` with every ``T.const`` a symbolic
variable, to learn which argument dimension binds each constant; phase 2 runs it whole
with the constants bound to Python ints, once per distinct binding. Parameters are
declared where their annotation runs, then ordered as the signature lists them, with the
``T.empty`` outputs last (upstream's parameter order).
"""

from __future__ import annotations

# ``tilelang.language.eager.ast`` is an upstream-internal module: with a (empty) package path
# its import reaches tilelang.utils.upstream_modules' finder, which explains it, instead of
# Python's "'tilelang.language.eager' is not a package"
__path__: list = []

import ast
import inspect
import re
import types
from dataclasses import dataclass, field

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T
from tvm_tirx.script.ir_builder import IRBuilder

from .. import dtypes, errors
from ..utils import pyast
from . import builder
from .ast_rewrite import BUILDER, rewrite_function
from .proxy import TensorAnnotation
from .scope_check import check_scopes

EAGER = "__te"  # the name of this module inside rewritten eager bodies


# ---------------------------------------------------------------------------
# What one trace records
# ---------------------------------------------------------------------------
@dataclass
class ParamRecord:
    """A run-time parameter as its annotation declared it."""

    name: str
    annotation: object  # TensorAnnotation, or the scalar dtype name
    var: ir.Var
    where: str  # file:line of the annotation ('' for a signature annotation)

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.annotation, TensorAnnotation)


@dataclass
class EagerTrace:
    """State of one eager trace (phase 1 or 2); see the module docstring."""

    phase: int
    const_values: dict = field(default_factory=dict)  # phase 2: name -> int
    consts: dict = field(default_factory=dict)  # phase 1: name -> ir.Var (declaration order)
    params: dict = field(default_factory=dict)  # name -> ParamRecord
    outputs: list = field(default_factory=list)  # T.empty vars, creation order
    output_where: list = field(default_factory=list)

    def const(self, name: str, dtype: str):
        if self.phase == 1:
            var = self.consts.get(name)
            if var is None:
                var = self.consts[name] = ir.Var(name, dtypes.canonical(dtype))
            return var
        if name not in self.const_values:
            raise errors.TraceError(f"T.const {name!r}: no value was bound for it")
        return self.const_values[name]


_ACTIVE: list[EagerTrace] = []


def _current(what: str) -> EagerTrace:
    if not _ACTIVE:
        raise errors.TraceError(
            f"{what} is only valid in the body of an eager @tilelang.jit function "
            "(one whose body is the kernel, with its tensors annotated in the body)"
        )
    return _ACTIVE[-1]


class StopAtKernel(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by ``T.Kernel`` in phase 1: everything phase 1 needs is known by then."""


# ---------------------------------------------------------------------------
# The T namespace's eager-only names
# ---------------------------------------------------------------------------
def const(name: str, dtype: str = "int32"):
    """Names of dimensions bound from the arguments' shapes at call time (eager form only).

    ``M = T.const("M")`` gives one; ``M, N = T.const("M, N")`` (or ``"M N"``) a tuple.
    Each distinct binding of the constants compiles (and caches) its own kernel.
    """
    trace = _current("T.const()")
    names = [n for n in re.split(r"[\s,]+", name.strip()) if n]
    if not names:
        raise errors.TraceError(f"T.const({name!r}): give at least one name")
    for n in names:
        if not n.isidentifier():
            raise errors.TraceError(f"T.const: {n!r} is not a valid name")
    values = tuple(trace.const(n, dtype) for n in names)
    return values[0] if len(values) == 1 and not re.search(r"[\s,]", name.strip()) else values


def _empty_shape(shape, dtype):
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        return tuple(shape[0]), dtype
    if len(shape) == 2 and isinstance(shape[0], tuple | list) and isinstance(shape[1], str):
        return tuple(shape[0]), shape[1]
    if shape and all(isinstance(s, int) or builder.is_expr(s) for s in shape):
        return tuple(shape), dtype
    raise errors.TraceError(f"T.empty: invalid shape {shape!r}")


def empty(*shape, dtype="float32"):
    """An output of an eager function: allocated by the launcher, returned to the caller.

    ``T.empty((M, N), T.float16)``, ``T.empty(M, N, dtype=T.float16)``; the function must
    ``return`` every tensor it declares this way (several as a tuple).
    """
    trace = _current("T.empty()")
    builder.state()
    shape, dtype = _empty_shape(shape, dtype)
    ty = TensorAnnotation(shape, dtypes.canonical(dtype)).ir_type()
    # 'v...': the assignment ``C = T.empty(...)`` renames it to the user's name
    var = builder.unwrap(_T.arg_(f"v_out{len(trace.outputs)}", ty))
    trace.outputs.append(var)
    trace.output_where.append(builder.user_where())
    return var


# ---------------------------------------------------------------------------
# Hooks the rewritten body calls
# ---------------------------------------------------------------------------
class Unannotated:
    """What a run-time parameter holds until its annotation (``A: T.Tensor(...)``) runs."""

    def __init__(self, name: str):
        self.name = name

    def _fail(self, *args, **kwargs):
        raise errors.TraceError(
            f"parameter {self.name!r} is used before its annotation "
            f"({self.name}: T.Tensor(shape, dtype) or {self.name}: T.int32)"
        )

    __getattr__ = __getitem__ = __add__ = __mul__ = __call__ = _fail


def _declare(trace: EagerTrace, name: str, annotation, where: str):
    if name in trace.params:
        raise errors.TraceError(f"parameter {name!r} is annotated twice")
    if isinstance(annotation, TensorAnnotation):
        if annotation.scope != "global":
            raise errors.TraceError(
                f"parameter {name!r}: a kernel argument lives in global memory, "
                f"not {annotation.scope}"
            )
        ty = annotation.ir_type()
    elif isinstance(annotation, ir.PrimType):
        annotation = str(annotation)
        ty = ir.PrimType(annotation)
    elif isinstance(annotation, str):
        try:
            annotation = dtypes.canonical(annotation)
        except TypeError as err:
            raise errors.TraceError(f"parameter {name!r}: {err}") from err
        ty = ir.PrimType(annotation)
    else:
        raise errors.TraceError(
            f"parameter {name!r} needs an annotation T.Tensor(shape, dtype), "
            f"T.StridedTensor(shape, strides, dtype) or a scalar dtype such as T.float32, "
            f"got {annotation!r}"
        )
    var = builder.unwrap(_T.arg_(name, ty))
    trace.params[name] = ParamRecord(name, annotation, var, where)
    return var


def param(name: str, annotation, current):
    """Behind ``A: T.Tensor(...)`` for a run-time parameter ``A``: declare it here."""
    trace = _current("a parameter annotation")
    if not isinstance(current, Unannotated):
        raise errors.TraceError(
            f"parameter {name!r} is annotated again after it was declared or reassigned"
        )
    return _declare(trace, name, annotation, builder.user_where())


# ---------------------------------------------------------------------------
# Rewriting and tracing an eager body
# ---------------------------------------------------------------------------
class _ParamAnnotations(ast.NodeTransformer):
    """``A: ann`` (no value) for a run-time parameter ``A`` -> ``A = __te.param("A", ann, A)``."""

    def __init__(self, names):
        self.names = set(names)
        self.depth = 0

    def visit_FunctionDef(self, node):
        self.depth += 1
        try:
            return self.generic_visit(node) if self.depth == 1 else node
        finally:
            self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is not None or not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        if name not in self.names:
            return node
        call = ast.Call(
            ast.Attribute(ast.Name(EAGER, ast.Load()), "param", ast.Load()),
            [ast.Constant(name), node.annotation, ast.Name(name, ast.Load())],
            [],
        )
        assign = ast.Assign(targets=[ast.Name(name, ast.Store())], value=call)
        return ast.fix_missing_locations(ast.copy_location(assign, node))


class EagerBody:
    """An eager function's body, rewritten once; :meth:`trace` runs it (phase 1 or 2)."""

    def __init__(self, func, runtime_names, signature_annotations: dict):
        from .entry import _closure_values

        self.func = func
        self.name = func.__name__
        self.runtime_names = list(runtime_names)
        self.signature_annotations = signature_annotations  # name -> annotation object
        tree, self.filename, first_line = rewrite_function(func)
        self.where = f"{self.filename}:{first_line}"
        tree = _ParamAnnotations(
            [n for n in runtime_names if n not in signature_annotations]
        ).visit(tree)
        ast.fix_missing_locations(tree)
        module_code = pyast.compile_tree(tree, self.filename)
        builder.register_user_code(module_code)
        namespace = dict(func.__globals__)
        namespace.update(_closure_values(func))
        namespace[BUILDER] = builder
        namespace[EAGER] = _hooks()
        exec(module_code, namespace)  # defines the rewritten function
        self.fn = namespace[func.__name__]
        self.fn.__defaults__ = func.__defaults__
        self.fn.__kwdefaults__ = func.__kwdefaults__

    def trace(self, phase: int, compile_args: dict, const_values: dict | None = None):
        """Run the body. Phase 1 returns the EagerTrace (stopped at the first ``T.Kernel``);
        phase 2 returns ``(function, out_idx, trace)`` with the parameters in signature
        order and the outputs last."""
        record = EagerTrace(phase, const_values=dict(const_values or {}))
        _ACTIVE.append(record)
        result = None
        try:
            with builder.tracing() as st, IRBuilder() as ib:
                st.stop_at_kernel = phase == 1
                with _T.function_():
                    _T.func_name_(self.name)
                    call_args = dict(compile_args)
                    for name in self.runtime_names:
                        ann = self.signature_annotations.get(name)
                        call_args[name] = (
                            Unannotated(name) if ann is None else _declare(record, name, ann, "")
                        )
                    try:
                        result = self.fn(**call_args)
                    except StopAtKernel:
                        if phase != 1:
                            raise
                        return record
            if phase == 1:
                return record
            traced = builder.with_func_attrs(ib.get(), st)
        finally:
            _ACTIVE.pop()
        return self._finish(traced, record, result)

    def _finish(self, traced, record: EagerTrace, result):
        missing = [n for n in self.runtime_names if n not in record.params]
        if missing:
            raise errors.TraceError(
                f"{self.where}: {self.name}: parameter(s) {', '.join(map(repr, missing))} were never "
                "annotated (write e.g. A: T.Tensor((M, K), T.float16) in the body)"
            )
        returned = () if result is None else result
        if not isinstance(returned, tuple | list):
            returned = (returned,)
        handles = {v.__chandle__(): i for i, v in enumerate(record.outputs)}
        out_order = []
        for value in returned:
            key = value.__chandle__() if isinstance(value, ir.Var) else None
            if key not in handles:
                raise errors.TraceError(
                    f"{self.where}: {self.name} returns {value!r}: an eager kernel returns only tensors "
                    "declared with T.empty"
                )
            out_order.append(handles[key])
        left = [i for i in range(len(record.outputs)) if i not in out_order]
        if left:
            where = record.output_where[left[0]]
            raise errors.TraceError(
                f"{where + ': ' if where else ''}{self.name}: the T.empty output "
                f"{record.outputs[left[0]].name!r} is never returned"
            )
        inputs = [record.params[n].var for n in self.runtime_names]
        params = inputs + list(record.outputs)
        out_idx = [len(inputs) + i for i in out_order]
        from tvm_tirx.tirx.function import Function

        traced = Function(params, traced.body, traced.ret_type, traced.attrs, traced.loc)
        if out_idx:
            traced = traced.with_attr("tilelang_out_idx", out_idx)
        check_scopes(traced)
        return traced, out_idx, record


def _hooks():
    """The object named ``__te`` in rewritten eager bodies."""
    return types.SimpleNamespace(param=param)


def signature_annotations(func) -> dict:
    """Parameters annotated in the signature with ``T.Tensor(...)`` or a scalar dtype object:
    run-time parameters declared before the body runs (other annotations, such as ``int``,
    mark compile-time parameters)."""
    from .entry import _closure_values

    namespace = {**func.__globals__, **_closure_values(func)}
    out = {}
    for p in inspect.signature(func).parameters.values():
        ann = p.annotation
        if ann is inspect.Parameter.empty:
            continue
        if type(ann) is str:
            try:
                ann = eval(ann, namespace)  # noqa: S307 - the user's own annotation
            except Exception:  # noqa: BLE001 - not a tilelang annotation
                continue
        if isinstance(ann, TensorAnnotation | dtypes.dtype | ir.PrimType):
            out[p.name] = ann
    return out
