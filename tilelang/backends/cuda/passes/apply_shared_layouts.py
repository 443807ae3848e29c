"""ApplySharedLayouts (CUDA): element accesses of laid-out shared tiles go through the layout.

Assumes: tile level, after layout inference and pipeline planning; ``ctx.layout_map``
gives some shared tiles a Layout (gemm's swizzle, ``T.annotate_layout``, or their
multi-stage expansions). Tile ops (``tl.copy``/``tl.gemm``/...) still hold logical
regions; their CUDA lowerings address shared tiles through the layout themselves
(``thread_utils.physical``, ``lowering.shared_address.shared_offset``).

Guarantees: every ``TensorLoad``/``TensorStore`` of such a tile outside a tile op (in a
``T.Parallel`` nest or serial code) indexes the tile's physical place
(``thread_utils.physical``), so element code and tile ops agree on where each element
lives. Tile-op statements are left untouched.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from ....lowering.stmt import StmtMutator
from ....lowering.thread_utils import is_shared, physical
from ....ops.registry import tile_op_of


class _ApplySharedLayouts(StmtMutator):
    def __init__(self, layout_ctx):
        super().__init__("cuda")
        self.layout_ctx = layout_ctx

    def _has_layout(self, var) -> bool:
        return is_shared(var) and self.layout_ctx.get_layout(var) is not None

    def _map(self, node, ctx):
        def load(x):
            if not self._has_layout(x.source):
                return x
            idx = physical(x.source, list(x.indices), _Ctx(self.layout_ctx, ctx))
            return ir.TensorLoad(x.source, idx)

        def store(x):
            if not self._has_layout(x.dest):
                return x
            idx = physical(x.dest, list(x.indices), _Ctx(self.layout_ctx, ctx))
            return ir.TensorStore(x.dest, idx, x.value, x.loc)

        return tvm_ffi.structural_map(node, [(ir.TensorLoad, load), (ir.TensorStore, store)])

    def visit_Evaluate(self, stmt, ctx):
        return stmt if tile_op_of(stmt) is not None else self._map(stmt, ctx)

    def visit_TensorStore(self, stmt, ctx):
        return self._map(stmt, ctx)

    def visit_Bind(self, stmt, ctx):
        return self._map(stmt, ctx)

    def visit_If(self, stmt, ctx):
        out = super().visit_If(stmt, ctx)
        return ir.If(self._map(out.condition, ctx), out.then_case, out.else_case, out.loc)

    def visit_While(self, stmt, ctx):
        out = super().visit_While(stmt, ctx)
        return ir.While(self._map(out.condition, ctx), out.body, out.loc)


class _Ctx:
    """``get_layout`` of the layout context, ``simplify`` of the enclosing loops."""

    def __init__(self, layout_ctx, ctx):
        self.layout_ctx, self.ctx = layout_ctx, ctx

    def get_layout(self, var):
        return self.layout_ctx.get_layout(var)

    def simplify(self, expr):
        return self.ctx.simplify(expr)


def apply_shared_layouts(body, ctx):
    """Map element accesses of laid-out shared tiles (see the module docstring)."""
    if not any(is_shared(var) for var in ctx.layout_map):
        return body
    return _ApplySharedLayouts(ctx)(body)
