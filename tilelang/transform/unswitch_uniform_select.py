"""Uniform-select unswitching: a ``T.Parallel`` nest whose body selects on a condition
affine in the loop variables runs a select-free copy where the condition is the same for
the whole iteration box.

FlashAttention's causal mask, as upstream users write it::

    for i, j in T.Parallel(block_M, block_N):
        acc_s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(...))

holds for the whole tile in every K block but the diagonal ones, yet each element pays its
index arithmetic, compare and select every iteration. This pass rewrites the nest as::

    if <cond holds for every (i, j) of the box>:     # "all":  acc_s[i, j] = 0
        for i, j in T.Parallel(...): <body with every select on cond taking its true arm>
    elif <cond fails for every (i, j)>:              # "none": acc_s[i, j] = -inf
        for i, j in T.Parallel(...): <body with its false arm>
    else:
        <the original nest>

The box conditions are exact. ``cond`` is a comparison of integer expressions affine in the
nest's loop variables with constant coefficients (``_linear``), or ``and``/``or``/``not`` of
such, or free of the loop variables. ``lhs >= rhs`` holds over a box iff it holds at the
corner minimising ``lhs - rhs`` (each variable at its first or last value by the sign of its
coefficient), and fails everywhere iff it fails at the maximising corner; conjunctions and
disjunctions combine those (``all(a && b) = all(a) && all(b)``, ``none(a && b) ⇐ none(a) ||
none(b)``). The corner is a point of the box, so the test evaluates the user's own
expressions at one iteration (no new overflow); an empty box runs no iteration in any arm.

Assumes: tile level (before layout inference / ``lower_threads``): nests are still ``For``
loops annotated ``tl.parallel``. Guarantees: each rewritten nest is replaced by exactly one
statement (``T.Pipelined(order=, stage=, group=)`` index the loop body's statements); the
arms' loops get fresh variables (layout inference keys nests by their outer loop Var);
a nest is left alone when its condition reads memory, calls a function, uses a variable
bound inside the nest or a thread index (or a value bound from one: the test must be
uniform over the block), or is not affine. An arm proven taken (or never taken) under the
enclosing loop ranges replaces the ``if`` (or is dropped); an arm that only copies elements
onto themselves (``x[i] = if_then_else(c, x[i], 0)``) is an empty statement; the ``none`` arm
is built only when every false arm is cheap (a constant, a variable, a load, or free of the
loop variables). Each decision is listed in the function attribute
``tl.unswitch_uniform_select`` (pass config ``tl.unswitch_uniform_select``, default on).
"""

from __future__ import annotations

import itertools

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.ir import prim as P

from ..layout import expr as E
from ..lowering.stmt import StmtMutator, launch_of, substitute

ATTR = "tl.unswitch_uniform_select"

_CMP = (P.LT, P.LE, P.GT, P.GE, P.EQ, P.NE)


# ------------------------------------------------------------------ affine analysis
def _is_int(expr) -> bool:
    dtype = str(expr.ty)
    return dtype.startswith("int") or dtype.startswith("uint")


def _bits(dtype: str) -> int:
    digits = "".join(ch for ch in dtype if ch.isdigit())
    return int(digits) if digits else 32


def _linear(expr, loop: dict):
    """``{loop var key: coefficient}`` of an integer ``expr`` affine in the loop variables
    (``loop``: key -> Var), ``{}`` when free of them, None when not affine."""
    if isinstance(expr, ir.Var):
        return {E.key(expr): 1} if E.key(expr) in loop else {}
    if not any(E.key(v) in loop for v in E.free_vars(expr)):
        return {}
    if isinstance(expr, P.Add | P.Sub):
        a, b = _linear(expr.a, loop), _linear(expr.b, loop)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(expr, P.Add) else -1
        out = dict(a)
        for k, c in b.items():
            out[k] = out.get(k, 0) + sign * c
        return out
    if isinstance(expr, P.Mul):
        for var_side, const_side in ((expr.a, expr.b), (expr.b, expr.a)):
            scale = E.as_const_int(const_side)
            inner = _linear(var_side, loop)
            if scale is not None and inner is not None:
                return {k: c * scale for k, c in inner.items()}
        return None
    if isinstance(expr, P.Cast) and _is_int(expr) and _is_int(expr.value):
        # a widening cast is monotone; a narrowing one may wrap
        if _bits(str(expr.ty)) >= _bits(str(expr.value.ty)):
            return _linear(expr.value, loop)
    return None


def _corner(coeffs: dict, loop: dict, box: dict, smallest: bool) -> dict:
    """Var -> value: the box corner where ``sum(c * v)`` is smallest (or largest)."""
    point = {}
    for k, var in loop.items():
        first, last = box[k]
        c = coeffs.get(k, 0)
        point[var] = E.as_expr(first if (c >= 0) == smallest else last)
    return point


def box_conditions(cond, loop: dict, box: dict):
    """``(all, none)``: conditions free of the loop variables under which ``cond`` holds for
    every point of the box / for none of them (None where not derivable). ``loop``: key ->
    Var; ``box``: key -> (first, last) values (inclusive)."""
    if isinstance(cond, ir.Call) and str(cond.op.name).endswith("likely"):
        return box_conditions(cond.args[0], loop, box)
    if isinstance(cond, P.Not):
        all_, none = box_conditions(cond.a, loop, box)
        return none, all_
    if isinstance(cond, P.And | P.BitwiseAnd | P.Or | P.BitwiseOr) and str(cond.ty) == "bool":
        a_all, a_none = box_conditions(cond.a, loop, box)
        b_all, b_none = box_conditions(cond.b, loop, box)
        if isinstance(cond, P.And | P.BitwiseAnd):
            both = None if a_all is None or b_all is None else P.And(a_all, b_all)
            either = _either(a_none, b_none)
            return both, either
        both = None if a_none is None or b_none is None else P.And(a_none, b_none)
        return _either(a_all, b_all), both
    if not any(E.key(v) in loop for v in E.free_vars(cond)):
        return cond, P.Not(cond)  # loop-invariant: one test decides the whole box
    if not isinstance(cond, _CMP) or not (_is_int(cond.a) and _is_int(cond.b)):
        return None, None
    lhs, rhs = _linear(cond.a, loop), _linear(cond.b, loop)
    if lhs is None or rhs is None:
        return None, None
    coeffs = dict(lhs)
    for k, c in rhs.items():
        coeffs[k] = coeffs.get(k, 0) - c
    lo = _corner(coeffs, loop, box, smallest=True)  # where lhs - rhs is smallest
    hi = _corner(coeffs, loop, box, smallest=False)

    def at(node, point):
        return substitute(node, point)

    if isinstance(cond, P.GE | P.GT):
        return at(cond, lo), P.Not(at(cond, hi))
    if isinstance(cond, P.LE | P.LT):
        return at(cond, hi), P.Not(at(cond, lo))
    # lhs == rhs nowhere iff lhs - rhs > 0 at its minimum or < 0 at its maximum
    nowhere_equal = P.Or(P.GT(at(cond.a, lo), at(cond.b, lo)), P.LT(at(cond.a, hi), at(cond.b, hi)))
    if all(c == 0 for c in coeffs.values()):  # the loop variables cancel out
        return at(cond, lo), P.Not(at(cond, lo))
    return (None, nowhere_equal) if isinstance(cond, P.EQ) else (nowhere_equal, None)


def _either(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return P.Or(a, b)


# ------------------------------------------------------------------ the rewrite
def _is_parallel(stmt) -> bool:
    return isinstance(stmt, ir.For) and bool(stmt.annotations) and "tl.parallel" in stmt.annotations


def _select_parts(node):
    """(cond, true value, false value) of an ``if_then_else`` call or a Select, else None."""
    if isinstance(node, ir.Call) and str(node.op.name).endswith("if_then_else"):
        return node.args[0], node.args[1], node.args[2]
    if isinstance(node, P.Select):
        return node.condition, node.true_value, node.false_value
    return None


def _collect(node, kind) -> list:
    found = []
    tvm_ffi.structural_walk(node, [(kind, found.append)])
    return found


def _defined_vars(body) -> list:
    """Variables bound inside ``body`` (bindings, loops, region parameters)."""
    out = [b.var for b in _collect(body, ir.Bind)] + [f.var for f in _collect(body, ir.For)]
    for region in _collect(body, ir.RegionStmt):
        out.extend(region.body_params)
    return out


def _usable(cond, inner_keys) -> bool:
    """Whether ``cond`` may be tested outside the nest: no memory reads, no calls other
    than ``likely``, no nested selects, no variable bound inside the nest."""
    if _collect(cond, ir.TensorLoad) or _collect(cond, P.Select):
        return False
    if any(not str(c.op.name).endswith("likely") for c in _collect(cond, ir.Call)):
        return False
    return not any(E.key(v) in inner_keys for v in E.free_vars(cond))


def _resolve(body, cond, take_true: bool):
    """``body`` with every select on ``cond`` replaced by its true (or false) arm, and the
    chosen arms."""
    chosen = []

    def visit(node):
        parts = _select_parts(node)
        if parts is None or not tvm_ffi.structural_equal(parts[0], cond):
            return node
        value = parts[1] if take_true else parts[2]
        chosen.append(value)
        return value

    return tvm_ffi.structural_map(body, [(ir.Call, visit), (P.Select, visit)]), chosen


def _is_self_copy(stmt) -> bool:
    value = stmt.value
    return (
        isinstance(value, ir.TensorLoad)
        and value.source.same_as(stmt.dest)
        and len(value.indices) == len(stmt.indices)
        and all(tvm_ffi.structural_equal(a, b) for a, b in zip(value.indices, stmt.indices))
    )


def _without_self_copies(body):
    """``body`` without stores of an element onto itself; None when nothing else is left."""
    if isinstance(body, ir.TensorStore):
        return None if _is_self_copy(body) else body
    if isinstance(body, ir.SeqStmt):
        kept = [s for s in (_without_self_copies(x) for x in body.seq) if s is not None]
        if not kept:
            return None
        return kept[0] if len(kept) == 1 else ir.SeqStmt(kept)
    return body


def _cheap(value, loop) -> bool:
    if isinstance(value, ir.Var | ir.IntImm | ir.FloatImm | ir.TensorLoad):
        return True
    return not any(E.key(v) in loop for v in E.free_vars(value))


NOOP = ir.Evaluate(ir.const(0, "int32"))


class UnswitchUniformSelect(StmtMutator):
    """Rewrite each ``T.Parallel`` nest as the module docstring says; ``self.notes`` lists
    one line per decision."""

    def __init__(self):
        super().__init__("generic")
        self.notes: list = []
        self.per_thread: set = set()  # keys of thread indices and values bound from them

    def visit_RegionStmt(self, stmt, ctx):
        launch = launch_of(stmt)
        if launch is not None and launch[0].startswith("threadIdx"):
            self.per_thread.add(E.key(launch[2]))
        return super().visit_RegionStmt(stmt, ctx)

    def visit_Bind(self, stmt, ctx):
        if any(E.key(v) in self.per_thread for v in E.free_vars(stmt.value)):
            self.per_thread.add(E.key(stmt.var))
        return stmt

    def visit_For(self, stmt, ctx):
        if not _is_parallel(stmt):
            return super().visit_For(stmt, ctx)
        loops, s = [], stmt
        while _is_parallel(s):
            loops.append(s)
            s = s.body
            while isinstance(s, ir.SeqStmt) and len(s.seq) == 1:
                s = s.seq[0]
        if any(E.as_const_int(f.step) != 1 for f in loops):
            return stmt
        out = self._unswitch(stmt, loops, s, ctx)
        return stmt if out is None else out

    def _unswitch(self, nest, loops, body, ctx):
        loop = {E.key(f.var): f.var for f in loops}
        box = {E.key(f.var): (f.begin, f.end - 1) for f in loops}
        # a test that differs between the threads of a warp would split the nest's threads
        # over different arms (lowered with different layouts): only block-uniform tests
        inner = {E.key(v) for v in _defined_vars(body)} | self.per_thread
        conds, chosen_cond = [], None
        for node in _collect(body, ir.Call) + _collect(body, P.Select):
            parts = _select_parts(node)
            if parts is None or any(tvm_ffi.structural_equal(parts[0], c) for c in conds):
                continue
            conds.append(parts[0])
            if not _usable(parts[0], inner):
                continue
            all_, none = box_conditions(parts[0], loop, box)
            if all_ is not None or none is not None:
                chosen_cond = (parts[0], all_, none)
                break
        if chosen_cond is None:
            return None
        cond, all_, none = chosen_cond
        outer = ctx  # the enclosing loops' and launches' ranges
        arms = []  # (box condition, statement, label)
        if all_ is not None:
            arms.append((outer.simplify(all_), self._arm(nest, loops, body, cond, True), "all"))
        if none is not None:
            _, values = _resolve(body, cond, False)
            if all(_cheap(v, loop) for v in values):
                arms.append(
                    (outer.simplify(none), self._arm(nest, loops, body, cond, False), "none")
                )
        label = f"{', '.join(f.var.name for f in loops)}: select on {cond}"
        out, taken = nest, []
        for test, arm, name in reversed(arms):
            decided = _decide(outer, test)
            if decided is False:
                continue
            if decided is True:
                out, taken = arm, [f"{name} always"]
                continue
            out = ir.If(test, arm, out, nest.loc)
            taken.insert(0, f"{name} if {test}")
        if not taken:
            self.notes.append(f"{label}: kept (no arm can be taken)")
            return None
        self.notes.append(f"{label}: {'; '.join(taken)}")
        return out

    def _arm(self, nest, loops, body, cond, take_true):
        """The nest with the selects on ``cond`` resolved and fresh loop variables."""
        resolved, _ = _resolve(body, cond, take_true)
        resolved = _without_self_copies(resolved)
        if resolved is None:
            return NOOP
        stmt = resolved
        for f in reversed(loops):
            stmt = ir.For(f.var, f.begin, f.end, f.step, f.kind, stmt, f.annotations, f.loc)
        fresh = {v: ir.Var(v.name, v.ty) for v in [f.var for f in loops] + _defined_vars(body)}
        return substitute(stmt, fresh)


def _decide(ctx, test):
    """True (False) when ``test`` holds (fails) for every value of the enclosing loops
    and launches in ``ctx``, else None.

    A loop with a symbolic extent (FlashAttention's causal ``k < min(ceildiv(seq, bN),
    ceildiv((bx + 1) * bM, bN))``) is treated as a box of its own: ``test`` is decided at its
    corners, which the analyzer can then simplify. An extent ``min(a, b)`` is also tried as
    ``a`` and as ``b``: a larger box, so what holds over it holds over the loop's.
    """
    value = E.as_const_int(test)
    if value is not None:
        return bool(value)
    symbolic = [
        (var, begin, _min_terms(extent))
        for var, (begin, extent) in ctx.ranges.items()
        if E.as_const_int(extent) is None and any(E.key(var) == E.key(v) for v in E.free_vars(test))
    ]
    if not symbolic:
        return True if _proves(ctx, test) else False if _proves(ctx, P.Not(test)) else None
    loop = {E.key(var): var for var, _, _ in symbolic}
    for extents in itertools.islice(itertools.product(*(t for _, _, t in symbolic)), 16):
        box = {E.key(var): (b, b + e - 1) for (var, b, _), e in zip(symbolic, extents)}
        all_, none = box_conditions(test, loop, box)
        if all_ is not None and _proves(ctx, all_):
            return True
        if none is not None and _proves(ctx, none):
            return False
    return None


def _min_terms(extent) -> list:
    """``extent`` and, for ``min(a, b)``, the terms of ``a`` and ``b`` (each at least it)."""
    out = [extent]
    if isinstance(extent, P.Min):
        for term in _min_terms(extent.a) + _min_terms(extent.b):
            if not any(tvm_ffi.structural_equal(term, seen) for seen in out):
                out.append(term)
    return out


def _proves(ctx, cond) -> bool:
    try:
        return bool(ctx.prove(ctx.simplify(cond)))
    except Exception:  # noqa: BLE001 - an analyzer that cannot decide proves nothing
        return False


def unswitch_uniform_select(func):
    """The rewrite over ``func``'s body; the decisions recorded as the function attribute
    ``tl.unswitch_uniform_select`` (absent when the kernel has no candidate nest)."""
    mutator = UnswitchUniformSelect()
    body = mutator(func.body)
    if not mutator.notes:
        return func
    return func.with_body(body).with_attr(ATTR, list(mutator.notes))
