"""Python-style negative indices: ``A[-1]`` is ``A[n - 1]`` (upstream's LegalizeNegativeIndex).

:func:`legalize_negative_indices` (run on every traced kernel, before the bounds checks)
rewrites each element index that is negative for every value its variables take (a
negative constant, or ``-i - 1`` over a loop ``i`` with constant bounds) to ``index + n``,
``n`` the tensor's extent on that axis (symbolic for a dynamic shape). Indices that are only
sometimes negative are left alone (the bounds checks report what they can), as upstream does;
so are indices below ``-n`` on a static axis (the bounds check names them as written).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ..layout import expr as E


def _static(x):
    return E.as_const_int(x)


def _ranges(body) -> dict:
    """``key(var) -> (var, extent)`` of the loops from 0 and thread/block launches with
    constant extents in ``body``."""
    from ..lowering.stmt import launch_of

    found = {}

    def visit_for(loop):
        begin, end = _static(loop.begin), _static(loop.end)
        step = _static(loop.step) if loop.step is not None else 1
        if begin == 0 and end is not None and end > 0 and step == 1:
            found[E.key(loop.var)] = (loop.var, end)

    def visit_region(stmt):
        launch = launch_of(stmt)
        if launch is not None and _static(launch[1]) is not None and _static(launch[1]) > 0:
            found[E.key(launch[2])] = (launch[2], _static(launch[1]))

    tvm_ffi.structural_walk(body, [(ir.For, visit_for), (ir.RegionStmt, visit_region)])
    return found


def _range_of(index, ranges):
    """Inclusive ``(lo, hi)`` of an index over its variables' ranges, or None."""
    value = _static(index)
    if value is not None:
        return value, value
    if not isinstance(index, ir.Expr) or not ir.is_prim_expr(index):
        return None
    used = E.free_vars(index)
    if not used or any(E.key(v) not in ranges for v in used):
        return None
    try:
        lo, hi = E.bounds(index, [ranges[E.key(v)] for v in used])
    except (ValueError, TypeError):
        return None
    return (lo, hi) if isinstance(lo, int) and isinstance(hi, int) else None


def _legal(tensor, indices, ranges):
    shape = list(getattr(tensor.ty, "shape", []) or [])
    if len(shape) != len(indices):
        return None
    out, changed = [], False
    for index, extent in zip(indices, shape):
        bound = _range_of(index, ranges)
        n = _static(extent)
        # -n..-1 only: a further index stays as written, for the bounds check to name it
        if bound is not None and bound[1] < 0 and (n is None or bound[0] + n >= 0):
            if _static(index) is not None:
                index = ir.const(_static(index), str(index.ty))
            index = index + extent
            changed = True
        out.append(index)
    return out if changed else None


def legalize_negative_indices(func):
    """``func`` with every always-negative element index ``k`` on an axis of extent ``n``
    replaced by ``k + n`` (see the module docstring)."""
    ranges = _ranges(func.body)

    def load(x):
        new = _legal(x.source, list(x.indices), ranges)
        return x if new is None else ir.TensorLoad(x.source, new)

    def store(x):
        new = _legal(x.dest, list(x.indices), ranges)
        return x if new is None else ir.TensorStore(x.dest, new, x.value, loc=x.loc)

    body = tvm_ffi.structural_map(func.body, [(ir.TensorLoad, load), (ir.TensorStore, store)])
    return func if body.same_as(func.body) else func.with_body(body)
