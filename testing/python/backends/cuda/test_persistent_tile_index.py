"""The block-index binds a persistent kernel recomputes per tile
(``persistent_tiles._truncating``): floor division/modulo become C's truncating ones only
where the dividend is provably >= 0 and the divisor > 0, so every bind keeps its value on
every tile of the grid (checked exhaustively); the README GEMM's tile loop then has no
floor operation left for TIRx to lower with sign corrections (issue 11's compile time)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tvm_ffi
from tvm_tirx import ir, sym
from tvm_tirx.ir import prim as P

from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes.persistent_tiles import _truncating
from tilelang.backends.cuda.passes.rasterize_blocks import panel_map
from tilelang.lowering.stmt import substitute

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_programs import readme_gemm as gemm  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _floor_ops(node):
    found = []
    tvm_ffi.structural_walk(node, [(P.FloorDiv, found.append), (P.FloorMod, found.append)])
    return found


def _values(binds, env):
    """Each bind's integer value with the block indices at ``env`` (a fresh analyzer
    folds the constant expression)."""
    analyzer, env, out = sym.Analyzer(), dict(env), []
    for b in binds:
        value = analyzer.simplify(substitute(b.value, env))
        assert isinstance(value, ir.IntImm), value
        env[b.var] = value
        out.append(int(value))
    return out


def _binds(gx, gy, panel, order):
    """The swizzle binds of ``rasterize_blocks`` for a gx x gy grid, plus binds a user
    may write: one whose dividend can be negative (must stay a floor operation) and a
    cluster-style ``bx // 2``, ``bx % 2``."""
    bx, by = ir.Var("bx", "int32"), ir.Var("by", "int32")
    if order == "col":
        ny, nx = panel_map(by, bx, gy, gx, panel)
    else:
        nx, ny = panel_map(bx, by, gx, gy, panel)
    vx, vy, neg, pair = (ir.Var(n, "int32") for n in ("bx_r", "by_r", "neg", "pair"))
    binds = [
        ir.Bind(vx, nx),
        ir.Bind(vy, ny),
        ir.Bind(neg, (vx - 3) // 2 + (by - 5) % 3),
        ir.Bind(pair, bx // 2 * 2 + bx % 2 + vy // 3),
    ]
    dims = {"blockIdx.x": (gx, bx), "blockIdx.y": (gy, by)}
    return binds, dims, (bx, by)


@pytest.mark.parametrize(
    "gx,gy,panel,order",
    [(32, 64, 10, "row"), (9, 7, 3, "row"), (5, 13, 4, "col"), (7, 5, 8, "row"), (1, 6, 2, "row")],
)
def test_truncated_binds_equal_the_floor_ones_on_every_tile(gx, gy, panel, order):
    binds, dims, (bx, by) = _binds(gx, gy, panel, order)
    new = _truncating(binds, dims)
    # the panel binds lose their floor operations; the one that can be negative keeps them
    assert not _floor_ops(new[0].value) and not _floor_ops(new[1].value)
    assert len(_floor_ops(new[2].value)) == 2 and not _floor_ops(new[3].value)
    assert [b.var for b in new] == [b.var for b in binds]
    for x in range(gx):
        for y in range(gy):
            env = {bx: ir.const(x, "int32"), by: ir.const(y, "int32")}
            assert _values(new, env) == _values(binds, env), (x, y)


def test_unprovable_divisor_sign_keeps_the_floor_operation():
    """A divisor read from a bind the analyzer cannot bound stays a floor division."""
    bx, d, q = ir.Var("bx", "int32"), ir.Var("d", "int32"), ir.Var("q", "int32")
    binds = [ir.Bind(d, bx - 4), ir.Bind(q, (bx + 1) // d)]
    new = _truncating(binds, {"blockIdx.x": (9, bx)})
    assert len(_floor_ops(new[1].value)) == 1


def test_readme_gemm_tile_loop_has_no_floor_operation():
    """Issue 11: the README GEMM (swizzle 10, persistent by default) hands TIRx a tile
    loop whose recomputed block indices use truncating operations only."""
    func = gemm(8192, 8192, 8192, bM=128, bN=256, threads=256, swizzle=10)
    lowered = pipeline.lower(func, SM90A, {})
    binds = []

    def visit(stmt):
        if stmt.var.name in ("bx_r", "by_r", "bx_r_load", "by_r_load"):
            binds.append(stmt)

    tvm_ffi.structural_walk(lowered.body, [(ir.Bind, visit)])
    assert len(binds) == 4
    for b in binds:
        assert not _floor_ops(b.value), b


def test_non_integer_binds_pass_through():
    """A moved bind of a float or a pointer (no analyzer fact) is kept as it is and does
    not stop the integer binds after it from being rewritten."""
    bx = ir.Var("bx", "int32")
    f, q = ir.Var("f", "float32"), ir.Var("q", "int32")
    p, p2 = (ir.Var(n, ir.PtrType(ir.PrimType("float32"))) for n in ("p", "p2"))
    binds = [ir.Bind(f, ir.const(0.5, "float32")), ir.Bind(p2, p), ir.Bind(q, bx // 4)]
    new = _truncating(binds, {"blockIdx.x": (9, bx)})
    assert new[0].same_as(binds[0]) and new[1].same_as(binds[1])
    assert not _floor_ops(new[2].value)
