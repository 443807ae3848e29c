"""The threads an ``if`` on the thread index keeps, as one contiguous range.

Upstream TileLang re-plans a tile op (``T.copy``/``T.fill``/``T.clear``/``T.Parallel``)
under ``if tx < 128:`` (``tx >= 128``, ``lo <= tx < hi``, warp-specialization style
branches) over the threads the condition keeps. :func:`guarded_range` finds them: the
analyzer bounds the thread index under the conditions (``const_int_bound``), then proves
that every thread of that bound satisfies them, so the kept threads are exactly
``[lo, hi)``. Conditions that keep a non-contiguous set (``tx % 2 == 0``, ``tx < 32 or
tx >= 96``) or depend on run-time values (``tx < n``) give None: callers refuse them.

:func:`split_uniform` separates the conjuncts of a condition that do not read the thread
index (the same for every thread of the block): they stay an ordinary ``if``.
"""

from __future__ import annotations

from tvm_tirx import ir, sym
from tvm_tirx import tirx as _tirx

from .stmt import uses_any
from .thread_utils import collect_vars


def conjuncts(cond) -> list:
    """The operands of a chain of ``and`` (``[cond]`` for anything else)."""
    if isinstance(cond, _tirx.And):
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def split_uniform(cond, thread_vars):
    """``(thread part, uniform part)`` of ``cond``'s conjuncts, each an expression or None."""
    on_threads = [c for c in conjuncts(cond) if uses_any(c, thread_vars)]
    uniform = [c for c in conjuncts(cond) if not uses_any(c, thread_vars)]

    def join(parts):
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else _tirx.all(*parts)

    return join(on_threads), join(uniform)


def negate(cond):
    """``not cond``."""
    return _tirx.Not(cond)


def guarded_range(conditions, thread_var, threads: int):
    """``(lo, hi)`` when the threads ``t`` in ``[0, threads)`` satisfying every condition of
    ``conditions`` (expressions over ``thread_var`` and constants) are exactly
    ``lo <= t < hi`` with ``lo < hi``, proven by the analyzer; else None (a set with
    holes, an empty one, or one that depends on other values)."""
    conditions = list(conditions)
    if not conditions:
        return 0, threads
    for cond in conditions:  # other variables: the kept threads are not known here
        others = collect_vars(cond, lambda v: not v.same_as(thread_var))
        if others or not uses_any(cond, [thread_var]):
            return None
    block = ir.Range.from_min_extent(0, threads)
    ctx = sym.ConstraintContext()
    ctx.append(sym.RangeConstraint(thread_var, block))
    for cond in conditions:
        ctx.append(sym.PredicateConstraint(cond))
    analyzer = sym.Analyzer()
    analyzer.sync_constraint_context(ctx)
    bound = analyzer.const_int_bound(thread_var)
    lo, hi = max(0, int(bound.min_value)), min(threads, int(bound.max_value) + 1)
    if lo >= hi:
        return None
    inside = sym.ConstraintContext()  # every thread of [lo, hi) passes: no holes
    inside.append(sym.RangeConstraint(thread_var, ir.Range.from_min_extent(lo, hi - lo)))
    prover = sym.Analyzer()
    prover.sync_constraint_context(inside)
    every = conditions[0] if len(conditions) == 1 else _tirx.all(*conditions)
    if not prover.can_prove(every):
        return None
    return lo, hi


def shift_threads(frag, lo: int):
    """``frag`` on threads ``lo + t`` (its elements, registers and replicas unchanged)."""
    if lo == 0:
        return frag
    from ..layout import Fragment

    return Fragment.from_parts(
        frag.get_input_shape(),
        frag.get_forward_vars(),
        frag.get_forward_index(),
        frag.get_forward_thread() + lo,
        frag.get_replicate(),
        frag.get_replicate_var(),
    )
