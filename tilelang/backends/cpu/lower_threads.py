"""Passes that turn a GPU-shaped kernel into CPU code.

- ``lower_threads``: a block's threads run one after another. Tile-level code
  (tile ops, ``T.Parallel`` loops, everything not naming ``threadIdx``) runs once
  per block; statements that name a thread index run inside a loop over that index
  (a fresh loop per group of such statements). Per-thread state (locals written by
  thread-dependent code, values kept across barriers) first gets one copy per
  thread (``privatize.py``).
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
from ...ops import tile_op_of
from .privatize import privatize, tile_op_loc


def _is_collective(stmt) -> bool:
    return contains(stmt, lambda x: isinstance(x, ir.Evaluate) and tile_op_of(x) is not None)


def _thread_loop(stmts, tvars):
    """``for tx in range(T): stmts`` with fresh loop variables (TIRx wants each loop
    variable bound once, and a block may need several thread loops)."""
    body = stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)
    fresh = {var: ir.Var(var.name, var.ty) for var, _ in tvars}
    body = substitute(body, fresh)
    for var, extent in reversed(tvars):
        body = ir.For(
            fresh[var], ir.const(0, "int32"), extent, ir.const(1, "int32"), ir.ForKind.DEFAULT, body
        )
    return body


def _split_threads(stmt, tvars):
    """Wrap the statements of ``stmt`` that name a thread index in loops over the threads."""
    names = [v for v, _ in tvars]
    if isinstance(stmt, ir.SeqStmt):
        out, group, dependent = [], [], list(names)
        for child in stmt.seq:
            if alloc_of(child) is None and uses_any(child, dependent) and not _is_collective(child):
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
    if not _is_collective(stmt):
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
    raise errors.compile_error(
        "the CPU backend cannot run a tile op under a condition or loop that depends on the "
        "thread index",
        tile_op_loc(stmt),
    )


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
