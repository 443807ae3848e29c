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

from ..utils import pyast

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
        self._frame_vars: list[str] = []  # per function: the variable holding frame_depth()

    def _fresh(self, stem: str) -> str:
        return f"__tl_{stem}{next(self._counter)}"

    # -- definitions -------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef):
        self._depth += 1
        try:
            if self._depth == 1:
                node.decorator_list = []  # the decorator is applying itself now
                _strip_annotations(node)
            depth_var = self._fresh("fd")
            self._frame_vars.append(depth_var)
            body = self._visit_body(node.body)
            self._frame_vars.pop()
            start = ast.Assign(
                targets=[ast.Name(depth_var, ast.Store())], value=_call("frame_depth")
            )
            node.body = [ast.fix_missing_locations(ast.copy_location(start, node)), *body]
        finally:
            self._depth -= 1
        return node

    def visit_Return(self, node: ast.Return):
        if not self._frame_vars:
            return node
        value = self.visit(node.value) if node.value is not None else ast.Constant(None)
        node.value = ast.copy_location(
            _call("return_", ast.Name(self._frame_vars[-1], ast.Load()), value), node
        )
        return ast.fix_missing_locations(node)

    def visit_Match(self, node):
        node.subject = ast.copy_location(
            _call("match_subject", self.visit(node.subject)), node.subject
        )
        for case in node.cases:
            if case.guard is not None:
                case.guard = self.visit(case.guard)
            case.body = self._visit_body(case.body)
        return ast.fix_missing_locations(node)

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
        assigned = _assigned_names(node.body)
        probe = self._fresh("lp") if assigned else None
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            it.func = ast.copy_location(_tb("range_"), it.func)  # range: an IR serial loop
        args = [self.visit(node.iter), ast.Constant(names)]
        if probe:
            args.append(ast.Name(probe, ast.Load()))
        node.iter = ast.copy_location(_call("for_", *args), node.iter)
        node.body = self._visit_body(node.body)
        node.orelse = self._visit_body(node.orelse) if node.orelse else []
        return self._guard_loop(node, assigned, probe)

    def visit_While(self, node: ast.While):
        assigned = _assigned_names(node.body)
        probe = self._fresh("lp") if assigned else None
        test = ast.Lambda(
            ast.arguments([], [], None, [], [], None, []),
            self.visit(node.test),
        )
        args = [test, *([ast.Name(probe, ast.Load())] if probe else [])]
        loop = ast.For(
            target=ast.Name(self._fresh("w"), ast.Store()),
            iter=_call("while_", *args),
            body=self._visit_body(node.body),
            orelse=self._visit_body(node.orelse) if node.orelse else [],
        )
        loop = ast.fix_missing_locations(ast.copy_location(loop, node))
        return self._guard_loop(loop, assigned, probe)

    def _guard_loop(self, loop, assigned, probe):
        """``loop`` between a snapshot of the names its body assigns and the statements
        that give those names their meaning after an IR loop (``LoopProbe.after``)."""
        if not assigned:
            return loop
        before = self._fresh("pre")
        make_probe = ast.Assign(targets=[ast.Name(probe, ast.Store())], value=_call("LoopProbe"))
        after = _call(
            "after",
            ast.Tuple([ast.Constant(n) for n in assigned], ast.Load()),
            ast.Name(before, ast.Load()),
            _snapshot(assigned),
        )
        after.func = ast.Attribute(ast.Name(probe, ast.Load()), "after", ast.Load())
        out = [
            ast.Assign(targets=[ast.Name(before, ast.Store())], value=_snapshot(assigned)),
            make_probe,
            loop,
            *self._apply_values(assigned, after),
        ]
        return [ast.fix_missing_locations(ast.copy_location(n, loop)) for n in out]

    def _apply_values(self, names, call):
        """``v = call`` then ``if v[k] is not KEEP: name_k = v[k]`` for each name."""
        values = self._fresh("v")
        out = [ast.Assign(targets=[ast.Name(values, ast.Store())], value=call)]
        for k, name in enumerate(names):
            item = ast.Subscript(ast.Name(values, ast.Load()), ast.Constant(k), ast.Load())
            test = ast.Compare(item, [ast.IsNot()], [_tb("KEEP")])
            assign = ast.Assign(targets=[ast.Name(name, ast.Store())], value=item)
            out.append(ast.If(test=test, body=[assign], orelse=[]))
        return out

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
        assigned = _assigned_names([*node.body, *node.orelse])
        arms = [
            self._arm(name, "then", self._visit_body(node.body), node, assigned, 0),
        ]
        if node.orelse:
            arms.append(self._arm(name, "orelse", self._visit_body(node.orelse), node, assigned, 1))
        test = _call("if_", self.visit(node.test), ast.Constant(bool(assigned)))
        frame = ast.With(items=[ast.withitem(test, ast.Name(name, ast.Store()))], body=arms)
        frame = ast.fix_missing_locations(ast.copy_location(frame, node))
        if not assigned:
            return frame
        # names the arms assign: merged (or made unusable) after an IR if
        before = self._fresh("pre")
        snap = ast.Assign(targets=[ast.Name(before, ast.Store())], value=_snapshot(assigned))
        merge = ast.Call(
            ast.Attribute(ast.Name(name, ast.Load()), "merge", ast.Load()),
            [
                ast.Tuple([ast.Constant(n) for n in assigned], ast.Load()),
                ast.Name(before, ast.Load()),
            ],
            [],
        )
        out = [snap, frame, *self._apply_values(assigned, merge)]
        return [ast.fix_missing_locations(ast.copy_location(n, node)) for n in out]

    def _arm(self, frame_name, method, body, node, assigned=(), index=0):
        taken = self._fresh("arm")
        ctx = ast.Call(ast.Attribute(ast.Name(frame_name, ast.Load()), method, ast.Load()), [], [])
        if assigned:
            record = ast.Call(
                ast.Attribute(ast.Name(frame_name, ast.Load()), "record", ast.Load()),
                [ast.Constant(index), _snapshot(assigned)],
                [],
            )
            body = [*body, ast.Expr(record)]
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
        if len(node.targets) > 1:
            return self._chain(node)
        return node

    def _chain(self, node):
        """``A[i] = B[i] = v``: evaluate ``v`` once, then assign it to each target in order."""
        temp = self._fresh("c")
        first = ast.Assign(targets=[ast.Name(temp, ast.Store())], value=node.value)
        out = [ast.fix_missing_locations(ast.copy_location(first, node))]
        for target in node.targets:
            single = ast.copy_location(
                ast.Assign(targets=[target], value=ast.Name(temp, ast.Load())), node
            )
            done = self.visit_Assign(single)
            out.extend(done if isinstance(done, list) else [done])
        return out

    def visit_With(self, node: ast.With):
        """``with T.Kernel(n) as (bx,):`` -- a one-dimension launch yields one index, which
        upstream also lets you unpack as a 1-tuple: bind through ``launch_unpack``."""
        self.generic_visit(node)
        unpacks = []
        for item in node.items:
            target = item.optional_vars
            if isinstance(target, ast.Tuple | ast.List):
                temp = self._fresh("w")
                item.optional_vars = ast.Name(temp, ast.Store())
                value = _call(
                    "launch_unpack", ast.Name(temp, ast.Load()), ast.Constant(len(target.elts))
                )
                unpack = ast.Assign(targets=[target], value=value)
                unpacks.append(ast.fix_missing_locations(ast.copy_location(unpack, node)))
        if unpacks:
            node.body = unpacks + node.body
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


def _snapshot(names) -> ast.Call:
    """``__tb.snapshot(lambda: a, lambda: b, ...)``."""
    thunks = [
        ast.Lambda(ast.arguments([], [], None, [], [], None, []), ast.Name(n, ast.Load()))
        for n in names
    ]
    return _call("snapshot", *thunks)


class _AssignedNames(ast.NodeVisitor):
    """Names a block of statements assigns (not inside nested functions or classes)."""

    def __init__(self):
        self.names: list[str] = []

    def _add(self, target):
        if isinstance(target, ast.Name):
            if target.id not in self.names and not target.id.startswith("__tl_"):
                self.names.append(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self._add(elt)
        elif isinstance(target, ast.Starred):
            self._add(target.value)

    def visit_Assign(self, node):
        for target in node.targets:
            self._add(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._add(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self._add(node.target)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._add(node.target)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        pass

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _assigned_names(body) -> list[str]:
    finder = _AssignedNames()
    for stmt in body:
        finder.visit(stmt)
    return finder.names


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
    tree = pyast.parse(source, filename=filename)
    ast.increment_lineno(tree, first_line - 1)
    tree = _KernelRewriter().visit(tree)
    ast.fix_missing_locations(tree)
    return tree, filename, first_line
