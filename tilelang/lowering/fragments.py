"""Fragment helpers shared by layout inference and the op rules.

``project_fragment`` (a reduction result's fragment from its input's), ``default_fragment``
(a loop nest's fragment when nothing constrains it), ``replicated_fragment`` and
``same_threads`` (do two fragments place elements on the same threads), ``owner_guard``
(the threads a fragment spans, as a condition on the thread index).
"""

from __future__ import annotations

import math

from ..layout import Fragment, make_parallel_fragment
from ..layout import expr as E
from ..layout.fragment import _thread_splits


def project_fragment(frag: Fragment, keep: list[int], extra_shape=()) -> Fragment:
    """The fragment of a tensor indexed by the ``keep`` axes of ``frag``'s space.

    Each element ``y`` is held by every thread that holds some ``frag`` element whose
    kept coordinates are ``y`` (replicated over the dropped axes). ``extra_shape``
    appends free axes held whole by each of those threads (e.g. the K axis of a gemm
    A operand staged per row).
    """
    shape = frag.get_input_shape()
    fvars = frag._vars
    dropped = [a for a in range(len(shape)) if a not in keep]
    splits = _thread_splits(frag.thread, frag._thread_ranges())
    digits = []  # (var, lower, extent) that the thread uses from dropped axes / rep
    drop_keys = {E.key(fvars[a]) for a in dropped}
    for var, lower, extent in splits:
        if E.key(var) in drop_keys or E.key(var) == E.key(frag._rep):
            digits.append((var, lower, extent))
    replicate = 1
    for _, _, ext in digits:
        replicate *= ext
    new_shape = [shape[a] for a in keep] + list(extra_shape)

    def thread_fn(*args):
        ys = args[: len(keep)]
        rep = args[-1] if replicate > 1 else None
        mapping = {E.key(fvars[a]): y for a, y in zip(keep, ys)}
        for a in dropped:
            mapping[E.key(fvars[a])] = E.as_expr(0)
        mapping[E.key(frag._rep)] = E.as_expr(0)
        stride = 1
        for var, lower, ext in digits:
            d = (rep // stride) % ext if rep is not None else E.as_expr(0)
            k = E.key(var)
            mapping[k] = mapping[k] + d * lower if k in mapping else d * lower
            stride *= ext
        return E.substitute(frag.thread, mapping)

    return Fragment(new_shape, forward_thread_fn=thread_fn, replicate=replicate)


def _axis_fragment(shape, threads: int, vector: int) -> tuple[Fragment, int]:
    """A fragment whose thread is a sum of per-axis splits, and the threads it spans.

    From the innermost axis outwards, axis ``a`` (in units of ``vector`` elements on the
    last axis) gets ``gcd(units, threads left)`` threads, consecutive units on consecutive
    threads; the rest of each axis stays in the thread's registers.
    """
    left, parts, stride = threads, [], 1
    for axis in range(len(shape) - 1, -1, -1):
        unit = vector if axis == len(shape) - 1 else 1
        count = math.gcd(shape[axis] // unit, left)
        parts.append((axis, unit, count, stride))
        stride *= count
        left //= count

    def thread_fn(*idx):
        t = E.as_expr(0)
        for axis, unit, count, st in parts:
            if count > 1:
                t = t + ((idx[axis] // unit) % count) * st
        return t

    return Fragment(shape, forward_thread_fn=thread_fn), stride


def default_fragment(shape, threads: int, vector: int = 1) -> Fragment:
    """``make_parallel_fragment`` unless its thread fuses axes that cannot be split again.

    The flattened distribution (``(flat // vector) % threads``) is what upstream uses, but
    when a row length is not a multiple of ``threads * vector`` (softmax over N = 1000) the
    thread mixes row and column bits, so no fragment of a row-reduction result
    (``project_fragment``) exists. Then the threads are split per axis instead
    (:func:`_axis_fragment`), trying narrower vectors when that uses more threads.
    """
    shape = [int(s) for s in shape]
    frag = make_parallel_fragment(shape, threads, vector)
    try:
        _thread_splits(frag.thread, frag._thread_ranges())
        return frag
    except ValueError:
        pass
    best, best_span, v = None, 0, vector
    while v >= 1:
        if shape[-1] % v == 0:
            cand, span = _axis_fragment(shape, threads, v)
            if span > best_span:
                best, best_span = cand, span
        v //= 2
    return best


def replicated_fragment(shape, threads: int) -> Fragment:
    """Every thread holds every element."""
    n = int(E.prod(shape))

    def index(*idx):
        flat = E.as_expr(0)
        for v, e in zip(idx, shape):
            flat = flat * e + v
        return flat if n > 1 else E.as_expr(0)

    return Fragment(
        shape, forward_thread_fn=lambda *a: a[-1], replicate=threads, forward_index_fn=index
    )


def same_threads(a: Fragment, b: Fragment) -> bool:
    """True when ``a`` and ``b`` put every element on the same threads."""
    try:
        return a.is_equal(b, skip_index=True)
    except Exception:  # noqa: BLE001 - symbolic comparison failed: compare tables
        pass
    try:
        import numpy as np

        ta, tb = a.thread_table(), b.thread_table()
        return ta.shape == tb.shape and bool(np.all(np.sort(ta, 0) == np.sort(tb, 0)))
    except Exception:  # noqa: BLE001
        return False


def owner_threads(frag: Fragment):
    """The distinct threads holding elements of ``frag``, ascending, or None when its
    thread table cannot be built."""
    import numpy as np

    try:
        return np.unique(frag.thread_table())
    except Exception:  # noqa: BLE001 - not tabulable
        return None


def owner_span(frag: Fragment, owners=None):
    """``(first, last + 1)`` of the threads holding elements of ``frag`` (``owners``: its
    :func:`owner_threads`, when known), or None when its thread table cannot be built."""
    owners = owner_threads(frag) if owners is None else owners
    if owners is None:
        return None
    return int(owners[0]), int(owners[-1]) + 1


def owner_guard(frag: Fragment, thread_var, threads: int):
    """The condition ``lo <= t < hi`` under which thread ``t`` holds elements of ``frag``
    (the threads ``[lo, hi)`` it spans), or None when that is every thread of the block.

    A fragment may start at a later thread (one owned by a later warpgroup: thread
    ``128 + ...``); threads outside its span hold nothing, and the fragment's inverse map
    gives them coordinates outside the tile. Threads inside the span must all hold some
    element: a fragment with holes raises ValueError (callers name the op)."""
    owners = owner_threads(frag)
    if owners is None:  # not tabulable: the bounds of the thread expression
        lo, hi = 0, frag.get_thread_size()
    else:
        lo, hi = owner_span(frag, owners)
        if len(owners) != hi - lo:
            raise ValueError(
                f"the fragment {frag!r} holds elements on threads {lo}..{hi - 1} with gaps "
                f"({hi - lo - len(owners)} threads in between hold none)"
            )
    conds = []
    if lo > 0:
        conds.append(thread_var >= lo)
    if hi < threads:
        conds.append(thread_var < hi)
    if not conds:
        return None
    if len(conds) == 1:
        return conds[0]
    from tvm_tirx import tirx as _tirx

    return _tirx.all(*conds)


def within_owners(stmt, frag: Fragment, ctx, what: str, loc=None):
    """``stmt`` run only by the threads holding elements of ``frag`` (:func:`owner_guard`
    with the block's ``ctx.thread_var``/``ctx.threads``); a fragment whose threads have
    gaps is a CompileError naming ``what`` (the op and buffer) at ``loc``."""
    from tvm_tirx import ir

    from .. import errors

    try:
        cond = owner_guard(frag, ctx.thread_var, ctx.threads)
    except ValueError as err:
        raise errors.compile_error(f"{what}: {err}", loc) from None
    return stmt if cond is None else ir.If(cond, stmt, None)


def fragment_view(stmt):
    """``(view, base)`` when ``stmt`` binds a ``T.reshape``/``T.view`` of a fragment
    (``view = decl_tensor(base.data)``, both ``local.fragment``), else None."""
    from tvm_tirx import ir

    from .thread_utils import is_fragment

    if not isinstance(stmt, ir.Bind) or not is_fragment(stmt.var):
        return None
    value = stmt.value
    if not (isinstance(value, ir.Call) and value.op.name == "tirx.decl_tensor" and value.args):
        return None
    ptr = value.args[0]
    if isinstance(ptr, ir.Call) and ptr.op.name == "tirx.tensor_data_ptr" and ptr.args:
        ptr = ptr.args[0]
    if isinstance(ptr, ir.Var) and is_fragment(ptr):
        return stmt.var, ptr
    return None
