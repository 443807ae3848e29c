"""``T.gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, ...)``: C += A @ B on tiles.

IR: ``tl.gemm(A_region, B_region, C_region)`` with the options as attributes.
A is (M, K) or (K, M) when ``transpose_A``; B is (K, N) or (N, K) when
``transpose_B``; C is (M, N) and sets the accumulation type. The last two
dimensions of each region are the matrix dimensions.
"""

from __future__ import annotations

import enum

from tvm_tirx import ir

from ... import errors
from ...lowering import irb
from ...lowering.region import RegionView, _const
from ..registry import TileOpDef, lower_rule


class GemmWarpPolicy(enum.IntEnum):
    """How a block's warps split the C tile (upstream's names and values)."""

    Square = 0
    FullRow = 1
    FullCol = 2


GEMM = TileOpDef(
    "gemm",
    ("A", "B", "C"),
    {
        "transpose_A": False,
        "transpose_B": False,
        "policy": int(GemmWarpPolicy.Square),
        "clear_accum": False,
        "k_pack": 1,
        "wg_wait": 0,
    },
)


def gemm_dims(v):
    """(A, B, C views, M, N, K) with the shape checks done, or a CompileError."""
    a, b, c = RegionView.of(v.A), RegionView.of(v.B), RegionView.of(v.C)
    for view, label in ((a, "A"), (b, "B"), (c, "C")):
        if len(view.extents) < 2:
            raise errors.compile_error(f"T.gemm: {label} ({view.name}) must be 2-D", v.loc)
    m, ka = (a.extents[-1], a.extents[-2]) if v.transpose_A else (a.extents[-2], a.extents[-1])
    kb, n = (b.extents[-1], b.extents[-2]) if v.transpose_B else (b.extents[-2], b.extents[-1])
    cm, cn = c.extents[-2], c.extents[-1]
    for x, y, what in ((ka, kb, "K of A and B"), (m, cm, "M of A and C"), (n, cn, "N of B and C")):
        if _const(x) is not None and _const(y) is not None and _const(x) != _const(y):
            raise errors.compile_error(
                f"T.gemm: {what} differ ({x} vs {y}) for A={a.name}{list(a.extents)}, "
                f"B={b.name}{list(b.extents)}, C={c.name}{list(c.extents)}",
                v.loc,
            )
    return a, b, c, m, n, ka


def _at(view, row, col):
    rank = len(view.extents)
    return view.index({rank - 2: row, rank - 1: col})


@lower_rule("gemm", "cpu")
def lower_gemm_cpu(v, ctx):
    """i-k-j loops (unit-stride innermost), accumulating in C's element type."""
    a, b, c, m, n, k = gemm_dims(v)
    acc = c.dtype
    stmts = []
    if v.clear_accum:
        stmts.append(
            irb.loop_nest(
                [m, n], lambda ij: irb.store(c.tensor, _at(c, *ij), 0.0), names=["i", "j"]
            )
        )

    def body(ikj):
        i, kk, j = ikj
        av = ir.TensorLoad(a.tensor, _at(a, kk, i) if v.transpose_A else _at(a, i, kk))
        bv = ir.TensorLoad(b.tensor, _at(b, j, kk) if v.transpose_B else _at(b, kk, j))
        cur = ir.TensorLoad(c.tensor, _at(c, i, j))
        return irb.store(c.tensor, _at(c, i, j), cur + av.astype(acc) * bv.astype(acc), loc=v.loc)

    stmts.append(irb.loop_nest([m, k, n], body, names=["i", "k", "j"], loc=v.loc))
    return irb.seq(stmts)
