"""Give every thread its own copy of per-thread state before threads become CPU loops.

On a GPU each thread has its own ``T.alloc_local``/``T.alloc_var`` registers and
its own values of ``v = A[tx]``. ``lower_threads`` runs a block's thread-dependent
statements in loops over the threads, and everything else once per block; state
that differs between threads must then live in one slot per thread:

- a local/var tensor written by a statement that depends on the thread index
  (directly, or through other per-thread state) gets a leading thread dimension,
  indexed by the flattened thread index everywhere;
- a thread-dependent ``v = ...`` that is read by another statement becomes a store
  into, and loads from, a one-slot-per-thread local tensor (its value must survive
  from one thread loop to the next, e.g. across ``T.sync_threads()``).

Locals that no thread-dependent statement writes (uniform counters driving a
``while`` around ``T.sync_threads()``, accumulators of tile-level code) stay as
they are, so tile-level code keeps running once per block.

Assumes: tile ops are not lowered yet (they mark the collective statements).
Guarantees: no tile op reads or writes privatized state (a CompileError names it).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from ... import errors
from ...lowering.region import make_region
from ...lowering.stmt import alloc_of, contains, make_alloc, uses_any
from ...ops import tile_op_of

_LOCAL = ("local", "local.var")


def scalar_atomic(stmt):
    """The ``(op, view)`` of ``stmt`` when it is a one-element atomic (``T.atomic_add(A[i], v)``,
    with or without ``return_prev``): per-thread code, as on CUDA (every thread that
    reaches it performs its own update), so not a collective statement; else None."""
    found = tile_op_of(stmt)
    if found is None or found[0].name not in ("atomic", "atomic_prev"):
        return None
    op, call = found
    view = op.view(call)
    if op.name == "atomic" and (
        view.value_is_region
        or not all(isinstance(r.extent, ir.IntImm) and r.extent.value == 1 for r in view.dst.region)
    ):
        return None
    return op, view


def is_tile_stmt(x) -> bool:
    """Whether ``x`` is a tile op that runs once per block (not a per-thread scalar atomic)."""
    return isinstance(x, ir.Evaluate) and tile_op_of(x) is not None and scalar_atomic(x) is None


def _is_collective(stmt) -> bool:
    return contains(stmt, is_tile_stmt)


def _units(stmt, out):
    """Statements the thread splitter treats as a whole (plain) or keeps at block level (tile)."""
    if isinstance(stmt, ir.SeqStmt):
        for child in stmt.seq:
            if alloc_of(child) is None:
                _units(child, out)
        return out
    if not _is_collective(stmt):
        out.append(("plain", stmt))
    elif isinstance(stmt, ir.For | ir.While):
        out.append(("head", stmt))
        _units(stmt.body, out)
    elif isinstance(stmt, ir.If):
        out.append(("head", stmt))
        _units(stmt.then_case, out)
        if stmt.else_case is not None:
            _units(stmt.else_case, out)
    else:
        out.append(("tile", stmt))
    return out


def _stores(unit):
    found = {}

    def visit(x):
        if isinstance(x, ir.TensorStore):
            found[x.dest.__chandle__()] = x.dest
        atomic = scalar_atomic(x) if isinstance(x, ir.Evaluate) else None
        if atomic is not None and atomic[0].name == "atomic_prev":  # writes its prev cell
            cell = atomic[1].prev.source
            found[cell.__chandle__()] = cell

    tvm_ffi.structural_walk(unit, visit)
    return found


def _head_part(kind, stmt):
    """The part of a unit evaluated at its own level (a collective loop/if: its header)."""
    if kind != "head":
        return stmt
    if isinstance(stmt, ir.For):
        return [stmt.begin, stmt.end]
    return stmt.condition


def privatize(body, tvars):
    """Per-thread copies of the per-thread state of one block body (see module docstring)."""
    total, flat, stride = 1, None, 1
    for var, extent in tvars:
        flat = var if flat is None else flat + var * stride
        stride = stride * extent
        total = total * extent
    locals_ = {}

    def collect(x):
        var = alloc_of(x) if isinstance(x, ir.Bind) else None
        if var is not None and str(var.ty.scope) in _LOCAL:
            locals_[var.__chandle__()] = var

    tvm_ffi.structural_walk(body, collect)
    units = _units(body, [])
    priv, dep_binds = {}, {}
    changed = True
    while changed:
        changed = False
        keys = [v for v, _ in tvars] + list(priv.values()) + list(dep_binds.values())
        for kind, unit in units:
            if kind != "plain" or not uses_any(unit, keys):
                continue
            for handle, tensor in _stores(unit).items():
                if handle in locals_ and handle not in priv:
                    priv[handle], changed = tensor, True
            if isinstance(unit, ir.Bind) and unit.var.__chandle__() not in dep_binds:
                dep_binds[unit.var.__chandle__()], changed = unit.var, True
    binds = {
        h: v
        for h, v in dep_binds.items()
        if any(uses_any(_head_part(k, u), [v]) for k, u in units if not _defines(u, v))
    }
    if not priv and not binds:
        return body
    if priv:
        body = _per_thread_fills(body, priv)
        units = _units(body, [])
    for kind, unit in units:
        if kind == "tile" and uses_any(unit, list(priv.values())):
            raise errors.compile_error(
                "the CPU backend cannot apply a tile op to per-thread state "
                "(a local buffer written by code that depends on the thread index)",
                tile_op_loc(unit),
            )
    return _rewrite(body, priv, binds, flat, total)


def _per_thread_fills(body, priv):
    """``T.fill`` / ``T.clear`` of a privatized local tensor as a plain store loop: on a GPU
    each thread fills its own registers, so it becomes per-thread code here."""
    from ...lowering import irb
    from ...lowering.region import RegionView

    def on_eval(stmt):
        found = tile_op_of(stmt)
        if found is None or found[0].name != "fill":
            return stmt
        view = found[0].view(found[1])
        dst = RegionView.of(view.dst)
        if dst.tensor.__chandle__() not in priv:
            return stmt
        axes = list(range(len(dst.extents)))
        value = view.value
        if str(value.ty) != dst.dtype:
            value = _tirx.Cast(dst.dtype, value)

        def store(vars_):
            return ir.TensorStore(dst.tensor, dst.index(dict(zip(axes, vars_))), value, stmt.loc)

        return irb.loop_nest(dst.extents, store, loc=stmt.loc)

    return tvm_ffi.structural_map(body, [(ir.Evaluate, on_eval)])


def _defines(unit, var) -> bool:
    return isinstance(unit, ir.Bind) and unit.var.same_as(var)


def tile_op_loc(stmt):
    """The source location of the first tile op inside ``stmt`` (If/For frames carry none)."""
    found = []

    def visit(x):
        if not found and isinstance(x, ir.Evaluate) and tile_op_of(x) is not None:
            found.append(x.value.loc)

    tvm_ffi.structural_walk(stmt, visit)
    return found[0] if found else getattr(stmt, "loc", None)


def _private_prev_cell(stmt, new, flat):
    """A ``return_prev`` atomic whose cell was privatized writes this thread's slot."""
    atomic = scalar_atomic(stmt)
    if atomic is None or atomic[0].name != "atomic_prev":
        return stmt
    op, view = atomic
    target = new.get(view.prev.source.__chandle__())
    if target is None:
        return stmt
    lanes = [r.extent for r in view.prev.region]
    cell = make_region(target, [flat, *[r.begin for r in view.prev.region]], [1, *lanes])
    options = {key: getattr(view, key) for key in op.options}
    return ir.Evaluate(op.make(view.dst, view.value, cell, loc=view.loc, **options), loc=stmt.loc)


def _rewrite(body, priv, binds, flat, total):
    new = {}
    for handle, var in priv.items():
        ty = var.ty
        new[handle] = ir.Var(var.name, _T.Tensor((total, *ty.shape), str(ty.dtype), scope="local"))
    slots = {
        h: ir.Var(v.name, _T.Tensor((total,), str(v.ty), scope="local")) for h, v in binds.items()
    }

    def stmt_map(stmt):
        if isinstance(stmt, ir.SeqStmt):
            return ir.SeqStmt([stmt_map(s) for s in stmt.seq])
        var = alloc_of(stmt)
        if var is not None and var.__chandle__() in new:
            return make_alloc(new[var.__chandle__()])
        if isinstance(stmt, ir.Bind) and stmt.var.__chandle__() in slots:
            return ir.TensorStore(slots[stmt.var.__chandle__()], [flat], stmt.value, stmt.loc)
        if isinstance(stmt, ir.For):
            body = stmt_map(stmt.body)
            return ir.For(
                stmt.var,
                stmt.begin,
                stmt.end,
                stmt.step,
                stmt.kind,
                body,
                stmt.annotations,
                stmt.loc,
            )
        if isinstance(stmt, ir.If):
            other = None if stmt.else_case is None else stmt_map(stmt.else_case)
            return ir.If(stmt.condition, stmt_map(stmt.then_case), other, stmt.loc)
        if isinstance(stmt, ir.While):
            return ir.While(stmt.condition, stmt_map(stmt.body), stmt.loc)
        return _private_prev_cell(stmt, new, flat)

    def on_store(s):
        target = new.get(s.dest.__chandle__())
        return s if target is None else ir.TensorStore(target, [flat, *s.indices], s.value, s.loc)

    def on_load(x):
        target = new.get(x.source.__chandle__())
        return x if target is None else ir.TensorLoad(target, [flat, *x.indices])

    def on_var(v):
        slot = slots.get(v.__chandle__())
        return v if slot is None else ir.TensorLoad(slot, [flat])

    body = stmt_map(body)
    body = tvm_ffi.structural_map(
        body, [(ir.TensorStore, on_store), (ir.TensorLoad, on_load), (ir.Var, on_var)]
    )
    allocs = [make_alloc(s) for s in slots.values()]
    return ir.SeqStmt([*allocs, body]) if allocs else body
