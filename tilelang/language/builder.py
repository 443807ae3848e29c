"""Trace-time semantics of rewritten kernel source (see ``ast_rewrite.py``).

A kernel body runs once, as Python, inside a TIRx ``IRBuilder``. Values known
now (Python ints, floats, bools, lists) stay Python; values known only when the
kernel runs are TIRx expressions. Each rewritten construct picks its meaning
from the value it gets:

- ``for``: ``range``/``T.serial``/``T.Parallel``/... open one IR loop; any other
  iterable (a list, ``zip``...) is a Python loop, unrolled into the trace.
- ``if``/``while``: a Python test runs only the branch taken; an IR test opens
  IR ``if``/``while`` frames.
- ``x = value``: stores into a ``T.alloc_var`` cell if ``x`` holds one; binds an
  IR value that reads memory to a named IR variable (so later stores to that
  memory cannot change it); otherwise plain Python assignment.

The module also finds the user's source line for diagnostics (``user_loc``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass, field
from types import CodeType

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.ir._prim_expr_overload import EqualOp, NotEqualOp
from tvm_tirx.script import tirx as _T
from tvm_tirx.script.ir_builder import IRBuilder
from tvm_tirx.script.ir_builder.base import AlreadyEmitted

from .. import dtypes, errors
from . import trace_guards
from .trace_guards import KEEP, snapshot  # noqa: F401 - used by rewritten source

_DEFERRED_CMP = (EqualOp, NotEqualOp)

# Code objects produced by our rewriter: frames running them are "user" frames.
USER_CODE: set[CodeType] = set()


def register_user_code(code: CodeType) -> None:
    """Mark ``code`` (and the code objects nested in it) as the user's kernel source."""
    USER_CODE.add(code)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            register_user_code(const)


def user_frame():
    """Innermost frame running rewritten user source, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in USER_CODE:
            return frame
        frame = frame.f_back
    return None


def user_loc() -> ir.Location:
    """A TIRx SourceLoc for the user's line currently being traced."""
    frame = user_frame()
    if frame is None:
        return ir.UNKNOWN_LOC
    line = frame.f_lineno
    return ir.SourceLoc(ir.SourceName(frame.f_code.co_filename), line, 1, line, 1)


def user_where() -> str:
    """``file:line`` of the user's line currently being traced ('' outside a trace)."""
    frame = user_frame()
    return "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


# errors.TraceError names the user's line through this provider (errors imports nothing of
# tilelang, so the tracer hands it the location instead).
errors.set_location_provider(user_where)


# ---------------------------------------------------------------------------
# Trace state
# ---------------------------------------------------------------------------
@dataclass
class _Loop:
    is_ir: bool
    if_depth: int  # IR-if nesting when the loop started


@dataclass
class TraceState:
    """What the builder needs to know about the kernel being traced."""

    loops: list[_Loop] = field(default_factory=list)
    ir_if_depth: int = 0
    kernels: list = field(default_factory=list)  # active T.Kernel frames
    uses_atomics: bool = False
    stop_at_kernel: bool = False  # phase 1 of an eager @tilelang.jit (language/eager.py)
    func_attrs: dict = field(default_factory=dict)  # set on the traced Function (hints.py)


def with_func_attrs(func, st: TraceState):
    """``func`` with the function attributes the trace ``st`` recorded."""
    for key, value in st.func_attrs.items():
        func = func.with_attr(key, value)
    return func


class _ThreadStates(threading.local):
    """The stack of traces of each thread (threads may trace kernels concurrently)."""

    def __init__(self):
        self.stack: list[TraceState] = []


_STATES = _ThreadStates()


def state() -> TraceState:
    """The trace in progress on this thread (TraceError outside a kernel body)."""
    stack = _STATES.stack
    if not stack:
        raise errors.TraceError("this tilelang call is only valid inside a @T.prim_func body")
    return stack[-1]


@contextlib.contextmanager
def tracing():
    """Scope of one kernel trace."""
    stack = _STATES.stack
    stack.append(TraceState())
    try:
        yield stack[-1]
    finally:
        stack.pop()


def tracing_now() -> bool:
    """Whether this thread is tracing a kernel."""
    return bool(_STATES.stack)


def in_trace() -> bool:
    return bool(_STATES.stack) and IRBuilder.is_in_scope()


def unwrap(value):
    """Turn an IRBuilder receipt into the value it carries, and a deferred ``a == b`` /
    ``a != b`` (TIRx's EqualOp/NotEqualOp, whose Python truth is object identity) into
    its IR comparison."""
    if isinstance(value, AlreadyEmitted):
        return value.value
    if isinstance(value, _DEFERRED_CMP):
        return value.__tvm_ffi_object__()
    return value


def is_expr(value) -> bool:
    return isinstance(value, ir.Expr) and ir.is_prim_expr(value)


def static_value(value):
    """The Python value of a constant, or None when ``value`` is only known at run time."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, ir.IntImm | ir.FloatImm):
        return value.value
    return None


def name_value(name: str, value) -> None:
    with contextlib.suppress(Exception):
        IRBuilder.name(name, value)


# ---------------------------------------------------------------------------
# Loops
# ---------------------------------------------------------------------------
@dataclass
class LoopSpec:
    """An IR loop nest requested by ``range``/``T.serial``/``T.Parallel``/...

    ``dims`` is a list of (begin, end, step); every level gets the same kind
    and annotations.
    """

    dims: list
    kind: str = "serial"  # serial | parallel | unroll | vectorized | pipelined | custom
    annotations: dict = field(default_factory=dict)

    def __iter__(self):
        raise errors.TraceError(
            "tilelang loops (T.Parallel, T.Pipelined, T.serial, ...) can only be iterated "
            "by a for statement inside a @T.prim_func or @T.macro body"
        )


def _enter_level(stack, begin, end, step, spec: LoopSpec, name):
    """Open one loop level. A constant step other than 1 (``range(n - 1, -1, -1)``,
    ``T.unroll(0, n, 4)``) counts a fresh variable up by 1 and binds the user's variable
    to ``begin + k * step``: TIRx loops count up, and its unroller ignores steps."""
    const = static_value(step) if step is not None else None
    if const is None or const == 1:
        return unwrap(stack.enter_context(_frame_for(begin, end, step, spec)))
    if const == 0:
        raise errors.TraceError("loop step must not be zero")
    span = (end - begin) if const > 0 else (begin - end)
    count = _ceildiv_py_or_ir(span, abs(const))
    k = unwrap(stack.enter_context(_frame_for(0, count, None, spec)))
    value = begin + k * const
    var = ir.Var(name or "v", value.ty)
    _T.emit_(ir.Bind(var, value, loc=user_loc()))
    return var


def _ceildiv_py_or_ir(a, b: int):
    if isinstance(a, int):
        return max(0, -(-a // b))
    from tvm_tirx import tirx as _tirx

    return _tirx.ceildiv(a, ir.const(b, a.ty))


_PARALLEL_BOUND_LIMIT = 1 << 24


def _parallel_bound(end):
    """For a ``T.Parallel`` extent only known when the kernel runs but bounded by a constant
    (``T.min(n, 256)``), that constant: the loop runs to it and guards its body with
    ``i < extent`` (upstream accepts such extents; a backend partitions a static one)."""
    end = unwrap(end)
    if not is_expr(end) or static_value(end) is not None:
        return None
    from tvm_tirx import sym

    bound = sym.Analyzer().const_int_bound(end)
    if not 1 <= bound.max_value < _PARALLEL_BOUND_LIMIT:  # a bare int32 n: its type's max
        return None
    return int(bound.max_value)


def _frame_for(begin, end, step, spec: LoopSpec):
    ann = dict(spec.annotations)
    kwargs = {}
    if step is not None and static_value(step) != 1:
        kwargs["step"] = step
    if spec.kind in ("serial", "parallel", "pipelined"):
        if spec.kind == "parallel":
            ann["tl.parallel"] = 1
        return _T.serial(begin, end, annotations=ann or None, **kwargs)
    if spec.kind == "unroll":
        return _T.unroll(begin, end, annotations=ann or None, **kwargs)
    if spec.kind == "vectorized":
        return _T.vectorized(begin, end, annotations=ann or None, **kwargs)
    raise errors.TraceError(f"unknown loop kind {spec.kind!r}")


class LoopProbe:
    """Filled by :func:`for_`/:func:`while_`: whether the loop was an IR loop, and its line."""

    def __init__(self):
        self.is_ir = False
        self.line = 0

    def after(self, names, before, after):
        """Values of ``names`` after the loop (see ``trace_guards.after_loop``)."""
        if not self.is_ir:
            return [KEEP] * len(names)
        return trace_guards.after_loop(names, before, after, self.line, "run-time")


def _mark_ir(probe) -> None:
    if probe is not None:
        probe.is_ir = True
        frame = user_frame()
        probe.line = frame.f_lineno if frame is not None else 0


def for_(iterable, names: str, probe: LoopProbe | None = None):
    """Generator behind every rewritten ``for`` statement."""
    st = state()
    if isinstance(iterable, LoopSpec) and iterable.kind == "custom":
        # a loop construct that opens its own frames (T.Persistent): spec.enter(stack, names)
        _mark_ir(probe)
        st.loops.append(_Loop(True, st.ir_if_depth))
        try:
            with contextlib.ExitStack() as stack:
                name_list = [n.strip() for n in names.strip("()").split(",") if n.strip()]
                vars_ = iterable.annotations["enter"](stack, name_list)
                for name, var in zip(name_list, vars_):
                    name_value(name, var)
                yield vars_[0] if len(vars_) == 1 else tuple(vars_)
        finally:
            st.loops.pop()
        return
    if isinstance(iterable, LoopSpec):
        _mark_ir(probe)
        vars_ = []
        st.loops.append(_Loop(True, st.ir_if_depth))
        try:
            with contextlib.ExitStack() as stack:
                name_list = [n.strip() for n in names.strip("()").split(",") if n.strip()]
                guards = []
                for level, (begin, end, step) in enumerate(iterable.dims):
                    name = name_list[level] if level < len(name_list) else None
                    bound = _parallel_bound(end) if iterable.kind == "parallel" else None
                    if bound is not None:
                        guards.append((level, end))
                        end = bound
                    var = _enter_level(stack, begin, end, step, iterable, name)
                    if name is not None:
                        name_value(name, var)
                    vars_.append(var)
                if guards:  # inside the innermost level: the nest stays perfectly nested
                    cond = None
                    for level, end in guards:
                        c = vars_[level] < end
                        cond = c if cond is None else unwrap(_T.And(cond, c))
                    stack.enter_context(_IRIf(unwrap(cond)))
                    stack.enter_context(_T.then_())
                yield vars_[0] if len(vars_) == 1 else tuple(vars_)
        finally:
            st.loops.pop()
        return
    st.loops.append(_Loop(False, st.ir_if_depth))
    try:
        yield from iterable
    finally:
        st.loops.pop()


def range_(start, stop=None, step=None):
    """``range`` inside a kernel: an IR serial loop (as upstream TileLang does)."""
    if stop is None:
        start, stop = 0, start
    return LoopSpec([(start, stop, step)], "serial")


def while_(test, probe: LoopProbe | None = None):
    """Generator behind every rewritten ``while`` statement."""
    st = state()
    cond = unwrap(test())
    if is_expr(cond) and static_value(cond) is None:
        _mark_ir(probe)
        st.loops.append(_Loop(True, st.ir_if_depth))
        try:
            with _T.while_(cond):
                yield None
        finally:
            st.loops.pop()
        return
    st.loops.append(_Loop(False, st.ir_if_depth))
    try:
        while _py_truth(cond):
            yield None
            cond = unwrap(test())
    finally:
        st.loops.pop()


def _jump(kind: str) -> bool:
    st = state()
    if not st.loops:
        return True  # let Python report the misuse
    loop = st.loops[-1]
    if not loop.is_ir:
        if st.ir_if_depth > loop.if_depth:
            raise errors.TraceError(
                f"{kind} under a run-time condition cannot leave a Python-level loop "
                "(the loop is unrolled while tracing); iterate with range() or T.serial instead"
            )
        return True
    (_T.break_ if kind == "break" else _T.continue_)()
    return False


def break_() -> bool:
    """True when Python should break (Python loop); emits an IR break otherwise."""
    return _jump("break")


def continue_() -> bool:
    """True when Python should continue (Python loop); emits an IR continue otherwise."""
    return _jump("continue")


# ---------------------------------------------------------------------------
# Branches
# ---------------------------------------------------------------------------
def _py_truth(value) -> bool:
    value = unwrap(value)
    const = static_value(value)
    if const is not None:
        return bool(const)
    if is_expr(value):
        raise errors.TraceError(f"the run-time value {value} cannot be used as a Python bool here")
    return bool(value)


class _StaticIf:
    def __init__(self, taken: bool):
        self.taken = taken

    def record(self, arm: int, values) -> None:
        """Values of the names the arms assign, at the end of arm ``arm`` (IR ifs only)."""

    def merge(self, names, before):
        """A Python ``if`` already gave every name its value."""
        return [KEEP] * len(names)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def then(self):
        yield self.taken

    @contextlib.contextmanager
    def orelse(self):
        yield not self.taken


class _IRIf:
    def __init__(self, cond):
        self.cond = cond
        self.frame = None
        self.arms = [None, None]
        frame = user_frame()
        self.line = frame.f_lineno if frame is not None else 0

    def record(self, arm: int, values) -> None:
        """Values of the names the arms assign, at the end of arm ``arm``."""
        self.arms[arm] = values

    def merge(self, names, before):
        """Values of ``names`` after the if (see ``trace_guards.merge_if``)."""
        return trace_guards.merge_if(self.cond, names, before, *self.arms, self.line)

    def __enter__(self):
        self.frame = _T.if_(self.cond)
        self.frame.__enter__()
        state().ir_if_depth += 1
        return self

    def __exit__(self, *exc):
        state().ir_if_depth -= 1
        return self.frame.__exit__(*exc)

    @contextlib.contextmanager
    def then(self):
        with _T.then_():
            yield True

    @contextlib.contextmanager
    def orelse(self):
        with _T.else_():
            yield True


def if_(cond, assigns: bool = False):
    """Context behind every rewritten ``if`` statement.

    ``assigns``: the arms assign Python names, whose values after the ``if`` may be
    merged with the condition; a condition reading memory is then bound to a variable
    first, so that stores in the arms cannot change it.
    """
    cond = unwrap(cond)
    if is_expr(cond) and static_value(cond) is None:
        if cond.ty != ir.PrimType("bool"):
            cond = unwrap(cond != ir.const(0, cond.ty))
        if assigns and in_trace() and _reads_memory(cond):
            var = ir.Var("cond", cond.ty)
            _T.emit_(ir.Bind(var, cond, loc=user_loc()))
            cond = var
        return _IRIf(cond)
    return _StaticIf(_py_truth(cond) if is_expr(cond) else bool(cond))


def frame_depth() -> int:
    """How many IR ifs and loops enclose the current point of the trace."""
    if not tracing_now():
        return 0
    st = state()
    return st.ir_if_depth + sum(1 for loop in st.loops if loop.is_ir)


def return_(depth: int, value=None):
    """Behind ``return value`` in kernel source: refused inside run-time control flow
    opened since the function started (``depth``), where Python would leave the function
    while tracing the first arm, dropping the rest."""
    if frame_depth() > depth:
        raise errors.TraceError(
            "`return` inside an if/else or loop on a run-time value: the condition is only "
            "known when the kernel runs, but Python would return while tracing. Compute the "
            "result with T.if_then_else(cond, a, b), or assign it to a T.alloc_var in the "
            "branches and return that after the if"
        )
    return value


def match_subject(value):
    """Behind ``match value:``: only a value known while tracing can be matched."""
    value = unwrap(value)
    if _is_runtime(value):
        raise errors.TraceError(
            f"`match` on a value only known when the kernel runs ({value}): Python compares "
            "it while tracing. Write if/elif/else on the value instead (`if x == 0: ...`)"
        )
    return value


# ---------------------------------------------------------------------------
# Boolean expressions: ``and``/``or``/``not``/``x if c else y`` on run-time values
# ---------------------------------------------------------------------------
def _is_runtime(value) -> bool:
    return is_expr(value) and static_value(value) is None


def _as_bool(value):
    if value.ty == ir.PrimType("bool"):
        return value
    return unwrap(value != ir.const(0, value.ty))


def _logical(thunks, is_and: bool):
    conds, last = [], None
    for thunk in thunks:
        value = unwrap(thunk())
        if _is_runtime(value):
            conds.append(_as_bool(value))
            continue
        truth = _py_truth(value)
        if truth != is_and:  # decides the result: False for and, True for or
            return value if not conds else truth
        last = value
    if not conds:
        return last
    from tvm_tirx import tirx as _tirx

    return (_tirx.all if is_and else _tirx.any)(*conds) if len(conds) > 1 else conds[0]


def and_(*thunks):
    """Behind ``a and b``: Python's short-circuit on Python values, IR ``And`` otherwise."""
    return _logical(thunks, True)


def or_(*thunks):
    """Behind ``a or b``: Python's short-circuit on Python values, IR ``Or`` otherwise."""
    return _logical(thunks, False)


def not_(value):
    """Behind ``not a``."""
    value = unwrap(value)
    if _is_runtime(value):
        from tvm_tirx import tirx as _tirx

        return _tirx.Not(_as_bool(value))
    return not _py_truth(value)


def ifexp(cond, then_thunk, else_thunk):
    """Behind ``a if c else b``: ``T.if_then_else`` for a run-time ``c``."""
    cond = unwrap(cond)
    if _is_runtime(cond):
        from .math import if_then_else

        return if_then_else(_as_bool(cond), unwrap(then_thunk()), unwrap(else_thunk()))
    return then_thunk() if _py_truth(cond) else else_thunk()


# ---------------------------------------------------------------------------
# Assignments
# ---------------------------------------------------------------------------
def is_var_cell(value) -> bool:
    """Whether ``value`` is the scalar cell made by ``T.alloc_var``."""
    return (
        isinstance(value, ir.TensorLoad)
        and isinstance(value.source, ir.Var)
        and str(getattr(value.source.ty, "scope", "")) == "local.var"
    )


def _reads_memory(expr) -> bool:
    found = []

    def visit(node):
        if isinstance(node, ir.TensorLoad):
            found.append(node)

    tvm_ffi.structural_walk(expr, visit)
    return bool(found)


def store(target, indices, value):
    """Emit ``target[indices] = value``, converting ``value`` to the element type."""
    dtype = str(target.ty.dtype)
    value = dtypes.scalar_value(value, dtype, f"storing into {target.name}")
    stmt = ir.TensorStore(target, list(indices), value, loc=user_loc())
    _T.emit_(stmt)


def bind(name: str, value, previous):
    """Behind ``name = value``: see the module docstring."""
    try:
        old = previous()
    except NameError:
        old = None
    value = unwrap(value)
    if old is not None and is_var_cell(old) and in_trace():
        store(old.source, list(old.indices), value)
        return old
    if isinstance(value, ir.Var):
        if not value.name or value.name.startswith("v"):
            name_value(name, value)
        return value
    if is_var_cell(value):
        name_value(name, value.source)
        return value
    if is_expr(value) and in_trace() and _reads_memory(value):
        var = ir.Var(name, value.ty)
        _T.emit_(ir.Bind(var, value, loc=user_loc()))
        return var
    return value


def declare(name: str, annotation, value):
    """Behind ``name: dtype = value``: a mutable scalar cell initialised to ``value``.

    A Python type hint (``dtype: str = T.bfloat16``, ``n: int = 4``, ``Optional[float]``)
    is not an element type: the line is the plain assignment it is in Python.
    """
    from .allocate import alloc_var

    if _python_type_hint(annotation):
        return value

    cell = alloc_var(dtypes.canonical(annotation), init=value)
    name_value(name, cell.source)
    return cell


def _python_type_hint(annotation) -> bool:
    """Whether ``annotation`` is a Python/typing type hint rather than an element type."""
    if isinstance(annotation, type):
        return True
    return getattr(type(annotation), "__module__", "") in ("typing", "types")


def _apply(op: str, lhs, rhs):
    import operator

    table = {
        "+": operator.add,
        "-": operator.sub,
        "*": operator.mul,
        "/": operator.truediv,
        "//": operator.floordiv,
        "%": operator.mod,
        "&": operator.and_,
        "|": operator.or_,
        "^": operator.xor,
        "<<": operator.lshift,
        ">>": operator.rshift,
        "**": operator.pow,
    }
    return table[op](lhs, rhs)


def aug(lhs, op: str, rhs):
    """Behind ``x op= v`` for a name ``x``."""
    return _apply(op, lhs, rhs)


def _normalize_key(key):
    return key if isinstance(key, tuple) else (key,)


class LaneValues(tuple):
    """Several values one call returns at once (upstream's vector value, e.g. the old values
    of ``T.atomic_addx2(..., return_prev=True)``): ``X[i:i + n] = lanes`` stores lane ``k``
    at ``i + k`` of the sliced axis, ``lanes[k]`` is one lane (``k`` may be a loop
    variable when the lanes live in one ``cell`` tensor)."""

    def __new__(cls, lanes, cell=None):
        self = super().__new__(cls, lanes)
        self.cell = cell
        return self

    def __getitem__(self, k):
        if isinstance(k, int | slice) or self.cell is None:
            return tuple.__getitem__(self, k)
        return ir.TensorLoad(self.cell, [unwrap(k)])


def _store_lanes(target, indices, lanes: LaneValues):
    """``target[indices] = lanes`` with one slice of ``len(lanes)`` elements."""
    sliced = [k for k, i in enumerate(indices) if isinstance(i, slice)]
    n = len(lanes)
    if len(indices) != len(target.ty.shape) or len(sliced) != 1:
        raise errors.TraceError(
            f"{target.name}[...] = {n} values: index every axis, with one slice of {n} "
            f"elements (e.g. {target.name}[i:i + {n}])"
        )
    axis = sliced[0]
    s = indices[axis]
    begin = 0 if s.start is None else s.start
    stop = target.ty.shape[axis] if s.stop is None else s.stop
    length = stop - begin
    if not isinstance(length, int):
        from ..layout import expr as _E

        length = _E.as_const_int(_E.simplify(unwrap(length)))
    if s.step not in (None, 1) or length != n:
        raise errors.TraceError(
            f"{target.name}[...] = {n} values: the slice must hold {n} consecutive elements, "
            f"got {s}"
        )
    for k, lane in enumerate(lanes):
        idx = list(indices)
        idx[axis] = begin + k if k else begin
        store(target, idx, lane)


def launch_unpack(value, count: int):
    """Behind ``with frame as (a, ...):``: a single value unpacks as a 1-tuple (upstream's
    ``T.Kernel(n) as (bx,)``); anything else unpacks as Python would."""
    value = unwrap(value)
    if count == 1 and is_expr(value):
        return (value,)
    return value


def setitem(target, key, value):
    """Behind ``target[key] = value``."""
    target = unwrap(target)
    if isinstance(value, LaneValues) and isinstance(target, ir.Var):
        _store_lanes(target, list(_normalize_key(key)), value)
        return
    if is_var_cell(target):
        if static_value(key) not in (0, None):
            raise errors.TraceError("a T.alloc_var cell has one element: index it with 0")
        store(target.source, list(target.indices), value)
        return
    if isinstance(target, ir.Var) and hasattr(target.ty, "shape"):
        indices = _normalize_key(key)
        hook = _store_hook(target)
        if hook is not None and not any(isinstance(i, slice) for i in indices):
            hook(list(indices), unwrap(value))  # a replication= reducer (reducer.py)
            return
        if any(isinstance(i, slice) for i in indices):
            _T.setitem_(target, indices, dtypes.convert(value, str(target.ty.dtype)))
            return
        if len(indices) != len(target.ty.shape):
            raise errors.TraceError(
                f"{target.name} has {len(target.ty.shape)} dimensions but is indexed with "
                f"{len(indices)} indices"
            )
        store(target, indices, value)
        return
    target[key] = value  # a Python container


def _store_hook(target):
    """The store handler a tensor registered in ``TraceState.store_hooks`` (by handle)."""
    hooks = getattr(state(), "store_hooks", None) if _STATES.stack else None
    return None if not hooks else hooks.get(target.__chandle__())


def aug_setitem(target, key, op: str, value):
    """Behind ``target[key] op= value``."""
    target = unwrap(target)
    if is_var_cell(target):
        setitem(target, key, _apply(op, target, value))
        return
    setitem(target, key, _apply(op, target[key], value))
