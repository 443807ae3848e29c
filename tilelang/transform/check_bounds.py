"""Out-of-bounds element accesses: compile-time errors where provable, run-time checks on request.

:func:`check_static_bounds` (run on every traced kernel) reports an access
``A[i, j]`` that certainly leaves ``A``: the access runs unconditionally (not under an
``if``, an ``if_then_else`` arm, the right side of ``and``/``or``, a loop with ``break``
or a ``while``), every variable of an index has constant bounds (loops with constant
extents, thread and block indices of constant launches), and some corner of that box
(every variable at its lowest or highest value: an iteration that really runs) puts an
index outside a constant extent. Global tensors accessed in ``T.Parallel`` loops are left
alone: there a tail reads zero and skips stores (``legalize_safe_access.py``).

:func:`insert_bounds_checks` (pass config ``tl.enable_bounds_check``) guards every
element access the analyzer cannot prove in bounds with a check of its own path
condition: on the CPU a TIRx ``AssertStmt`` (the call raises
:class:`BoundsCheckError` naming the user's line, the tensor and its shape), on CUDA
``printf`` + ``__trap()``.
"""

from __future__ import annotations

import itertools

import tvm_ffi
from tvm_tirx import ir, sym
from tvm_tirx import tirx as _tirx

from .. import errors
from ..lowering.thread_utils import extern_stmt

ASSERT_KIND = "TileLangBoundsCheck"
_MAX_CORNER_VARS = 8


class BoundsCheckError(errors.TileLangError, IndexError):
    """An element access left its tensor while the kernel ran (``tl.enable_bounds_check``)."""


tvm_ffi.register_error(ASSERT_KIND, BoundsCheckError)


# --------------------------------------------------------------------------- expressions


def _op_name(call) -> str:
    return str(getattr(call.op, "name", ""))


def _and(a, b):
    if a is None:
        return b
    return _tirx.all(a, b)


def accesses(expr, cond=None) -> list:
    """``(TensorLoad, path condition or None)`` for each load in ``expr``: the condition under
    which the load is evaluated (``if_then_else`` arms, right sides of ``&&``/``||``)."""
    found = []

    def visit(node):
        if isinstance(node, ir.TensorLoad):
            found.append((node, cond))
            for index in node.indices:
                found.extend(accesses(index, cond))
            return tvm_ffi.WalkResult.SKIP
        if isinstance(node, ir.Call) and _op_name(node).endswith("if_then_else"):
            c, a, b = node.args[0], node.args[1], node.args[2]
            found.extend(accesses(c, cond))
            found.extend(accesses(a, _and(cond, c)))
            found.extend(accesses(b, _and(cond, ir.prim.expr.Not(c))))
            return tvm_ffi.WalkResult.SKIP
        if isinstance(node, ir.prim.And | ir.prim.Or):
            found.extend(accesses(node.a, cond))
            right = node.a if isinstance(node, ir.prim.And) else ir.prim.expr.Not(node.a)
            found.extend(accesses(node.b, _and(cond, right)))
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(expr, visit, order="pre")
    return found


def _static(x):
    if isinstance(x, int):
        return x
    if isinstance(x, ir.IntImm):
        return int(x.value)
    return None


def _shape(tensor):
    return list(getattr(tensor.ty, "shape", []) or [])


def _describe(tensor, indices) -> str:
    dims = [str(_static(s)) if _static(s) is not None else str(s) for s in _shape(tensor)]
    shape = ", ".join(dims) + ("," if len(dims) == 1 else "")
    return f"{tensor.name}[{', '.join(str(i) for i in indices)}] (shape ({shape}))"


# --------------------------------------------------------------------------- compile time


def _vars_of(expr) -> dict:
    out = {}

    def visit(v):
        out.setdefault(v.__chandle__(), v)

    tvm_ffi.structural_walk(expr, [(ir.Var, visit)])
    return out


def _launch(stmt):
    from ..lowering.stmt import launch_of

    return launch_of(stmt)


def _is_parallel(loop) -> bool:
    return bool(loop.annotations) and "tl.parallel" in loop.annotations


def _has_break(body) -> bool:
    from ..lowering.stmt import contains

    return contains(body, lambda x: isinstance(x, ir.Break))


class _StaticChecker:
    """Walks the traced function; see the module docstring."""

    def __init__(self):
        self.analyzer = sym.Analyzer()

    def run(self, stmt, ranges, certain, parallel, loc):
        if isinstance(stmt, ir.SeqStmt):
            for s in stmt.seq:
                self.run(s, ranges, certain, parallel, loc)
            return
        loc = stmt.loc if errors.where(getattr(stmt, "loc", None)) else loc
        if isinstance(stmt, ir.For):
            begin, end = _static(stmt.begin), _static(stmt.end)
            step = _static(stmt.step) if stmt.step is not None else 1
            inner = dict(ranges)
            runs = certain and begin is not None and end is not None and end > begin
            if begin is not None and end is not None and step == 1 and end > begin:
                inner[stmt.var.__chandle__()] = (begin, end - 1)
            runs = runs and step == 1 and not _has_break(stmt.body)
            self.run(stmt.body, inner, runs, parallel or _is_parallel(stmt), loc)
            return
        if isinstance(stmt, ir.If):
            self.check_expr(stmt.condition, ranges, certain, parallel, loc)
            self.run(stmt.then_case, ranges, False, parallel, loc)
            if stmt.else_case is not None:
                self.run(stmt.else_case, ranges, False, parallel, loc)
            return
        if isinstance(stmt, ir.While):
            self.run(stmt.body, ranges, False, parallel, loc)
            return
        if isinstance(stmt, ir.RegionStmt):
            launch = _launch(stmt)
            inner = ranges
            if launch is not None:
                extent = _static(launch[1])
                if extent is not None and extent > 0:
                    inner = {**ranges, launch[2].__chandle__(): (0, extent - 1)}
            self.run(stmt.body, inner, certain, parallel, loc)
            return
        if isinstance(stmt, ir.TensorStore):
            self.check_expr(stmt.value, ranges, certain, parallel, loc)
            for index in stmt.indices:
                self.check_expr(index, ranges, certain, parallel, loc)
            self.check_access(stmt.dest, list(stmt.indices), ranges, certain, parallel, loc)
            return
        if isinstance(stmt, ir.Bind):
            value = stmt.value
            if isinstance(value, ir.Expr) and ir.is_prim_expr(value):
                self.check_expr(value, ranges, certain, parallel, loc)
            return
        body = getattr(stmt, "body", None)
        if isinstance(body, ir.Stmt):
            self.run(body, ranges, certain, parallel, loc)

    def check_expr(self, expr, ranges, certain, parallel, loc):
        for load, cond in accesses(expr):
            self.check_access(
                load.source, list(load.indices), ranges, certain and cond is None, parallel, loc
            )

    def check_access(self, tensor, indices, ranges, certain, parallel, loc):
        for dim, index in enumerate(indices):
            ty = str(getattr(index, "ty", "int32"))
            if isinstance(index, ir.Expr) and not ty.startswith(("int", "uint")):
                raise errors.compile_error(
                    f"{_describe(tensor, indices)}: index {dim} has type {ty}; indices must "
                    "be integers (use T.cast(x, 'int32') or //)",
                    loc,
                )
        if not certain or not hasattr(tensor.ty, "shape"):
            return
        if parallel and str(tensor.ty.scope) == "global":
            return  # T.Parallel tails on global tensors are guarded (legalize_safe_access)
        for dim, (index, extent) in enumerate(zip(indices, _shape(tensor))):
            extent = _static(extent)
            if extent is None:
                continue
            bad = self._corner_outside(index, extent, ranges)
            if bad is None:
                continue
            value, assignment = bad
            at = ", ".join(f"{name}={v}" for name, v in assignment)
            raise errors.compile_error(
                f"out-of-bounds access {_describe(tensor, indices)}: index {dim} is {value}"
                f"{' when ' + at if at else ''}, outside 0..{extent - 1}. Shorten the loop, "
                "guard the access with an if, or use T.Parallel/T.copy on global tensors "
                "(their tails are guarded)",
                loc,
            )

    def _corner_outside(self, index, extent, ranges):
        value = _static(index)
        if value is not None:
            return (value, []) if not 0 <= value < extent else None
        vars_ = _vars_of(index)
        if not vars_ or len(vars_) > _MAX_CORNER_VARS:
            return None
        if any(h not in ranges for h in vars_):
            return None
        handles = list(vars_)
        for corner in itertools.product(*[ranges[h] for h in handles]):
            mapping = {h: c for h, c in zip(handles, corner)}

            def repl(v, mapping=mapping):
                c = mapping.get(v.__chandle__())
                return v if c is None else ir.const(c, v.ty)

            got = _static(self.analyzer.simplify(tvm_ffi.structural_map(index, [(ir.Var, repl)])))
            if got is not None and not 0 <= got < extent:
                return got, [(vars_[h].name, mapping[h]) for h in handles]
        return None


def check_static_bounds(func) -> None:
    """Raise a CompileError (at the user's line) for a certainly out-of-bounds access."""
    _StaticChecker().run(func.body, {}, True, False, None)


# --------------------------------------------------------------------------- run time


def _in_bounds_cond(tensor, indices, ctx):
    conds = []
    for index, extent in zip(indices, _shape(tensor)):
        for cond in (index >= 0, index < extent):
            cond = cond.__tvm_ffi_object__() if hasattr(cond, "__tvm_ffi_object__") else cond
            if not ctx.prove(cond):
                conds.append(cond)
    if not conds:
        return None
    return _tirx.all(*conds) if len(conds) > 1 else conds[0]


class _Inserter:
    def __init__(self, make_check):
        self.make_check = make_check

    def checks_for(self, pairs, ctx, loc):
        out = []
        for tensor, indices, cond in pairs:
            if not hasattr(tensor.ty, "shape") or not _shape(tensor):
                continue
            ok = _in_bounds_cond(tensor, indices, ctx)
            if ok is None:
                continue
            if cond is not None:
                ok = ir.prim.Or(ir.prim.expr.Not(cond), ok)
            where = errors.where(loc)
            text = f"out-of-bounds access {_describe(tensor, indices)}"
            out.append(self.make_check(ok, f"{where}: {text}" if where else text, loc))
        return out

    def expr_pairs(self, expr):
        return [(load.source, list(load.indices), cond) for load, cond in accesses(expr)]


def insert_bounds_checks(body, make_check, backend="cpu"):
    """``body`` with a ``make_check(cond, message, loc)`` statement before every statement
    whose element accesses the analyzer cannot prove in bounds (see the module docstring)."""
    from ..lowering.stmt import StmtMutator

    inserter = _Inserter(make_check)

    class Mutator(StmtMutator):
        def _with_checks(self, stmt, pairs, ctx):
            checks = inserter.checks_for(pairs, ctx, getattr(stmt, "loc", None))
            return stmt if not checks else ir.SeqStmt([*checks, stmt])

        def visit_TensorStore(self, stmt, ctx):
            pairs = inserter.expr_pairs(stmt.value)
            for index in stmt.indices:
                pairs += inserter.expr_pairs(index)
            pairs.append((stmt.dest, list(stmt.indices), None))
            return self._with_checks(stmt, pairs, ctx)

        def visit_Bind(self, stmt, ctx):
            value = stmt.value
            if not (isinstance(value, ir.Expr) and ir.is_prim_expr(value)):
                return stmt
            return self._with_checks(stmt, inserter.expr_pairs(value), ctx)

        def visit_If(self, stmt, ctx):
            out = super().visit_If(stmt, ctx)
            return self._with_checks(out, inserter.expr_pairs(stmt.condition), ctx)

    return Mutator(backend)(body)


def cpu_check(cond, message, loc):
    """The CPU's check: a TIRx ``AssertStmt`` (the call raises BoundsCheckError)."""
    return ir.AssertStmt(cond, ir.StringImm(ASSERT_KIND), [ir.StringImm(message)], loc=loc)


def cuda_check(cond, message, loc):
    """The CUDA check: ``if (!cond) { printf(message); __trap(); }``."""
    from ..ops.debug.cuda import c_string

    text = c_string(message.replace("%", "%%") + "\n")
    report = extern_stmt("printf", text, ty="int32")
    trap = extern_stmt("__trap")
    return ir.If(ir.prim.expr.Not(cond), ir.SeqStmt([report, trap]), None, loc)
