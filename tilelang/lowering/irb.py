"""Small constructors for the loop nests that tile-op lowerings emit."""

from __future__ import annotations

from tvm_tirx import ir

from .. import dtypes


def seq(stmts) -> ir.Stmt:
    """One statement from a list (flattening None and nested lists)."""
    flat = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, list | tuple):
            flat.extend(x for x in s if x is not None)
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return ir.SeqStmt(flat)


def loop_nest(extents, body_fn, names=None, kind=None, loc=ir.UNKNOWN_LOC) -> ir.Stmt:
    """``for v0 in range(e0): for v1 in range(e1): ... body_fn([v0, v1, ...])``."""
    kind = ir.ForKind.DEFAULT if kind is None else kind
    names = names or [f"i{k}" for k in range(len(extents))]
    vars_ = [ir.Var(n, "int32") for n in names]
    stmt = body_fn(vars_)
    for var, extent in reversed(list(zip(vars_, extents))):
        stmt = ir.For(var, ir.const(0, "int32"), extent, ir.const(1, "int32"), kind, stmt, loc=loc)
    return stmt


def load(tensor, indices):
    return ir.TensorLoad(tensor, list(indices))


def store(tensor, indices, value, loc=ir.UNKNOWN_LOC):
    return ir.TensorStore(
        tensor, list(indices), dtypes.convert(value, str(tensor.ty.dtype)), loc=loc
    )


def all_of(conds):
    conds = [c for c in conds if c is not None]
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = ir.prim.expr.And(out, c) if hasattr(ir, "prim") else out & c
    return out
