"""CPU meaning of the warp-collective ``ldmatrix`` and ``mma.sync`` helpers.

``tl::ptx_ldmatrix_x{1,2,4}[_trans](&S[idx], &L[off])`` and ``tl::mma_m16n8k*(&D[d], &A[a],
&B[b], &C[c])`` (``tilelang/lowering/mma_fragments.py``; emitted by
``tilelang.cuda.intrinsics``' TensorCoreIntrinEmitter) exchange registers between the 32
lanes of a warp. The CPU backend runs a block's threads one after another
(``lower_threads``), so, as for the shuffles of ``warp_ops.py``, each such statement becomes::

    every thread: put its operands in block-shared arrays      (a thread loop)
    once: compute every lane's result from those arrays         (no thread index)
    tl.sync_threads()                                           (splits the thread loops)
    every thread: copy its result slots into its registers      (a thread loop)

ldmatrix stages the per-lane source indices and reads ``S`` for every lane (lane ``l``
provides row ``l % 8`` of matrix ``l // 8``: 16 bytes from its ``&S[idx]`` along the last
axis). mma scatters each lane's A/B fragments into dense per-warp ``16 x K`` / ``K x 8``
tiles, then computes ``D = A B + C`` in the accumulator type. The block-shared arrays are
shared by all statements of one helper (each statement finishes before the next starts).

Not expressible (a CompileError naming the helper and the user's line): a helper under an
``if``/loop whose condition or bounds depend on the thread index, inside ``T.Parallel``, a
thread count that is dynamic or not a multiple of 32, or operands that are not
``address_of(tensor[...])``.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from ... import errors
from ...lowering.mma_fragments import MMA_SHAPES, ldmatrix_source, parse_ldmatrix
from ...lowering.stmt import contains, make_alloc
from ...lowering.thread_utils import extern_name
from .warp_block import WarpBlock, rewrite_launches

WARP = 32


def _is_warp_mma(name) -> bool:
    return name in MMA_SHAPES or parse_ldmatrix(name) is not None


def _has_warp_mma(node) -> bool:
    return contains(node, lambda x: _is_warp_mma(extern_name(x)))


def lower_warp_mma(body):
    """Rewrite the ldmatrix/mma helper statements of every thread launch (module docstring)."""
    if not _has_warp_mma(body):
        return body
    return rewrite_launches(body, _Block)


def _i32(v):
    return ir.const(int(v), "int32")


def _operand(arg, name, loc):
    """(tensor, indices) of ``address_of(tensor[indices])``."""
    if (
        isinstance(arg, ir.Call)
        and getattr(arg.op, "name", "") == "tirx.address_of"
        and isinstance(arg.args[0], ir.TensorLoad)
    ):
        load = arg.args[0]
        return load.source, list(load.indices)
    raise errors.compile_error(
        f"`{name}` on cpu needs operands of the form T.address_of(tensor[index]), got {arg}", loc
    )


class _Block(WarpBlock):
    """The helper statements of one block body with thread launches ``tvars`` (statements
    of their own: nothing to hoist from loop bounds or conditions)."""

    def __init__(self, tvars):
        super().__init__(tvars, hoist_controls=False)
        self.arrays = {}

    def array(self, key, size, dtype):
        """A block-shared array, one per ``key`` for the whole block."""
        if key not in self.arrays:
            var = ir.Var(f"warp_mma_{len(self.arrays)}", _T.Tensor((size,), dtype, scope="shared"))
            self.allocs.append(make_alloc(var))
            self.arrays[key] = var
        return self.arrays[key]

    def involves(self, node) -> bool:
        return _has_warp_mma(node)

    def leaf(self, s, dependent, parallel, guarded):
        name = extern_name(s)
        loc = getattr(s, "loc", None)
        if name is None:
            raise errors.compile_error(
                "warp-level ldmatrix/mma helpers are supported on cpu only as statements of "
                f"their own, not inside a {type(s).__name__}",
                loc,
            )
        self.check(name, loc, guarded, parallel)
        args = list(s.value.args[1:])
        if name in MMA_SHAPES:
            return self.mma(MMA_SHAPES[name], args, loc)
        return self.ldmatrix(name, *parse_ldmatrix(name), args, loc)

    def check(self, name, loc, guarded, parallel):
        if parallel:
            raise errors.compile_error(
                f"`{name}` (a warp-collective) is not supported on cpu inside T.Parallel", loc
            )
        if guarded:
            raise errors.compile_error(
                f"`{name}` (a warp-collective) is not supported on cpu under a condition or "
                "loop bound that depends on the thread index (every lane must reach it)",
                loc,
            )
        if self.total is None or self.total % WARP:
            raise errors.compile_error(
                f"`{name}` needs whole warps: the block's thread count must be a constant "
                f"multiple of 32 (got {self.total if self.total is not None else 'dynamic'})",
                loc,
            )

    # ------------------------------------------------------------------ mma.sync
    def mma(self, shape, args, loc):
        if len(args) != 4:
            raise errors.compile_error(f"`{shape.name}` takes 4 operands (d, a, b, c)", loc)
        (d, d_idx), (a, a_idx), (b, b_idx), (c, c_idx) = (
            _operand(x, shape.name, loc) for x in args
        )
        for what, tensor, dtype in (
            ("A", a, shape.operand_dtype),
            ("B", b, shape.operand_dtype),
            ("C", c, shape.accum_dtype),
            ("D", d, shape.accum_dtype),
        ):
            if str(tensor.ty.dtype) != dtype:
                raise errors.compile_error(
                    f"`{shape.name}`: {what} operand {tensor.name} is {tensor.ty.dtype}, "
                    f"expected {dtype}",
                    loc,
                )
        k, acc_t = shape.k, shape.accum_dtype
        warps = self.total // WARP
        a_tile = self.array((shape.name, "A"), warps * 16 * k, shape.operand_dtype)
        b_tile = self.array((shape.name, "B"), warps * k * 8, shape.operand_dtype)
        out = self.array((shape.name, "D"), self.total * 4, acc_t)
        flat = self.flat
        lane = _tirx.floormod(flat, WARP)
        warp = _tirx.floordiv(flat, WARP)
        g, t = _tirx.floordiv(lane, 4), _tirx.floormod(lane, 4)

        def at(idx, i):
            return [*idx[:-1], idx[-1] + i]

        stmts = []
        for i in range(shape.a_elems):  # each lane scatters its fragments into dense tiles
            row, col = shape.a_map(g, t, i)
            stmts.append(
                ir.TensorStore(a_tile, [warp * (16 * k) + row * k + col], ir.TensorLoad(a, at(a_idx, i)))
            )  # fmt: skip
        for i in range(shape.b_elems):
            row, col = shape.b_map(g, t, i)
            stmts.append(
                ir.TensorStore(b_tile, [warp * (8 * k) + row * 8 + col], ir.TensorLoad(b, at(b_idx, i)))
            )  # fmt: skip
        for r in range(4):
            stmts.append(ir.TensorStore(out, [flat * 4 + r], ir.TensorLoad(c, at(c_idx, r))))
        # once per block: D = A B + C for every lane
        tv, kk = ir.Var("t", "int32"), ir.Var("kk", "int32")
        tl_, tw = _tirx.floormod(tv, WARP), _tirx.floordiv(tv, WARP)
        tg, tt = _tirx.floordiv(tl_, 4), _tirx.floormod(tl_, 4)
        body = []
        for r in range(4):
            row, col = shape.c_map(tg, tt, r)
            slot = [tv * 4 + r]
            prod = _tirx.Cast(
                acc_t, ir.TensorLoad(a_tile, [tw * (16 * k) + row * k + kk])
            ) * _tirx.Cast(acc_t, ir.TensorLoad(b_tile, [tw * (8 * k) + kk * 8 + col]))
            step = ir.TensorStore(out, slot, ir.TensorLoad(out, slot) + prod)
            body.append(ir.For(kk, _i32(0), _i32(k), _i32(1), ir.ForKind.DEFAULT, step))
            kk = ir.Var("kk", "int32")
        stmts.append(
            ir.For(tv, _i32(0), _i32(self.total), _i32(1), ir.ForKind.DEFAULT, ir.SeqStmt(body))
        )
        stmts.append(self.barrier())
        for r in range(4):
            stmts.append(ir.TensorStore(d, at(d_idx, r), ir.TensorLoad(out, [flat * 4 + r])))
        return ir.SeqStmt(stmts)

    # ------------------------------------------------------------------ ldmatrix
    def ldmatrix(self, name, num, trans, args, loc):
        if len(args) != 2:
            raise errors.compile_error(f"`{name}` takes 2 operands (shared, local)", loc)
        (src, src_idx), (dst, dst_idx) = (_operand(x, name, loc) for x in args)
        dtype = str(src.ty.dtype)
        bits = _bits(dtype)
        if str(dst.ty.dtype) != dtype:
            raise errors.compile_error(
                f"`{name}`: {dst.name} is {dst.ty.dtype} but {src.name} is {dtype}", loc
            )
        if bits not in (8, 16):
            raise errors.compile_error(
                f"`{name}` on cpu: 8- or 16-bit elements only, got {dtype}", loc
            )
        if trans and bits != 16:
            raise errors.compile_error(f"`{name}`: .trans needs 16-bit elements, got {dtype}", loc)
        per = 32 // bits  # elements of one 32-bit register
        stages = [
            self.array((name, "idx", d, str(x.ty)), self.total, str(x.ty))
            for d, x in enumerate(src_idx)
        ]
        n_out = num * per
        out = self.array((name, "out", dtype), self.total * n_out, dtype)
        flat = self.flat
        stmts = [ir.TensorStore(st, [flat], x) for st, x in zip(stages, src_idx)]
        tv = ir.Var("t", "int32")
        lane = _tirx.floormod(tv, WARP)
        base = tv - lane
        body = []
        for q in range(num):
            for j in range(per):
                src_lane, col = ldmatrix_source(lane, num, trans, per, j)(q)
                s = base + src_lane
                idx = [ir.TensorLoad(st, [s]) for st in stages]
                last = idx[-1] + _tirx.Cast(str(idx[-1].ty), col)
                value = ir.TensorLoad(src, [*idx[:-1], last])
                body.append(ir.TensorStore(out, [tv * n_out + q * per + j], value))
        stmts.append(
            ir.For(tv, _i32(0), _i32(self.total), _i32(1), ir.ForKind.DEFAULT, ir.SeqStmt(body))
        )
        stmts.append(self.barrier())
        last = dst_idx[-1]
        for e in range(n_out):
            where = [*dst_idx[:-1], last + e]
            stmts.append(ir.TensorStore(dst, where, ir.TensorLoad(out, [flat * n_out + e])))
        return ir.SeqStmt(stmts)


def _bits(dtype: str) -> int:
    """Bit width of a scalar dtype name (``float16`` -> 16; 0 when it has none)."""
    digits = dtype[len(dtype.rstrip("0123456789")) :]
    return int(digits) if digits else 0
