"""Fragment regions: which of a thread's registers a region ``f[b0:b0+e0, ...]`` covers.

A fragment's lowering loops over each thread's local slots; the fragment layout's inverse
(``thread_utils.fragment_points``) gives the logical indices every slot holds. A tile op on
a *part* of a fragment must touch only the slots whose logical indices fall in the region:
:func:`region_predicate` is that condition (None when the region is the whole fragment), and
:func:`region_offsets` the slot's offsets inside the region, for indexing the other operand.
Begins may be symbolic (``f[i0:i0 + 16, :]`` with ``i0`` a loop variable); the predicate is
then evaluated at run time, per register.
"""

from __future__ import annotations

from tvm_tirx import tirx as _tirx

from ..layout import expr as E


def is_whole(view) -> bool:
    """Whether the region ``view`` (a ``RegionView``) covers its whole tensor."""
    shape = [E.as_const_int(d) for d in view.shape]
    return (
        all(E.as_const_int(b) == 0 for b in view.begins)
        and [E.as_const_int(e) for e in view.extents] == shape
        and None not in shape
    )


def region_predicate(view, points, simplify):
    """The condition that logical ``points`` (one index per axis of ``view``'s tensor) lie
    inside the region ``view``; None when it always holds (a whole fragment)."""
    if is_whole(view):
        return None
    conds = []
    for p, b, e, d in zip(points, view.begins, view.extents, view.shape):
        cb, ce, cd = E.as_const_int(b), E.as_const_int(e), E.as_const_int(d)
        if cb == 0 and ce is not None and ce == cd:
            continue  # the whole axis
        for cond in (b <= p, p < b + e):
            cond = simplify(cond)
            if E.as_const_int(cond) == 1:
                continue
            conds.append(cond)
    if not conds:
        return None
    return conds[0] if len(conds) == 1 else _tirx.all(*conds)


def region_offsets(view, points, axes):
    """``{axis: offset inside the region}`` of logical ``points`` for the given axes."""
    return {a: points[a] - view.begins[a] for a in axes}
