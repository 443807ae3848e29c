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
from tvm_tirx.ir.prim import expr as P

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


def inner_loops(nest) -> dict:
    """``key(var) -> (var, begin, extent)`` of the loops with constant bounds nested in
    ``nest``'s body (``for k in T.serial(N)`` inside a ``T.Parallel`` loop)."""
    found = {}

    def visit(loop):
        begin, end = E.as_const_int(loop.begin), E.as_const_int(loop.end)
        if begin is not None and end is not None and end > begin:
            found[E.key(loop.var)] = (loop.var, begin, end - begin)

    tvm_ffi.structural_walk(nest.body, [(ir.For, visit)])
    return found


def spread_positions(idx, nest, inner):
    """For ``F[idx]`` whose indices are each a distinct nest variable or a variable of an
    inner loop (``inner``, :func:`inner_loops`), naming every nest variable once: the
    position in ``idx`` of each nest axis; else None (``f[j, i]``, ``f[i, k]``)."""
    pos, seen = [None] * len(nest.vars), set()
    for n, i in enumerate(idx):
        if not isinstance(i, ir.Var) or E.key(i) in seen:
            return None
        seen.add(E.key(i))
        hit = [a for a, v in enumerate(nest.vars) if i.same_as(v)]
        if hit:
            pos[hit[0]] = n
        elif E.key(i) not in inner:
            return None
    return pos if all(p is not None for p in pos) else None


def coarse_axes(idx, nest):
    """For ``F[idx]`` whose indices are, in the nest's axis order, each a nest variable or
    a nest variable floor-divided by a positive constant (``B_local[i, j // 2]``: packed
    elements read by several iterations), naming every nest variable once: the constant
    of each nest axis (1 for a plain variable); else None."""
    if len(idx) != len(nest.vars):
        return None
    factors = []
    for i, var in zip(idx, nest.vars):
        factor = 1
        if isinstance(i, P.FloorDiv):
            factor = E.as_const_int(i.b)
            i = i.a
        if not isinstance(i, ir.Var) or not i.same_as(var) or not factor or factor < 1:
            return None
        factors.append(factor)
    return factors


def coarse_layout(loop: Fragment, factors, shape) -> Fragment:
    """The layout of a fragment of ``shape`` read as ``F[x // factors]`` by a nest of
    layout ``loop``: element ``c`` on the threads running iteration ``c * factors`` (the
    iterations reading the same element must share those threads: :func:`check_nest`)."""
    fvars, rep = loop._vars, loop._rep
    replicate = loop.get_replicate()

    def thread_fn(*args):
        mapping = {E.key(v): args[a] * f for a, (v, f) in enumerate(zip(fvars, factors))}
        if replicate > 1:
            mapping[E.key(rep)] = args[-1]
        return E.substitute(loop.thread, mapping)

    return Fragment([int(e) for e in shape], forward_thread_fn=thread_fn, replicate=replicate)


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
    ltab_nest = loop.thread_table().reshape(loop.get_replicate(), -1)  # (rep, nest points)
    nest_keys = {E.key(v) for v in nest.vars}
    inner = inner_loops(nest)
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
        if not used <= nest_keys | set(inner):
            continue
        frag = layout_of(tensor)
        if frag is None:
            continue
        # the nest's points, times the values of the inner loop variables the index uses
        loops = [inner[k] for k in sorted(used - nest_keys)]
        extents = list(nest.extents) + [ext for _, _, ext in loops]
        if int(np.prod(extents, dtype=np.int64)) * loop.get_replicate() > _CHECK_LIMIT:
            continue
        points = E.grid(extents)
        env = {E.key(v): p for v, p in zip(nest.vars, points)}
        for (var, begin, _), p in zip(loops, points[len(nest.vars) :]):
            env[E.key(var)] = p + begin
        flat = np.ravel_multi_index(points[: len(nest.vars)], nest.extents)
        ltab = ltab_nest[:, flat]
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
            names = list(nest.vars) + [var for var, _, _ in loops]
            at = ", ".join(f"{v.name}={int(env[E.key(v)][p])}" for v in names)
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


def check_serial_accesses(body, nests, layout_of, threads: int, is_tile_op) -> None:
    """Raise a CompileError when code outside the ``T.Parallel`` nests and tile ops (which
    every thread of the block runs) reads or writes a fragment element that not every
    thread holds: each thread would use whatever its register at that slot holds (another
    element's value, or nothing), a silently wrong result (e.g. ``O[0] = r[0]`` after a
    reduce whose rows live on different threads). Statements under an ``if`` on the thread
    index are left alone; an index that is not constant stands for the whole fragment."""
    roots = {n.root.__chandle__() for n in nests}
    launches = []

    def walk(stmt, guarded):
        if isinstance(stmt, ir.SeqStmt):
            for s in stmt.seq:
                walk(s, guarded)
            return
        if isinstance(stmt, ir.For):
            if stmt.__chandle__() in roots:
                return
            walk(stmt.body, guarded)
            return
        if isinstance(stmt, ir.RegionStmt):
            if stmt.body_params is not None:
                launches.extend(stmt.body_params)
            walk(stmt.body, guarded)
            return
        if isinstance(stmt, ir.If):
            if not guarded:
                _check(stmt.condition, stmt, False)
            inner = guarded or any(
                E.key(v) in {E.key(x) for x in launches} for v in E.free_vars(stmt.condition)
            )
            walk(stmt.then_case, inner)
            if stmt.else_case is not None:
                walk(stmt.else_case, inner)
            return
        if isinstance(stmt, ir.While):
            if not guarded:
                _check(stmt.condition, stmt, False)
            walk(stmt.body, guarded)
            return
        if guarded or (isinstance(stmt, ir.Evaluate) and is_tile_op(stmt)):
            return
        if isinstance(stmt, ir.TensorStore | ir.Bind | ir.Evaluate):
            _check(stmt, stmt, True)

    def _check(node, stmt, is_stmt):
        accesses = []

        def load(x):
            if is_fragment(x.source):
                accesses.append((x.source, list(x.indices), "read"))

        def store(x):
            if is_fragment(x.dest):
                accesses.append((x.dest, list(x.indices), "written"))

        tvm_ffi.structural_walk(node, [(ir.TensorLoad, load), (ir.TensorStore, store)])
        for tensor, idx, verb in accesses:
            frag = layout_of(tensor)
            if not isinstance(frag, Fragment):
                continue
            table = frag.thread_table()  # (rep, *shape)
            consts = [E.as_const_int(i) for i in idx]
            if all(c is not None for c in consts):
                shape = [int(s) for s in tensor.ty.shape]
                if any(c < 0 or c >= s for c, s in zip(consts, shape)):
                    continue  # out of bounds: the bounds checks report it
                holders = table[(slice(None), *consts)].reshape(-1)
            else:
                holders = table.reshape(table.shape[0], -1)
                # every element must be on every thread
                held = all(len(set(col.tolist())) >= threads for col in holders.T)
                holders = None if held else holders[:, 0]
            if holders is None or len(set(holders.tolist())) >= threads:
                continue
            owned = sorted(set(holders.tolist()))
            span = f"{owned[0]}..{owned[-1]}" if len(owned) > 4 else str(owned)
            raise errors.compile_error(
                f"{tensor.name}[{', '.join(str(i) for i in idx)}] is {verb} outside a "
                f"T.Parallel loop, so all {threads} threads run it, but the layout of "
                f"{tensor.name} {frag!r} puts that element on threads {span} only; the "
                f"others would use another element's register. Access it inside "
                f"`for i in T.Parallel(...)` (or T.copy the fragment to shared/global memory)",
                getattr(stmt, "loc", None),
            )

    walk(body, False)
