"""Small expression utilities shared by the layout algebra.

Everything here works on TIRx primitive expressions (``tvm_tirx.ir`` nodes):

* building and normalising index expressions (``as_expr``, ``fresh_vars``),
* simultaneous variable substitution (``substitute``, built on
  ``tvm_ffi.structural_map``, which is TIRx's substitute facility),
* analyzers with variable ranges bound (``make_analyzer``) and bound analysis that
  also understands bitwise operators (``bounds``),
* a vectorised numpy evaluator (``evaluate``) used for exhaustive checks.

Variables are keyed by their FFI handle (``Var.__chandle__()``): the Python wrapper of a
``Var`` is not unique and ``==`` on expressions builds an ``EQ`` node, so ``Var`` objects
must never be used as dictionary keys directly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import tvm_ffi
from tvm_tirx import ir, sym
from tvm_tirx.ir import IntImm, Range, Var
from tvm_tirx.ir import prim as P

INDEX_DTYPE = "int32"

_BITWISE = (P.BitwiseXor, P.BitwiseAnd, P.BitwiseOr)


def key(var: Var) -> int:
    """Identity key of a variable (its FFI handle)."""
    return var.__chandle__()


def is_expr(value) -> bool:
    """Whether ``value`` is a TIRx primitive expression."""
    return ir.is_prim_expr(value)


def as_expr(value, what: str = "value"):
    """Convert an int (or numpy integer) or PrimExpr to an int32 PrimExpr."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer or PrimExpr, got bool")
    if isinstance(value, int | np.integer):
        return ir.const(int(value), INDEX_DTYPE)
    if is_expr(value):
        return value
    raise TypeError(f"{what} must be an integer or PrimExpr, got {type(value).__name__}")


def as_const_int(value) -> int | None:
    """The Python int of a constant (int, numpy integer or IntImm), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, IntImm):
        return int(value.value)
    return None


def normalize_shape(shape, what: str = "shape") -> list:
    """Validate a shape: a sequence of positive ints or PrimExprs.

    Static extents are returned as Python ints, symbolic ones as PrimExprs.
    """
    if isinstance(shape, int | np.integer) or is_expr(shape):
        shape = [shape]
    try:
        dims = list(shape)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of extents, got {shape!r}") from None
    out = []
    for axis, dim in enumerate(dims):
        value = as_const_int(dim)
        if value is not None:
            if value <= 0:
                raise ValueError(f"{what}[{axis}] must be positive, got {value}")
            out.append(value)
        elif is_expr(dim):
            out.append(dim)
        else:
            raise TypeError(f"{what}[{axis}] must be an int or PrimExpr, got {type(dim).__name__}")
    return out


def is_static(shape: Sequence) -> bool:
    """Whether every extent of ``shape`` is a Python int."""
    return all(isinstance(d, int) for d in shape)


def prod(values: Iterable):
    """Product of ints / PrimExprs (ints stay ints)."""
    result = 1
    for v in values:
        result = result * v
    return result


_VAR_NAMES = "ijklmnopqrstuvwxyz"


def fresh_vars(count: int, prefix: str | None = None) -> list[Var]:
    """``count`` new int32 variables named i, j, k, ... (or prefix0, prefix1, ...)."""
    if prefix is None and count <= len(_VAR_NAMES):
        names = list(_VAR_NAMES[:count])
    else:
        names = [f"{prefix or 'i'}{n}" for n in range(count)]
    return [Var(name, INDEX_DTYPE) for name in names]


def substitute(expr, mapping: dict[int, object]):
    """Simultaneously replace variables in ``expr``; ``mapping`` is keyed by ``key(var)``."""
    if not mapping:
        return expr
    converted = {k: as_expr(v) for k, v in mapping.items()}

    def replace(var):
        return converted.get(key(var), var)

    return tvm_ffi.structural_map(expr, (Var, replace), order="post")


def replace_nodes(expr, node_type, fn):
    """Post-order rewrite of every node of ``node_type`` with ``fn(node)``."""
    return tvm_ffi.structural_map(expr, (node_type, fn), order="post")


def collect(expr, node_types) -> list:
    """All sub-expressions of the given node types (post order, duplicates kept)."""
    found = []

    def visit(node):
        found.append(node)
        return node

    tvm_ffi.structural_map(expr, (node_types, visit), order="post")
    return found


def collect_all(exprs, node_types) -> list:
    """``collect`` over several expressions."""
    found = []
    for expr in exprs:
        found.extend(collect(expr, node_types))
    return found


def free_vars(expr) -> list[Var]:
    """Distinct variables occurring in ``expr``."""
    seen = {}
    for var in collect(expr, Var):
        seen.setdefault(key(var), var)
    return list(seen.values())


def uses_var(expr, var: Var) -> bool:
    """Whether ``var`` occurs in ``expr``."""
    target = key(var)
    return any(key(v) == target for v in collect(expr, Var))


def make_analyzer(ranges: Sequence[tuple[Var, object]]) -> sym.Analyzer:
    """An Analyzer with each ``var`` bound to ``[0, extent)``."""
    analyzer = sym.Analyzer()
    if ranges:
        context = sym.ConstraintContext()
        for var, extent in ranges:
            context.append(sym.RangeConstraint(var, Range(0, as_expr(extent))))
        analyzer.sync_constraint_context(context)
    return analyzer


def simplify(expr, ranges: Sequence[tuple[Var, object]] = (), analyzer=None):
    """Simplify ``expr`` under the given variable ranges."""
    if analyzer is None:
        analyzer = make_analyzer(ranges)
    return analyzer.simplify(as_expr(expr))


def _bitwise_bound(node, lo_a, hi_a, lo_b, hi_b):
    if min(lo_a, lo_b) < 0:
        return None
    if isinstance(node, P.BitwiseAnd):
        return 0, min(hi_a, hi_b)
    top = (1 << max(int(hi_a).bit_length(), int(hi_b).bit_length())) - 1
    if isinstance(node, P.BitwiseOr):
        return max(lo_a, lo_b), top
    return 0, top


def bounds(expr, ranges: Sequence[tuple[Var, object]]) -> tuple[object, object]:
    """Inclusive ``(min, max)`` of ``expr`` for variables ranging over ``[0, extent)``.

    Constant results are Python ints; symbolic results are PrimExprs.  Bitwise
    and/or/xor sub-terms (which the TIRx bound analysis does not model) are replaced by
    fresh variables bound to a sound range before asking the analyzer.
    Raises ValueError when no finite bound can be derived.
    """
    expr = as_expr(expr)
    context = sym.ConstraintContext()
    for var, extent in ranges:
        context.append(sym.RangeConstraint(var, Range(0, as_expr(extent))))
    analyzer = sym.Analyzer()
    analyzer.sync_constraint_context(context)

    def const_bound(e):
        b = analyzer.const_int_bound(e)
        if b.min_value <= sym.ConstIntBound.NEG_INF or b.max_value >= sym.ConstIntBound.POS_INF:
            return None
        return int(b.min_value), int(b.max_value)

    counter = [0]

    def abstract(node):
        ba, bb = const_bound(node.a), const_bound(node.b)
        if ba is None or bb is None:
            return node
        rng = _bitwise_bound(node, *ba, *bb)
        if rng is None:
            return node
        counter[0] += 1
        fresh = Var(f"_bw{counter[0]}", INDEX_DTYPE)
        context.append(sym.RangeConstraint(fresh, Range(rng[0], rng[1] + 1)))
        analyzer.sync_constraint_context(context)
        return fresh

    if collect(expr, _BITWISE):
        expr = replace_nodes(expr, _BITWISE, abstract)
    if all(as_const_int(extent) is not None for _, extent in ranges):
        cb = const_bound(expr)
        if cb is not None:
            return cb
    interval = analyzer.int_set(expr)
    lo, hi = interval.min_value, interval.max_value
    if _is_inf(lo) or _is_inf(hi):
        raise ValueError(f"cannot bound expression {expr}")
    lo, hi = analyzer.simplify(lo), analyzer.simplify(hi)
    return _maybe_int(lo), _maybe_int(hi)


def _is_inf(value) -> bool:
    text = str(value)
    return text in ("pos_inf", "neg_inf") or "inf" in type(value).__name__.lower()


def _maybe_int(value):
    c = as_const_int(value)
    return value if c is None else c


def same_expr(a, b) -> bool:
    """Structural equality of two expressions (variables compared by identity)."""
    return bool(tvm_ffi.structural_equal(as_expr(a), as_expr(b), map_free_vars=False))


# ---------------------------------------------------------------------------------------
# numpy evaluation
# ---------------------------------------------------------------------------------------


def _floordiv(a, b):
    return np.floor_divide(a, b)


def _truncdiv(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) < 0) ^ (np.asarray(b) < 0), -q, q)


_BINARY = {
    P.Add: np.add,
    P.Sub: np.subtract,
    P.Mul: np.multiply,
    P.FloorDiv: _floordiv,
    P.FloorMod: np.mod,
    P.Div: _truncdiv,
    P.Mod: lambda a, b: a - _truncdiv(a, b) * b,
    P.Min: np.minimum,
    P.Max: np.maximum,
    P.BitwiseXor: np.bitwise_xor,
    P.BitwiseAnd: np.bitwise_and,
    P.BitwiseOr: np.bitwise_or,
    P.LShift: np.left_shift,
    P.RShift: np.right_shift,
    P.EQ: np.equal,
    P.NE: np.not_equal,
    P.LT: np.less,
    P.LE: np.less_equal,
    P.GT: np.greater,
    P.GE: np.greater_equal,
    P.And: np.logical_and,
    P.Or: np.logical_or,
}


def evaluate(expr, env: dict[int, np.ndarray]) -> np.ndarray:
    """Evaluate ``expr`` with numpy; ``env`` maps ``key(var)`` to integer arrays.

    All arithmetic is done in int64 with TIRx semantics (floor division for ``//``/``%``).
    """
    memo: dict[int, np.ndarray] = {}

    def run(node):
        handle = node.__chandle__()
        if handle in memo:
            return memo[handle]
        if isinstance(node, IntImm):
            value = np.int64(node.value)
        elif isinstance(node, Var):
            try:
                value = env[key(node)]
            except KeyError:
                raise ValueError(f"free variable {node.name} has no value") from None
        elif type(node) in _BINARY:
            value = _BINARY[type(node)](run(node.a), run(node.b))
        elif isinstance(node, P.Not):
            value = np.logical_not(run(node.a))
        elif isinstance(node, P.BitwiseNot):
            value = np.invert(run(node.a))
        elif isinstance(node, P.Cast):
            value = run(node.value)
        elif isinstance(node, P.Select):
            value = np.where(run(node.condition), run(node.true_value), run(node.false_value))
        elif isinstance(node, ir.Call) and getattr(node.op, "name", "") == "prim.if_then_else":
            cond, then, other = node.args
            value = np.where(run(cond), run(then), run(other))
        else:
            raise TypeError(f"cannot evaluate expression node {type(node).__name__}: {node}")
        memo[handle] = value
        return value

    return np.asarray(run(as_expr(expr)), dtype=np.int64)


def grid(shape: Sequence[int]) -> list[np.ndarray]:
    """Flattened coordinate arrays enumerating ``shape`` in row-major order."""
    if not shape:
        return []
    axes = np.indices(tuple(int(s) for s in shape), dtype=np.int64)
    return [a.reshape(-1) for a in axes]


def evaluate_all(exprs: Sequence, variables: Sequence[Var], points: Sequence[np.ndarray]):
    """Evaluate each expr at every point (column arrays aligned with ``variables``)."""
    env = {key(v): p for v, p in zip(variables, points)}
    size = len(points[0]) if points else 1
    return [np.broadcast_to(evaluate(e, env), (size,)) for e in exprs]


def bit_length_needed(max_abs: int) -> int:
    """Bits of a signed two's-complement integer able to hold ``+-max_abs``."""
    return max(int(max_abs).bit_length() + 1, 2)


def ceil_log2(value: int) -> int:
    """Smallest ``k`` with ``2**k >= value``."""
    return max(0, math.ceil(math.log2(value))) if value > 1 else 0
