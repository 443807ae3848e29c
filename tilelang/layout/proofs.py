"""Machine-checked properties of layouts and fragments, proved with Z3.

How the proofs are done
-----------------------
Every function here translates the TIRx index expressions into Z3 **bit-vector** terms
(``z3-solver``, a dependency of the package) and asks Z3 for a counterexample; ``unsat``
is a proof.  The bit width is chosen from an interval analysis of every sub-expression so
that no intermediate value can overflow, which makes the bit-vector semantics coincide
with TIRx integer semantics (``//``/``%`` are floor division/modulo, translated with
``bvsmod``; ``^``/``&``/``|``/shifts map to the bit-vector operators).

We do not go through ``tvm_tirx.sym.Analyzer.can_prove`` although it embeds Z3 (used
at ``ProofStrength.SYMBOLIC_BOUND``): it encodes integers with the ``Int`` sort and
bitwise operators through ``int2bv``/``ubv_to_int`` conversions, and with tvm_tirx
0.1.0a4 it answers "cannot prove" even for true facts such as ``(j ^ (i % 8)) < 8`` with
``i, j`` in ``[0, 8)``, or the injectivity of the 128-byte swizzle (checked in
``Analyzer.get_smtlib2`` output).  Pure bit-vector queries are decidable by
bit-blasting and take milliseconds here.

Each prover can also run by exhaustive enumeration with numpy (``method="enumerate"``),
which the tests use as an independent cross-check.  All provers return a
:class:`ProofResult`; it is truthy only when the property was proved, and carries a
readable counterexample otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import z3
from tvm_tirx import ir
from tvm_tirx.ir import IntImm, Var
from tvm_tirx.ir import prim as P

from . import expr as E
from .fragment import Fragment
from .layout import Layout

#: Largest output box for which unreached slots are listed by enumeration.
_ENUM_BOX_LIMIT = 1 << 22
_DEFAULT_TIMEOUT_MS = 60_000


@dataclass
class ProofResult:
    """Outcome of a proof.

    ``holds`` is True (proved), False (refuted, see ``counterexample``) or None (the solver
    gave up).  ``stats`` carries counts such as slot usage.
    """

    holds: bool | None
    property: str
    method: str
    message: str = ""
    counterexample: dict | None = None
    stats: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.holds is True

    def __str__(self) -> str:
        status = {True: "PROVED", False: "FAILED", None: "UNKNOWN"}[self.holds]
        text = f"[{status}] {self.property} ({self.method})"
        return f"{text}: {self.message}" if self.message else text


# ---------------------------------------------------------------------------------------
# interval analysis (for the bit width) and the Z3 translation
# ---------------------------------------------------------------------------------------

_UNBOUNDED = (-(1 << 62), 1 << 62)


def _interval(node, ranges: dict[int, tuple[int, int]], memo: dict) -> tuple[int, int]:
    handle = node.__chandle__()
    if handle in memo:
        return memo[handle]
    if isinstance(node, IntImm):
        result = (int(node.value), int(node.value))
    elif isinstance(node, Var):
        result = ranges.get(E.key(node), _UNBOUNDED)
    elif isinstance(node, P.BinaryOpExpr | P.CmpExpr | P.And | P.Or):
        a = _interval(node.a, ranges, memo)
        b = _interval(node.b, ranges, memo)
        result = _binary_interval(node, a, b)
    elif isinstance(node, P.Not | P.BitwiseNot):
        a = _interval(node.a, ranges, memo)
        result = (0, 1) if isinstance(node, P.Not) else (-a[1] - 1, -a[0] - 1)
    elif isinstance(node, P.Cast):
        result = _interval(node.value, ranges, memo)
    elif isinstance(node, P.Select):
        _interval(node.condition, ranges, memo)
        a = _interval(node.true_value, ranges, memo)
        b = _interval(node.false_value, ranges, memo)
        result = (min(a[0], b[0]), max(a[1], b[1]))
    elif isinstance(node, ir.Call) and getattr(node.op, "name", "") == "prim.if_then_else":
        _interval(node.args[0], ranges, memo)
        a = _interval(node.args[1], ranges, memo)
        b = _interval(node.args[2], ranges, memo)
        result = (min(a[0], b[0]), max(a[1], b[1]))
    else:
        raise TypeError(f"cannot translate expression node {type(node).__name__}: {node}")
    memo[handle] = result
    return result


def _binary_interval(node, a, b):
    if isinstance(node, P.CmpExpr | P.And | P.Or):
        return (0, 1)
    if isinstance(node, P.Add):
        return (a[0] + b[0], a[1] + b[1])
    if isinstance(node, P.Sub):
        return (a[0] - b[1], a[1] - b[0])
    if isinstance(node, P.Mul):
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if isinstance(node, P.FloorDiv | P.Div):
        if b[0] > 0:
            quotients = [a[0] // b[0], a[0] // b[1], a[1] // b[0], a[1] // b[1]]
            return (min(quotients) - 1, max(quotients) + 1)
        return (-max(abs(a[0]), abs(a[1])), max(abs(a[0]), abs(a[1])))
    if isinstance(node, P.FloorMod | P.Mod):
        bound = max(abs(b[0]), abs(b[1]))
        return (-bound, bound)
    if isinstance(node, P.Min | P.Max):
        return (min(a[0], b[0]), max(a[1], b[1]))
    if isinstance(node, P.BitwiseAnd | P.BitwiseOr | P.BitwiseXor):
        top = max(abs(x) for x in (*a, *b))
        span = (1 << int(top).bit_length()) - 1
        return (-span - 1, span)
    if isinstance(node, P.LShift):
        return (a[0] << max(b[1], 0), a[1] << max(b[1], 0)) if a[0] >= 0 else _UNBOUNDED
    if isinstance(node, P.RShift):
        return (min(a[0], 0), max(a[1], 0))
    raise TypeError(f"cannot translate expression node {type(node).__name__}")


def _choose_width(exprs, ranges: dict[int, tuple[int, int]]) -> int:
    memo: dict = {}
    for expr in exprs:
        _interval(expr, ranges, memo)
    top = max((max(abs(lo), abs(hi)) for lo, hi in memo.values()), default=1)
    return min(max(E.bit_length_needed(top) + 1, 8), 64)


class _Encoder:
    """Translate TIRx expressions to Z3 bit-vector terms of a fixed width."""

    def __init__(self, width: int):
        self.width = width

    def const(self, value: int):
        return z3.BitVecVal(value, self.width)

    def bv(self, term):
        return z3.If(term, self.const(1), self.const(0)) if z3.is_bool(term) else term

    def boolean(self, term):
        return term if z3.is_bool(term) else term != self.const(0)

    def encode(self, expr, env: dict[int, object]):
        memo: dict[int, object] = {}

        def run(node):
            handle = node.__chandle__()
            if handle not in memo:
                memo[handle] = self._node(node, run, env)
            return memo[handle]

        return run(E.as_expr(expr))

    def _node(self, node, run, env):
        bv, boolean = self.bv, self.boolean
        if isinstance(node, IntImm):
            return self.const(int(node.value))
        if isinstance(node, Var):
            if E.key(node) not in env:
                raise ValueError(f"free variable {node.name} has no binding")
            return env[E.key(node)]
        if isinstance(node, P.And):
            return z3.And(boolean(run(node.a)), boolean(run(node.b)))
        if isinstance(node, P.Or):
            return z3.Or(boolean(run(node.a)), boolean(run(node.b)))
        if isinstance(node, P.Not):
            return z3.Not(boolean(run(node.a)))
        if isinstance(node, P.BitwiseNot):
            return ~bv(run(node.a))
        if isinstance(node, P.Cast):
            return run(node.value)
        if isinstance(node, P.Select):
            return z3.If(
                boolean(run(node.condition)), bv(run(node.true_value)), bv(run(node.false_value))
            )
        if isinstance(node, ir.Call) and getattr(node.op, "name", "") == "prim.if_then_else":
            cond, then, other = node.args
            return z3.If(boolean(run(cond)), bv(run(then)), bv(run(other)))
        a, b = bv(run(node.a)), bv(run(node.b))
        table = {
            P.Add: lambda: a + b,
            P.Sub: lambda: a - b,
            P.Mul: lambda: a * b,
            P.FloorMod: lambda: _smod(a, b),
            P.FloorDiv: lambda: (a - _smod(a, b)) / b,
            P.Div: lambda: a / b,
            P.Mod: lambda: z3.SRem(a, b),
            P.Min: lambda: z3.If(a < b, a, b),
            P.Max: lambda: z3.If(a > b, a, b),
            P.BitwiseXor: lambda: a ^ b,
            P.BitwiseAnd: lambda: a & b,
            P.BitwiseOr: lambda: a | b,
            P.LShift: lambda: a << b,
            P.RShift: lambda: a >> b,
            P.EQ: lambda: a == b,
            P.NE: lambda: a != b,
            P.LT: lambda: a < b,
            P.LE: lambda: a <= b,
            P.GT: lambda: a > b,
            P.GE: lambda: a >= b,
        }
        if type(node) not in table:
            raise TypeError(f"cannot translate expression node {type(node).__name__}: {node}")
        return table[type(node)]()


def _smod(a, b):
    """Floor modulo (sign of the divisor, ``bvsmod``), as TIRx ``%``."""
    return a % b


class _Problem:
    """A solver plus fresh, domain-constrained Z3 copies of a set of input variables."""

    def __init__(self, width, variables, extents, timeout_ms):
        self.encoder = _Encoder(width)
        self.variables, self.extents = list(variables), [int(e) for e in extents]
        self.solver = z3.Solver()
        self.solver.set("timeout", int(timeout_ms))

    @classmethod
    def for_exprs(cls, exprs, variables, extents, timeout_ms):
        """A problem whose width fits ``exprs`` over the given domain."""
        return cls(_width_for(exprs, variables, extents), variables, extents, timeout_ms)

    def copy(self, tag: str):
        """Fresh Z3 variables for the inputs, constrained to the domain."""
        env, terms = {}, []
        for var, extent in zip(self.variables, self.extents):
            term = z3.BitVec(f"{var.name}{tag}", self.encoder.width)
            self.solver.add(term >= 0, term < extent)
            env[E.key(var)], terms = term, terms + [term]
        return env, terms

    def check(self):
        outcome = self.solver.check()
        if outcome == z3.unsat:
            return True, None
        if outcome == z3.sat:
            return False, self.solver.model()
        return None, None


def _width_for(exprs, variables, extents) -> int:
    ranges = {E.key(v): (0, int(n) - 1) for v, n in zip(variables, extents)}
    return _choose_width(exprs, ranges)


def _value(model, term) -> int:
    return model.eval(term, model_completion=True).as_signed_long()


def _require_static(layout: Layout, what: str) -> None:
    if not layout.is_static():
        raise ValueError(f"{what} needs a static shape, got {layout.get_input_shape()}")


def _check_method(method: str) -> None:
    if method not in ("z3", "enumerate"):
        raise ValueError(f"method must be 'z3' or 'enumerate', got {method!r}")


# ---------------------------------------------------------------------------------------
# collisions
# ---------------------------------------------------------------------------------------


def _collision_z3(exprs, variables, extents, timeout_ms):
    problem = _Problem.for_exprs(exprs, variables, extents, timeout_ms)
    env_a, xs = problem.copy("_a")
    env_b, ys = problem.copy("_b")
    encode = problem.encoder.encode
    outputs_a = [problem.encoder.bv(encode(e, env_a)) for e in exprs]
    outputs_b = [problem.encoder.bv(encode(e, env_b)) for e in exprs]
    problem.solver.add(z3.Or([x != y for x, y in zip(xs, ys)]))
    problem.solver.add(z3.And([p == q for p, q in zip(outputs_a, outputs_b)]))
    holds, model = problem.check()
    if model is None:
        return holds, None
    first = tuple(_value(model, x) for x in xs)
    second = tuple(_value(model, y) for y in ys)
    output = tuple(_value(model, o) for o in outputs_a)
    return False, (first, second, output)


def _collision_enum(exprs, variables, extents):
    points = E.grid(extents)
    values = np.stack(E.evaluate_all(exprs, variables, points), axis=1)
    order = np.lexsort(values.T[::-1])
    ordered = values[order]
    same = np.all(ordered[1:] == ordered[:-1], axis=1)
    if not same.any():
        return True, None
    hit = int(np.argmax(same))
    a, b = order[hit], order[hit + 1]
    first = tuple(int(p[a]) for p in points)
    second = tuple(int(p[b]) for p in points)
    return False, (first, second, tuple(int(v) for v in values[a]))


def _find_collision(exprs, variables, extents, method, timeout_ms):
    if method == "z3":
        return _collision_z3(exprs, variables, extents, timeout_ms)
    return _collision_enum(exprs, variables, extents)


def _out_of_box_z3(exprs, variables, extents, box, timeout_ms):
    problem = _Problem.for_exprs(exprs, variables, extents, timeout_ms)
    env, xs = problem.copy("")
    outs = [problem.encoder.bv(problem.encoder.encode(e, env)) for e in exprs]
    problem.solver.add(z3.Or([z3.Or(o < 0, o >= int(n)) for o, n in zip(outs, box)]))
    holds, model = problem.check()
    if model is None:
        return holds, None
    return False, (tuple(_value(model, x) for x in xs), tuple(_value(model, o) for o in outs))


def _out_of_box_enum(exprs, variables, extents, box):
    points = E.grid(extents)
    values = np.stack(E.evaluate_all(exprs, variables, points), axis=1)
    bad = np.any((values < 0) | (values >= np.asarray(box, dtype=np.int64)), axis=1)
    if not bad.any():
        return True, None
    at = int(np.argmax(bad))
    return False, (tuple(int(p[at]) for p in points), tuple(int(v) for v in values[at]))


def _unreached_slot(exprs, variables, extents, box):
    """One output box slot no input maps to (enumeration), or None when too large."""
    size = int(E.prod(box))
    if size > _ENUM_BOX_LIMIT or int(E.prod(extents)) > _ENUM_BOX_LIMIT:
        return None
    points = E.grid(extents)
    values = E.evaluate_all(exprs, variables, points)
    flat = np.ravel_multi_index(tuple(values), tuple(int(b) for b in box))
    hit = np.zeros(size, dtype=bool)
    hit[flat] = True
    missing = np.flatnonzero(~hit)
    if missing.size == 0:
        return None
    return tuple(int(c) for c in np.unravel_index(int(missing[0]), tuple(int(b) for b in box)))


# ---------------------------------------------------------------------------------------
# public provers
# ---------------------------------------------------------------------------------------


def prove_injective(
    layout: Layout, method: str = "z3", timeout_ms: int = _DEFAULT_TIMEOUT_MS
) -> ProofResult:
    """Prove no two logical indices of ``layout`` map to the same physical index."""
    _check_method(method)
    _require_static(layout, "prove_injective")
    exprs, variables = layout.get_forward_index(), layout._vars
    holds, witness = _find_collision(exprs, variables, layout.get_input_shape(), method, timeout_ms)
    if holds is None:
        return ProofResult(None, "injective", method, "solver gave up (timeout)")
    if holds:
        return ProofResult(True, "injective", method, "no two inputs share an output")
    first, second, output = witness
    return ProofResult(
        False,
        "injective",
        method,
        f"inputs {first} and {second} both map to {output}",
        {"inputs": [first, second], "output": output},
    )


def prove_bijective(
    layout: Layout, method: str = "z3", timeout_ms: int = _DEFAULT_TIMEOUT_MS
) -> ProofResult:
    """Prove ``layout`` is a bijection onto its output box ``[0, get_output_shape())``.

    Injective + every output inside the box + equal element counts (pigeonhole).
    """
    _check_method(method)
    _require_static(layout, "prove_bijective")
    box = [int(b) for b in layout.get_output_shape()]
    extents = layout.get_input_shape()
    stats = {"inputs": int(E.prod(extents)), "slots": int(E.prod(box))}
    injective = prove_injective(layout, method, timeout_ms)
    if injective.holds is not True:
        return ProofResult(
            injective.holds, "bijective", method, injective.message, injective.counterexample, stats
        )
    exprs, variables = layout.get_forward_index(), layout._vars
    if method == "z3":
        inside, witness = _out_of_box_z3(exprs, variables, extents, box, timeout_ms)
    else:
        inside, witness = _out_of_box_enum(exprs, variables, extents, box)
    if inside is None:
        return ProofResult(None, "bijective", method, "solver gave up (timeout)", None, stats)
    if not inside:
        point, output = witness
        return ProofResult(
            False,
            "bijective",
            method,
            f"input {point} maps to {output}, outside the output box {box}",
            {"input": point, "output": output},
            stats,
        )
    unused = stats["slots"] - stats["inputs"]
    stats["unused"] = unused
    if unused:
        slot = _unreached_slot(exprs, variables, extents, box)
        where = f"; e.g. {slot} is never reached" if slot is not None else ""
        return ProofResult(
            False,
            "bijective",
            method,
            f"injective but not surjective: {unused} of {stats['slots']} slots unused{where}",
            {"unreached": slot} if slot is not None else None,
            stats,
        )
    return ProofResult(True, "bijective", method, f"bijection onto {box}", None, stats)


def prove_fragment(
    fragment: Fragment,
    method: str = "z3",
    require_full: bool = False,
    timeout_ms: int = _DEFAULT_TIMEOUT_MS,
) -> ProofResult:
    """Prove every (thread, local) slot holds at most one (element, replica) pair.

    Equivalently, ``(element, rep) -> (thread, local)`` is injective, so each replica of
    each element has its own slot.  ``stats`` reports ``slots`` (thread_size x
    local_size), ``used`` (elements x replicate) and ``unused``; with ``require_full`` a
    fragment with unused slots is reported as failing.
    """
    _check_method(method)
    if not isinstance(fragment, Fragment):
        raise TypeError(f"fragment must be a Fragment, got {type(fragment).__name__}")
    combined = fragment.as_layout()
    threads, local = fragment.get_thread_size(), fragment.get_local_size()
    used = int(E.prod(fragment.get_input_shape())) * fragment.get_replicate()
    stats = {
        "thread_size": threads,
        "local_size": local,
        "replicate": fragment.get_replicate(),
        "slots": threads * local,
        "used": used,
        "unused": threads * local - used,
    }
    exprs, variables = combined.get_forward_index(), combined._vars
    extents = combined.get_input_shape()
    holds, witness = _find_collision(exprs, variables, extents, method, timeout_ms)
    if holds is None:
        return ProofResult(None, "fragment slots", method, "solver gave up (timeout)", None, stats)
    if not holds:
        first, second, output = witness
        slot = {"thread": output[-1], "local": output[:-1]}
        message = (
            f"element {first[:-1]} (rep {first[-1]}) and element {second[:-1]} "
            f"(rep {second[-1]}) share thread {output[-1]} local {output[:-1]}"
        )
        example = {"elements": [first, second], "slot": slot}
        return ProofResult(False, "fragment slots", method, message, example, stats)
    if stats["unused"] and require_full:
        return ProofResult(
            False,
            "fragment slots",
            method,
            f"{stats['unused']} of {stats['slots']} slots are unused",
            None,
            stats,
        )
    note = f"; {stats['unused']} slots unused" if stats["unused"] else "; all slots used"
    return ProofResult(
        True, "fragment slots", method, "each slot holds one element" + note, None, stats
    )


def prove_inverse(
    layout: Layout,
    inverse: Layout | None = None,
    method: str = "z3",
    both_ways: bool = True,
    timeout_ms: int = _DEFAULT_TIMEOUT_MS,
) -> ProofResult:
    """Prove ``inverse(layout(x)) == x`` for every ``x`` in the domain.

    With ``both_ways`` also prove ``layout(inverse(y)) == y`` for every ``y`` in the
    inverse's domain (the output box).  ``inverse`` defaults to ``layout.inverse()``.
    """
    _check_method(method)
    _require_static(layout, "prove_inverse")
    inverse = layout.inverse() if inverse is None else inverse
    if inverse.input_dim != layout.output_dim or inverse.output_dim != layout.input_dim:
        raise ValueError("inverse dimensions do not match the layout")
    checks = [(layout, inverse, "inverse(forward(x)) == x")]
    if both_ways:
        _require_static(inverse, "prove_inverse")
        checks.append((inverse, layout, "forward(inverse(y)) == y"))
    for first, second, what in checks:
        holds, witness = _round_trip(first, second, method, timeout_ms)
        if holds is None:
            return ProofResult(None, "inverse", method, f"{what}: solver gave up (timeout)")
        if not holds:
            point, middle, back = witness
            return ProofResult(
                False,
                "inverse",
                method,
                f"{what} fails at {point}: maps to {middle}, back to {back}",
                {"input": point, "image": middle, "round_trip": back},
            )
    return ProofResult(True, "inverse", method, "round trip is the identity")


def _round_trip(first: Layout, second: Layout, method: str, timeout_ms: int):
    """Search ``x`` with ``second(first(x)) != x`` or ``first(x)`` outside second's domain."""
    exprs1, vars1, extents = first.get_forward_index(), first._vars, first.get_input_shape()
    exprs2, vars2 = second.get_forward_index(), second._vars
    box = [int(b) for b in second.get_input_shape()]
    if method == "enumerate":
        points = E.grid(extents)
        middle = E.evaluate_all(exprs1, vars1, points)
        bad = np.zeros(len(points[0]), dtype=bool)
        for m, n in zip(middle, box):
            bad |= (m < 0) | (m >= n)
        safe = [np.where(bad, 0, m) for m in middle]
        back = E.evaluate_all(exprs2, vars2, safe)
        for b, p in zip(back, points):
            bad |= b != p
        if not bad.any():
            return True, None
        at = int(np.argmax(bad))
        pick = lambda arrays: tuple(int(a[at]) for a in arrays)  # noqa: E731
        return False, (pick(points), pick(middle), pick(back))
    width = max(_width_for(exprs1, vars1, extents), _width_for(exprs2, vars2, box))
    problem = _Problem(width, vars1, extents, timeout_ms)
    env, xs = problem.copy("")
    encode, bv = problem.encoder.encode, problem.encoder.bv
    middle = [bv(encode(e, env)) for e in exprs1]
    back = [bv(encode(e, {E.key(v): m for v, m in zip(vars2, middle)})) for e in exprs2]
    outside = [z3.Or(m < 0, m >= n) for m, n in zip(middle, box)]
    problem.solver.add(z3.Or(outside + [b != x for b, x in zip(back, xs)]))
    holds, model = problem.check()
    if model is None:
        return holds, None
    value = lambda terms: tuple(_value(model, t) for t in terms)  # noqa: E731
    return False, (value(xs), value(middle), value(back))


__all__ = [
    "ProofResult",
    "prove_bijective",
    "prove_fragment",
    "prove_injective",
    "prove_inverse",
]
