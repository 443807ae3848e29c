"""RasterizeBlocks: apply ``T.use_swizzle`` by renumbering a 2-D grid of blocks in panels.

Consecutive block ids walk down ``panel_size`` rows of the grid before moving one column
across (``order="row"``; ``"col"`` swaps the axes), so blocks running at the same time
share operand tiles in L2. The map is a bijection of the grid onto itself, including a
last panel with fewer rows.

Assumes: the kernel's ``blockIdx.x``/``blockIdx.y`` launches enclose its body, and the
hint (``tl.use_swizzle``) sits in it. Guarantees: every use of the block indices in the
body reads the renumbered ones; the hint op is gone. Grids of one dimension, or a hint
with ``enable=False``, are left as they are.

In thread-block clusters of ``cx x cy`` blocks (a kernel's ``cluster_dims``, or the pass
config ``tl.cluster_multicast``) whose shape divides the static grid, the panels are laid
over clusters instead of blocks: cluster ``(bx // cx, by // cy)`` is renumbered as above in
the grid of clusters and keeps its blocks in their places within it, so the blocks of one
cluster still compute adjacent tiles (the tiles whose operands a cluster shares).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ....lowering.stmt import launch_of, launches_of, substitute
from ....ops.rasterize.op import USE_SWIZZLE
from ....ops.registry import tile_op_of


def _find_hint(body):
    found = []

    def visit(node):
        hit = tile_op_of(node)
        if hit is not None and hit[0] is USE_SWIZZLE:
            found.append(USE_SWIZZLE.view(hit[1]))

    tvm_ffi.structural_walk(body, [(ir.Evaluate, visit)])
    return found[0] if found else None


def _drop_hints(body):
    def repl(node):
        hit = tile_op_of(node)
        if hit is not None and hit[0] is USE_SWIZZLE:
            return ir.Evaluate(ir.const(0, "int32"))
        return node

    return tvm_ffi.structural_map(body, [(ir.Evaluate, repl)])


def panel_map(bx, by, gx, gy, panel):
    """(new_bx, new_by): block (bx, by) of a gx x gy grid renumbered in panels of ``panel`` rows."""
    linear = by * gx + bx
    span = gx * panel
    first_row = (linear // span) * panel
    within = linear % span
    rows = _tirx.min(gy - first_row, panel) if not isinstance(gy, int) else None
    if rows is None:
        rows = _tirx.min(ir.const(gy, "int32") - first_row, ir.const(panel, "int32"))
    return within // rows, first_row + within % rows


def rasterize_blocks(func, cluster=(1, 1)):
    """Apply the kernel's ``T.use_swizzle`` hint (see the module docstring); ``cluster``:
    the ``(x, y)`` blocks of a thread-block cluster."""
    hint = _find_hint(func.body)
    if hint is None:
        return func
    body = _drop_hints(func.body)
    launches = {tag: (var, extent) for tag, extent, var in launches_of(body)[0]}
    if not hint.enable or "blockIdx.x" not in launches or "blockIdx.y" not in launches:
        return func.with_body(body)
    (bx, gx), (by, gy) = launches["blockIdx.x"], launches["blockIdx.y"]
    panel = max(1, int(hint.panel_size))
    cx, cy = (int(c) for c in cluster)
    static = isinstance(gx, ir.IntImm) and isinstance(gy, ir.IntImm)
    if (cx, cy) == (1, 1) or not static or int(gx) % cx or int(gy) % cy:
        cx = cy = 1
    ux, ugx = (bx, gx) if cx == 1 else (bx // cx, int(gx) // cx)
    uy, ugy = (by, gy) if cy == 1 else (by // cy, int(gy) // cy)
    if hint.order == "col":
        new_by_e, new_bx_e = panel_map(uy, ux, ugy, ugx, panel)
    else:
        new_bx_e, new_by_e = panel_map(ux, uy, ugx, ugy, panel)
    if cx != 1:
        new_bx_e = new_bx_e * cx + bx % cx
    if cy != 1:
        new_by_e = new_by_e * cy + by % cy
    new_bx, new_by = ir.Var(bx.name + "_r", bx.ty), ir.Var(by.name + "_r", by.ty)
    return func.with_body(_rewrite_innermost(body, bx, by, new_bx, new_by, new_bx_e, new_by_e))


def _rewrite_innermost(stmt, bx, by, new_bx, new_by, new_bx_e, new_by_e):
    while_single = stmt
    if isinstance(while_single, ir.SeqStmt) and len(while_single.seq) == 1:
        return ir.SeqStmt(
            [_rewrite_innermost(while_single.seq[0], bx, by, new_bx, new_by, new_bx_e, new_by_e)]
        )
    if launch_of(stmt) is not None:
        inner = _rewrite_innermost(stmt.body, bx, by, new_bx, new_by, new_bx_e, new_by_e)
        return ir.RegionStmt(
            stmt.op, stmt.args, stmt.body_params, stmt.attrs, inner, stmt.result_vars, stmt.loc
        )
    body = substitute(stmt, {bx: new_bx, by: new_by})
    rest = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
    return ir.SeqStmt([ir.Bind(new_bx, new_bx_e), ir.Bind(new_by, new_by_e)] + rest)
