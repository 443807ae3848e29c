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
    """The operands of a chain of ``and`` (``[cond]`` for anything else); ``a & b`` of two
    booleans (``T.ws``'s condition) is an ``and`` too."""
    if isinstance(cond, _tirx.And) or (
        isinstance(cond, _tirx.BitwiseAnd) and str(cond.ty.dtype) == "bool"
    ):
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
    conditions = [c for cond in conditions for c in conjuncts(cond)]
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

    rep = frag.get_replicate_var()  # listed first among the forward vars when replicated
    return Fragment.from_parts(
        frag.get_input_shape(),
        [v for v in frag.get_forward_vars() if rep is None or not v.same_as(rep)],
        frag.get_forward_index(),
        frag.get_forward_thread() + lo,
        frag.get_replicate(),
        frag.get_replicate_var(),
    )


def relative_layouts(layout_map: dict, lo: int) -> dict:
    """``layout_map`` as seen from threads ``t - lo``: every fragment moved down by ``lo``
    (shared/global layouts unchanged)."""
    from ..layout import Fragment

    return {
        var: shift_threads(layout, -lo) if isinstance(layout, Fragment) else layout
        for var, layout in layout_map.items()
    }


def absolute_layouts(found: dict, lo: int) -> dict:
    """The layouts a rule chose for threads ``t - lo`` (:func:`relative_layouts`), on the
    block's threads ``t``."""
    from ..layout import Fragment

    return {
        var: shift_threads(layout, lo) if isinstance(layout, Fragment) else layout
        for var, layout in found.items()
    }


def range_context(ctx, lo: int, hi: int):
    """``(inner, t_rel)``: a copy of the lowering context ``ctx`` (a ``CudaLowerContext``) for
    a block of ``hi - lo`` threads whose thread index is the fresh variable ``t_rel``, with
    the fragments of its layout map on those threads (:func:`relative_layouts`). Code a rule
    emits in ``inner`` runs on the block's threads once ``t_rel`` is replaced by ``t - lo``
    (:func:`lower_over_range`)."""
    import dataclasses

    t_rel = ir.Var(f"{ctx.thread_var.name}_rel", ctx.thread_var.ty)
    ranges = dict(ctx.ranges)
    ranges[t_rel] = (0, hi - lo)
    inner = dataclasses.replace(
        ctx,
        ranges=ranges,
        threads=hi - lo,
        _analyzer=None,
        thread_var=t_rel,
        layout_map=relative_layouts(ctx.layout_map, lo),
        thread_range=None,
    )
    for name in ("thread_guarded", "prefer_mma"):
        if hasattr(ctx, name):
            setattr(inner, name, getattr(ctx, name))
    inner.range_offset = lo  # rules that need aligned ranges check it (gemm: whole warps)
    return inner, t_rel


def lower_over_range(rule, view, ctx, lo: int, hi: int):
    """The statement ``rule(view, ...)`` lowers a block-wide tile op (gemm, reduce) to, planned
    over the ``hi - lo`` threads ``[lo, hi)``: the rule sees a block of that many threads
    (warp and warpgroup indices of ``t - lo``, fragments laid on those threads)."""
    from .stmt import substitute

    inner, t_rel = range_context(ctx, lo, hi)
    out = rule(view, inner)
    if out is None:
        return None
    return substitute(out, {t_rel: ctx.thread_var - lo})
