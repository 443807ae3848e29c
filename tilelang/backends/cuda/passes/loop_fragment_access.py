"""Fragment accesses of a ``T.Parallel`` nest that its layout must honour (CUDA layout inference).

A nest's layout runs each iteration on some threads; a fragment access ``F[idx]`` in it
reads or writes the registers of those threads, so they must own ``F[idx(x)]``. Layout
inference builds the loop layout so that this holds for accesses in the loop's own axis
order (``F[i, j]``, ``F[i]``); this module covers the rest:

- :func:`accumulations`: stores ``F[idx] = f(F[idx], ...)`` whose index leaves out a loop
  axis (``acc[d] += X[j, d]`` over ``j, d``): every iteration of that axis updates the same
  element, so all of them must run on the thread(s) holding it, one after another.
  :func:`accumulating_layout` is such a loop layout (upstream gives these loops one).
- :func:`check_nest`: after inference, every fragment access is owned by the threads that
  run it (permuted or computed indices included, checked point by point), and every
  accumulation runs its left-out axes on one thread; otherwise a CompileError at the loop's
  line (the lowering would read or update other threads' registers: a silently wrong
  result).
"""

from __future__ import annotations

import numpy as np
import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....layout import Fragment
from ....layout import expr as E
from ....lowering.thread_utils import is_fragment

#: Nests with more (iteration x replica) points than this are not checked point by point.
_CHECK_LIMIT = 1 << 21


def _axes_of(idx, nest):
    """For each index, the position of the nest variable it is, or None if one is not."""
    out = []
    for i in idx:
        pos = [k for k, v in enumerate(nest.vars) if isinstance(i, ir.Var) and i.same_as(v)]
        if not pos or pos[0] in out:
            return None
        out.append(pos[0])
    return out


def accumulations(nest) -> list:
    """``(tensor, indices, kept axes)`` of each fragment store ``F[idx] = f(F[idx], ...)``
    in ``nest`` whose plain-variable index leaves out a loop axis of extent > 1."""
    found = []

    def visit(store):
        if not is_fragment(store.dest):
            return
        keep = _axes_of(store.indices, nest)
        if keep is None:
            return
        dropped = [a for a in range(len(nest.vars)) if a not in keep and nest.extents[a] > 1]
        if not dropped:
            return
        reads = E.collect(store.value, ir.TensorLoad)
        same = [
            r
            for r in reads
            if r.source.same_as(store.dest)
            and len(r.indices) == len(store.indices)
            and all(E.same_expr(a, b) for a, b in zip(r.indices, store.indices))
        ]
        if same:
            found.append((store.dest, list(store.indices), keep))

    tvm_ffi.structural_walk(nest.body, [(ir.TensorStore, visit)])
    return found


def accumulating_layout(frag: Fragment, keep, extents) -> Fragment:
    """A layout of a nest over ``extents`` running iteration ``x`` on the threads holding
    ``frag[x[keep]]``: the axes left out of ``keep`` stay in each thread's registers."""
    fvars, rep = frag._vars, frag._rep
    replicate = frag.get_replicate()

    def thread_fn(*args):
        mapping = {E.key(fvars[k]): args[a] for k, a in enumerate(keep)}
        if replicate > 1:
            mapping[E.key(rep)] = args[-1]
        return E.substitute(frag.thread, mapping)

    return Fragment([int(e) for e in extents], forward_thread_fn=thread_fn, replicate=replicate)


def first_loc(body):
    """The source location of the first statement in ``body`` that has one."""
    locs = []

    def visit(stmt):
        if getattr(stmt, "loc", None) is not None:
            locs.append(stmt.loc)

    tvm_ffi.structural_walk(body, [(ir.TensorStore, visit), (ir.Evaluate, visit)])
    return locs[0] if locs else None


def check_nest(nest, loop: Fragment, layout_of) -> None:
    """Raise a CompileError (at the nest's line) when ``loop`` runs a fragment access of
    ``nest`` on a thread that does not own the element, or spreads an accumulation's
    left-out axes over threads (see the module docstring). ``layout_of(var)`` is the
    inferred fragment of a tensor. Accesses whose indices use variables other than the
    nest's, and nests too large to enumerate, are not checked."""
    total = int(np.prod(nest.extents, dtype=np.int64)) * loop.get_replicate()
    if total > _CHECK_LIMIT:
        return
    ltab = loop.thread_table().reshape(loop.get_replicate(), -1)  # (rep, points)
    points = E.grid(nest.extents)
    env = {E.key(v): p for v, p in zip(nest.vars, points)}
    nest_keys = {E.key(v) for v in nest.vars}
    loc = nest.loc
    for tensor, idx, keep in accumulations(nest):
        dropped = [a for a in range(len(nest.vars)) if a not in keep]
        full = np.sort(loop.thread_table(), axis=0)  # (rep, *extents)
        moved = np.moveaxis(full, [1 + a for a in dropped], list(range(1, 1 + len(dropped))))
        flat = moved.reshape(moved.shape[0], -1, int(np.prod(moved.shape[1 + len(dropped) :])))
        if not np.all(flat == flat[:, :1, :]):
            names = ", ".join(nest.vars[a].name for a in dropped)
            raise errors.compile_error(
                f"T.Parallel loop accumulates into {tensor.name}"
                f"[{', '.join(str(i) for i in idx)}] over {names} (not an index of "
                f"{tensor.name}), but its layout {loop!r} runs those iterations on different "
                f"threads, so each would update its own copy. Reduce with T.reduce_sum/"
                f"T.reduce_max, or loop over {names} with T.serial inside the T.Parallel loop",
                loc,
            )
    for tensor, idx, is_store in nest.accesses:
        if not is_fragment(tensor):
            continue
        keep = _axes_of(idx, nest)
        if keep is not None and keep == sorted(keep):
            continue  # checked by layout inference (same_threads of the projection)
        used = {E.key(v) for e in idx for v in E.free_vars(E.as_expr(e))}
        if not used <= nest_keys:
            continue
        frag = layout_of(tensor)
        if frag is None:
            continue
        try:
            coords = [np.broadcast_to(E.evaluate(e, env), points[0].shape) for e in idx]
        except (TypeError, ValueError):
            continue
        shape = [int(s) for s in tensor.ty.shape]
        if any(c.min() < 0 or c.max() >= s for c, s in zip(coords, shape)):
            continue  # out of bounds: reported by the bounds checks, not here
        ftab = frag.thread_table()  # (frep, *shape)
        owners = ftab[(slice(None), *coords)]  # (frep, points)
        owned = np.zeros(ltab.shape, dtype=bool)
        for r in range(owners.shape[0]):
            owned |= ltab == owners[r][None, :]
        bad = np.flatnonzero(~owned.all(axis=0))
        if is_store and not bad.size:
            # a store must reach every replica of the element, or the copies diverge
            covered = np.zeros(owners.shape, dtype=bool)
            for r in range(ltab.shape[0]):
                covered |= owners == ltab[r][None, :]
            bad = np.flatnonzero(~covered.all(axis=0))
        if bad.size:
            p = int(bad[0])
            at = ", ".join(f"{v.name}={int(c[p])}" for v, c in zip(nest.vars, points))
            elem = ", ".join(str(int(c[p])) for c in coords)
            raise errors.compile_error(
                f"T.Parallel loop {'writes' if is_store else 'reads'} "
                f"{tensor.name}[{', '.join(str(i) for i in idx)}] on threads that do not hold "
                f"it: at {at} the loop runs on thread(s) {sorted(set(ltab[:, p].tolist()))} "
                f"but {tensor.name}[{elem}] lives on thread(s) "
                f"{sorted(set(owners[:, p].tolist()))} (loop layout {loop!r}, {tensor.name} "
                f"{frag!r}). Fragments are registers: stage the data through a shared "
                f"buffer (T.copy the fragment to T.alloc_shared, then index that)",
                loc,
            )
