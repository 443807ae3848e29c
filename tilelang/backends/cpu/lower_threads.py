"""Passes that turn a GPU-shaped kernel into CPU code.

- ``lower_threads``: a block's threads run one after another. Tile-level code
  (tile ops, ``T.Parallel`` loops, everything not naming ``threadIdx``) runs once
  per block; statements that name a thread index run inside a loop over that index
  (a fresh loop per group of such statements). Per-thread state (locals written by
  thread-dependent code, values kept across barriers) first gets one copy per
  thread (``privatize.py``). Under an ``if`` on the thread index that keeps one contiguous
  range of threads ``[lo, hi)`` (``lowering/thread_range.py``), ``T.copy``/``T.fill``/
  ``T.Parallel`` work runs once (upstream re-plans it over those threads) and the branch's
  per-thread statements loop over ``[lo, hi)``; other tile ops there are refused.
- ``lower_blocks``: the grid becomes one loop over all blocks, parallel across
  cores unless the kernel uses atomics (then serial, which makes them exact).
On-chip tensors (shared, fragment, var) keep their scopes: inside the block
loop the LLVM backend allocates them per block, on the stack.

Assumes tile ops are not lowered yet when ``lower_threads`` runs (they mark the
collective statements). Guarantees: no ``launch_thread`` region remains.
"""

from __future__ import annotations

from tvm_tirx import ir

from ... import errors
from ...lowering.stmt import alloc_of, contains, launch_chain, launch_of, substitute, uses_any
from ...lowering.thread_range import guarded_range, negate, split_uniform
from ...ops import tile_op_of
from .privatize import is_tile_stmt, privatize, tile_op_loc


def _is_collective(stmt, names=()) -> bool:
    """Whether ``stmt`` holds block-wide work: a tile op, or a ``T.Parallel`` nest that does
    not name a thread index (run once per block, not once per thread)."""

    def block_wide(x):
        if isinstance(x, ir.Evaluate):
            return is_tile_stmt(x)
        if isinstance(x, ir.For) and x.annotations is not None and "tl.parallel" in x.annotations:
            return not uses_any(x, names)
        return False

    return contains(stmt, block_wide)


def _thread_loop(stmts, tvars):
    """``for tx in range(T): stmts`` with fresh loop variables (TIRx wants each loop
    variable bound once, and a block may need several thread loops)."""
    body = stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)
    fresh = {entry[0]: ir.Var(entry[0].name, entry[0].ty) for entry in tvars}
    body = substitute(body, fresh)
    for var, end, *begin in reversed(tvars):  # (var, extent) or (var, hi, lo): lo <= t < hi
        start = ir.const(begin[0] if begin else 0, "int32")
        body = ir.For(fresh[var], start, end, ir.const(1, "int32"), ir.ForKind.DEFAULT, body)
    return body


#: Tile ops re-planned over an `if`'s threads (as on CUDA: cuda/passes/thread_guard.py;
#: upstream also plans reductions and gemms over the kept threads -- a whole-tile op, run
#: once here), and barriers, which only split the branch's thread loop
#: (``T.sync_threads(id, n)``).
_PLANNED_OPS = (
    "copy",
    "fill",
    "reduce",
    "gemm",
    "sync_threads",
    "named_barrier_sync",
    "named_barrier_arrive",
)


def _only_planned_work(stmt) -> bool:
    """Whether every tile op of ``stmt`` outside its ``T.Parallel`` loops is a copy/fill
    (others, e.g. a per-thread atomic, would run once instead of once per kept thread)."""
    if (
        isinstance(stmt, ir.For)
        and stmt.annotations is not None
        and "tl.parallel" in (stmt.annotations)
    ):
        return True
    if isinstance(stmt, ir.Evaluate):
        found = tile_op_of(stmt)
        return found is None or found[0].name in _PLANNED_OPS + ("ws",)
    if isinstance(stmt, ir.SeqStmt):
        return all(_only_planned_work(s) for s in stmt.seq)
    if isinstance(stmt, ir.If):
        branches = [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
        return all(_only_planned_work(b) for b in branches)
    if isinstance(stmt, ir.For | ir.While):
        return _only_planned_work(stmt.body)
    return not _is_collective(stmt) or not hasattr(stmt, "body") or _only_planned_work(stmt.body)


def _ranged_if(stmt, tvars):
    """An ``if`` on the thread index over block-wide work, when each branch keeps one
    contiguous range of threads ``[lo, hi)`` (``lowering.thread_range``): the work runs
    once (upstream re-plans it over those threads), per-thread statements in a loop over
    ``[lo, hi)`` only. A CompileError naming the line otherwise."""
    if len(tvars) != 1 or not _only_planned_work(stmt):
        return None
    var, end, *begin = tvars[0]
    lo0 = begin[0] if begin else 0
    extent = end.value if isinstance(end, ir.IntImm) else end
    if not isinstance(extent, int):
        return None
    on_threads, uniform = split_uniform(stmt.condition, [var])

    def branch(body, cond):
        span = guarded_range([var >= lo0, cond], var, extent)
        if span is None:
            raise errors.compile_error(
                f"a tile op or T.Parallel loop under `if {stmt.condition}` on the thread index: "
                "the threads it keeps are not one contiguous range known at compile time, so "
                "its work cannot "
                "be split over them; write the condition as `tx < n`, `tx >= n` or "
                "`lo <= tx < hi` with constants, or move the op out of the `if`",
                tile_op_loc(body) or stmt.loc,
            )
        return _split_threads(body, [(var, ir.const(span[1], "int32"), span[0])])

    then = branch(stmt.then_case, on_threads)
    if uniform is not None:
        then = ir.If(uniform, then, None, stmt.loc)
    if stmt.else_case is None:
        return then
    return ir.SeqStmt([then, branch(stmt.else_case, negate(stmt.condition))])


def _split_threads(stmt, tvars):
    """Wrap the statements of ``stmt`` that name a thread index in loops over the threads."""
    names = [entry[0] for entry in tvars]
    if isinstance(stmt, ir.SeqStmt):
        out, group, dependent = [], [], list(names)
        for child in stmt.seq:
            if (
                alloc_of(child) is None
                and uses_any(child, dependent)
                and not _is_collective(child, names)
            ):
                group.append(child)
                if isinstance(child, ir.Bind):
                    dependent.append(child.var)
                continue
            if group:
                out.append(_thread_loop(group, tvars))
                group = []
            out.append(_split_threads(child, tvars))
        if group:
            out.append(_thread_loop(group, tvars))
        return out[0] if len(out) == 1 else ir.SeqStmt(out)
    if not uses_any(stmt, names):
        return stmt
    if not _is_collective(stmt, names):
        return _thread_loop([stmt], tvars)
    if isinstance(stmt, ir.For) and not uses_any([stmt.begin, stmt.end], names):
        body = _split_threads(stmt.body, tvars)
        return ir.For(
            stmt.var, stmt.begin, stmt.end, stmt.step, stmt.kind, body, stmt.annotations, stmt.loc
        )
    if isinstance(stmt, ir.If) and not uses_any(stmt.condition, names):
        other = None if stmt.else_case is None else _split_threads(stmt.else_case, tvars)
        return ir.If(stmt.condition, _split_threads(stmt.then_case, tvars), other, stmt.loc)
    if isinstance(stmt, ir.While) and not uses_any(stmt.condition, names):
        return ir.While(stmt.condition, _split_threads(stmt.body, tvars), stmt.loc)
    if isinstance(stmt, ir.If):
        ranged = _ranged_if(stmt, tvars)
        if ranged is not None:
            return ranged
    unsupported = _first_op_without_cpu_rule(stmt)
    if unsupported is not None:  # e.g. the mbarrier hand-offs of a T.ws producer/consumer
        op, call = unsupported
        raise errors.compile_error(
            f"{op.spelling or 'T.' + op.name} is not supported on the CPU backend (its threads "
            "run one after another, so a branch waiting for another one's mbarrier arrival "
            "cannot be run); compile for CUDA",
            call.loc,
        )
    raise errors.compile_error(
        "the CPU backend cannot run a tile op under a condition or loop that depends on the "
        "thread index",
        tile_op_loc(stmt),
    )


def _first_op_without_cpu_rule(stmt):
    """``(op, call)`` of the first tile op in ``stmt`` the CPU backend has no rule for."""
    import tvm_ffi

    from ...ops import lowering_for

    found = []

    def visit(x):
        hit = tile_op_of(x) if isinstance(x, ir.Evaluate) else None
        if found or hit is None:
            return
        try:
            lowering_for(hit[0], "cpu", hit[1])
        except errors.CompileError:
            found.append(hit)

    tvm_ffi.structural_walk(stmt, [(ir.Evaluate, visit)])
    return found[0] if found else None


def lower_threads(body):
    """Remove ``threadIdx`` launches (see the module docstring)."""
    launch = launch_of(body)
    if launch is not None:
        tag, extent, var = launch
        inner = lower_threads(body.body)
        if tag.startswith("threadIdx"):
            tvars = [(var, extent)]
            while True:  # gather nested thread launches
                nested = launch_of(inner)
                if nested is None or not nested[0].startswith("threadIdx"):
                    break
                tvars.append((nested[2], nested[1]))
                inner = inner.body
            return _split_threads(privatize(inner, tvars), tvars)
        return ir.RegionStmt(
            body.op, body.args, body.body_params, body.attrs, inner, body.result_vars, body.loc
        )
    if isinstance(body, ir.SeqStmt):
        return ir.SeqStmt([lower_threads(s) for s in body.seq])
    return body


def lower_blocks(body, parallel: bool):
    """Replace nested ``blockIdx`` launches by one loop over all blocks."""
    _, launches, body = launch_chain(body, "blockIdx")
    blocks = [(var, extent) for _, extent, var in launches]
    if not blocks:
        return body
    # the flat block counter is 64-bit when a grid extent is, or the grid may exceed int32
    total = 1
    for _, extent in blocks:
        total = total * extent.value if isinstance(extent, ir.IntImm) and total else None
    wide = any(str(e.ty) == "int64" for _, e in blocks) or (total or 0) >= 2**31
    wide = wide or (total is None and len(blocks) > 1)
    ty = "int64" if wide else "int32"
    flat = ir.Var("block", ty)
    binds, stride = [], None
    for var, extent in blocks:
        extent = extent.astype(ty) if str(extent.ty) != ty else extent
        index = flat if stride is None else flat // stride
        value = index % extent if len(blocks) > 1 else index
        if str(value.ty) != str(var.ty):
            value = value.astype(var.ty)
        binds.append(ir.Bind(var, value))
        stride = extent if stride is None else stride * extent
    kind = ir.ForKind.PARALLEL if parallel else ir.ForKind.DEFAULT
    stmts = binds + (list(body.seq) if isinstance(body, ir.SeqStmt) else [body])
    return ir.For(flat, ir.const(0, ty), stride, ir.const(1, ty), kind, ir.SeqStmt(stmts))
