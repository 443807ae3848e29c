"""Rewrite a kernel's Python source so that running it traces TIRx.

A ``@T.prim_func`` (or ``@T.macro``) body is ordinary Python with tile-language
calls in it. Calls such as ``T.copy`` record themselves when they run, so only
the statements whose meaning depends on whether a value is known now (Python) or
at kernel run time (IR) need rewriting:

=====================  ==========================================================
source                 rewritten to
=====================  ==========================================================
``for t in it: b``     ``for t in __tb.for_(it, "t"): b`` (a Python loop for a
                       Python iterable, one IR loop otherwise)
``while c: b``         ``for _ in __tb.while_(lambda: c): b``
``if c: a else: b``    ``with __tb.if_(c) as k:`` then a branch context for each
                       arm, entered as a Python ``if`` when ``c`` is a Python value
``break``/``continue`` ``if __tb.break_(): break`` (IR break inside IR loops)
``x = v``              ``x = __tb.bind("x", v, lambda: x)`` (stores into
                       ``T.alloc_var`` cells, names IR values)
``a, b = v``           ``__tl_u0, __tl_u1 = v`` then ``a = __tb.bind("a", ...)``
                       for each name
``a and b``, ``a or b`` ``__tb.and_(lambda: a, lambda: b)`` (Python semantics for
                       Python values, an IR And/Or otherwise); likewise
                       ``not a``, ``a if c else b`` and ``a < b < c``
``a[i] = v``           ``__tb.setitem(a, i, v)``
``a[i] += v``          ``__tb.aug_setitem(a, i, "+", v)``
=====================  ==========================================================

Line numbers are preserved, so tracebacks and diagnostics point at the user's
source. The rewrite is purely syntactic; the semantics live in ``builder.py``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap

BUILDER = "__tb"

_AUG_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.Pow: "**",
}


def _strip_annotations(node: ast.FunctionDef) -> None:
    """Drop parameter/return annotations and default values: Python already evaluated
    them on the original function, in its enclosing scope, whose locals the rewritten
    code cannot see (the caller copies ``__defaults__``/``__kwdefaults__`` over)."""
    a = node.args
    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
        if arg is not None:
            arg.annotation = None
    node.returns = None
    a.defaults = []
    a.kw_defaults = [None] * len(a.kwonlyargs)


def _tb(attr: str) -> ast.Attribute:
    return ast.Attribute(ast.Name(BUILDER, ast.Load()), attr, ast.Load())


def _call(attr: str, *args: ast.expr) -> ast.Call:
    return ast.Call(_tb(attr), list(args), [])


class _KernelRewriter(ast.NodeTransformer):
    """The syntactic rewrite described in the module docstring."""

    def __init__(self):
        self._counter = itertools.count()
        self._depth = 0  # nesting of function definitions

    def _fresh(self, stem: str) -> str:
        return f"__tl_{stem}{next(self._counter)}"

    # -- definitions -------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef):
        self._depth += 1
        try:
            if self._depth == 1:
                node.decorator_list = []  # the decorator is applying itself now
                _strip_annotations(node)
            node.body = self._visit_body(node.body)
        finally:
            self._depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node  # expressions only: nothing to rewrite

    # -- boolean expressions (run-time values cannot go through Python's and/or/not) --
    @staticmethod
    def _thunk(expr: ast.expr) -> ast.Lambda:
        return ast.Lambda(ast.arguments([], [], None, [], [], None, []), expr)

    def _lazy(self, method, node, *exprs):
        call = _call(method, *(self._thunk(e) for e in exprs))
        return ast.fix_missing_locations(ast.copy_location(call, node))

    def visit_BoolOp(self, node: ast.BoolOp):
        values = [self.visit(v) for v in node.values]
        return self._lazy("and_" if isinstance(node.op, ast.And) else "or_", node, *values)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        node.operand = self.visit(node.operand)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.fix_missing_locations(ast.copy_location(_call("not_", node.operand), node))

    def visit_IfExp(self, node: ast.IfExp):
        call = _call(
            "ifexp",
            self.visit(node.test),
            self._thunk(self.visit(node.body)),
            self._thunk(self.visit(node.orelse)),
        )
        return ast.fix_missing_locations(ast.copy_location(call, node))

    def visit_Compare(self, node: ast.Compare):
        node = self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        operands = [node.left, *node.comparators]
        pairs = [ast.Compare(operands[k], [op], [operands[k + 1]]) for k, op in enumerate(node.ops)]
        return self._lazy("and_", node, *pairs)

    def _visit_body(self, body):
        out = []
        for stmt in body:
            res = self.visit(stmt)
            if res is None:
                continue
            out.extend(res if isinstance(res, list) else [res])
        return out or [ast.Pass()]

    # -- loops ---------------------------------------------------------------
    def visit_For(self, node: ast.For):
        names = ast.unparse(node.target)
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            it.func = ast.copy_location(_tb("range_"), it.func)  # range: an IR serial loop
        node.iter = ast.copy_location(
            _call("for_", self.visit(node.iter), ast.Constant(names)), node.iter
        )
        node.body = self._visit_body(node.body)
        node.orelse = self._visit_body(node.orelse) if node.orelse else []
        return node

    def visit_While(self, node: ast.While):
        test = ast.Lambda(
            ast.arguments([], [], None, [], [], None, []),
            self.visit(node.test),
        )
        loop = ast.For(
            target=ast.Name(self._fresh("w"), ast.Store()),
            iter=_call("while_", test),
            body=self._visit_body(node.body),
            orelse=self._visit_body(node.orelse) if node.orelse else [],
        )
        return ast.fix_missing_locations(ast.copy_location(loop, node))

    def _jump(self, node, method):
        guard = ast.If(test=_call(method), body=[node], orelse=[])
        return ast.fix_missing_locations(ast.copy_location(guard, node))

    def visit_Break(self, node):
        return self._jump(node, "break_")

    def visit_Continue(self, node):
        return self._jump(node, "continue_")

    # -- branches -----------------------------------------------------------
    def visit_If(self, node: ast.If):
        name = self._fresh("if")
        arms = [
            self._arm(name, "then", self._visit_body(node.body), node),
        ]
        if node.orelse:
            arms.append(self._arm(name, "orelse", self._visit_body(node.orelse), node))
        frame = ast.With(
            items=[ast.withitem(_call("if_", self.visit(node.test)), ast.Name(name, ast.Store()))],
            body=arms,
        )
        return ast.fix_missing_locations(ast.copy_location(frame, node))

    def _arm(self, frame_name, method, body, node):
        taken = self._fresh("arm")
        ctx = ast.Call(ast.Attribute(ast.Name(frame_name, ast.Load()), method, ast.Load()), [], [])
        inner = ast.If(test=ast.Name(taken, ast.Load()), body=body, orelse=[])
        arm = ast.With(items=[ast.withitem(ctx, ast.Name(taken, ast.Store()))], body=[inner])
        return ast.fix_missing_locations(ast.copy_location(arm, node))

    # -- assignments --------------------------------------------------------
    def _bind(self, name: str, value: ast.expr, node) -> ast.Assign:
        previous = ast.Lambda(
            ast.arguments([], [], None, [], [], None, []), ast.Name(name, ast.Load())
        )
        assign = ast.Assign(
            targets=[ast.Name(name, ast.Store())],
            value=_call("bind", ast.Constant(name), value, previous),
        )
        return ast.fix_missing_locations(ast.copy_location(assign, node))

    def visit_Assign(self, node: ast.Assign):
        node.value = self.visit(node.value)
        if len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                return self._bind(target.id, node.value, node)
            if isinstance(target, ast.Subscript):
                store = ast.Expr(
                    _call("setitem", self.visit(target.value), self.visit(target.slice), node.value)
                )
                return ast.fix_missing_locations(ast.copy_location(store, node))
            if isinstance(target, ast.Tuple | ast.List) and all(
                isinstance(e, ast.Name) for e in target.elts
            ):
                return self._unpack(target.elts, node)
        return node

    def _unpack(self, names, node):
        """``a, b = v``: unpack into temporaries, then bind each name as ``a = v0`` would."""
        temps = [self._fresh("u") for _ in names]
        unpack = ast.Assign(
            targets=[ast.Tuple([ast.Name(t, ast.Store()) for t in temps], ast.Store())],
            value=node.value,
        )
        out = [ast.fix_missing_locations(ast.copy_location(unpack, node))]
        for name, temp in zip(names, temps):
            out.append(self._bind(name.id, ast.Name(temp, ast.Load()), node))
        return out

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if node.value is None or not isinstance(node.target, ast.Name):
            return node
        # ``x: T.int32 = v`` declares a mutable scalar cell, as upstream does.
        value = _call(
            "declare",
            ast.Constant(node.target.id),
            self.visit(node.annotation),
            self.visit(node.value),
        )
        assign = ast.Assign(targets=[ast.Name(node.target.id, ast.Store())], value=value)
        return ast.fix_missing_locations(ast.copy_location(assign, node))

    def visit_AugAssign(self, node: ast.AugAssign):
        op = ast.Constant(_AUG_OPS[type(node.op)])
        value = self.visit(node.value)
        target = node.target
        if isinstance(target, ast.Name):
            combined = _call("aug", ast.Name(target.id, ast.Load()), op, value)
            return self._bind(target.id, combined, node)
        if isinstance(target, ast.Subscript):
            store = ast.Expr(
                _call("aug_setitem", self.visit(target.value), self.visit(target.slice), op, value)
            )
            return ast.fix_missing_locations(ast.copy_location(store, node))
        return node


def rewrite_function(func) -> tuple[ast.Module, str, int]:
    """Parse ``func``'s source and rewrite it; returns (module, filename, first line)."""
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as err:
        raise OSError(
            f"tilelang needs the source of {func.__qualname__!r} to trace it "
            f"(functions typed into an interactive prompt have none): {err}"
        ) from err
    filename = inspect.getsourcefile(func) or "<unknown>"
    source = textwrap.dedent("".join(lines))
    tree = ast.parse(source, filename=filename)
    ast.increment_lineno(tree, first_line - 1)
    tree = _KernelRewriter().visit(tree)
    ast.fix_missing_locations(tree)
    return tree, filename, first_line
