"""CPU meaning of the warp/block exchange intrinsics of ``tilelang/language/warp.py``.

On a GPU the lanes of a warp run together, so ``y = T.shfl_xor(x, 1)`` reads another lane's
``x``. The CPU backend runs a block's threads one after another (``lower_threads``). Before
that, each statement ``S`` that calls an exchange ``E(x, ...)`` becomes::

    stage[flat] = x                   # every thread, in a thread loop (thread-dependent)
    for t in range(threads): out[t] = E over stage (warp of t, or the whole block)
    tl.sync_threads()                 # a collective statement: splits the thread loops
    S with E(x, ...) replaced by out[flat]

``stage`` and ``out`` are block-shared arrays with one slot per thread (``flat`` = the linear
thread index ``tx + ty * Dx + tz * Dx * Dy``; a warp is 32 consecutive slots). Operands other
than constants (delta, width, mask) are staged the same way. ``T.sync_warp()`` becomes a
block barrier (stronger, hence correct). Nested exchanges are staged innermost first.

Not expressible here (a CompileError naming ``T.<name>`` and the user's line): an exchange
inside ``T.Parallel`` (its lanes are the loop's thread mapping, which the CPU does not have),
under an ``if``/loop whose condition or bounds depend on the thread index (not every thread
would reach it), in a ``while`` condition, or in a kernel with a dynamic thread count.

Assumes: runs before ``lower_threads``; thread launches are ``threadIdx.*`` regions.
Guarantees: no exchange ``call_extern`` and no ``__syncwarp`` remains.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from ... import errors
from ...lowering.stmt import contains, make_alloc, uses_any
from ...lowering.warp_intrinsics import (
    BLOCK_VOTES,
    EXCHANGES,
    REDUCTION_COMBINE,
    REDUCTIONS,
    SHUFFLES,
    SYNC_WARP,
    WARP_SIZE,
)
from .warp_block import WarpBlock, rewrite_launches

_NAMES = set(EXCHANGES) | {SYNC_WARP}


def _extern_name(x):
    if isinstance(x, ir.Call) and getattr(x.op, "name", "") == "tirx.call_extern":
        return str(x.args[0].value)
    return None


def _has_exchange(node) -> bool:
    return contains(node, lambda x: _extern_name(x) in _NAMES)


def lower_warp_ops(body):
    """Rewrite the exchanges of every thread launch of ``body`` (module docstring); also
    ``__ldg(&A[i])`` (``T.__ldg``, a read-only-cache load on CUDA) becomes ``A[i]``."""
    if contains(body, lambda x: _extern_name(x) == "__ldg"):
        body = tvm_ffi.structural_map(body, [(ir.Call, _plain_ldg)])
    if not _has_exchange(body):
        return body
    return rewrite_launches(body, _Block)


def _plain_ldg(call):
    if _extern_name(call) != "__ldg":
        return call
    address = call.args[1]  # address_of(A[i])
    return address.args[0]


class _Block(WarpBlock):
    """The exchanges of one block body with thread launches ``tvars`` (tag, extent, var);
    exchanges in loop bounds and ``if`` conditions are hoisted before the statement."""

    def __init__(self, tvars):
        super().__init__(tvars, hoist_controls=True)
        self.counter = 0

    # ------------------------------------------------------------------ statements
    def involves(self, node) -> bool:
        return _has_exchange(node)

    def while_condition_error(self, s):
        name = self._first_name(s.condition)
        return errors.compile_error(
            f"`T.{EXCHANGES.get(name, name)}` is not supported on cpu in a while "
            "condition (compute it into a variable before the loop and at the end of "
            "its body)",
            s.loc,
        )

    def leaf(self, s, dependent, parallel, guarded):
        if isinstance(s, ir.Evaluate) and _extern_name(s.value) == SYNC_WARP:
            self._check(SYNC_WARP, s.loc, parallel, guarded)
            from ...ops.sync.op import SYNC

            return ir.Evaluate(SYNC.make(loc=s.loc), loc=s.loc)
        if isinstance(s, ir.TensorStore):
            pre, (value, *idx) = self.hoist([s.value, *s.indices], s.loc, parallel, guarded)
            return ir.SeqStmt([*pre, ir.TensorStore(s.dest, idx, value, s.loc)])
        if isinstance(s, ir.Bind):
            pre, (value,) = self.hoist([s.value], s.loc, parallel, guarded)
            if uses_any(value, dependent) or pre:
                dependent.append(s.var)
            return ir.SeqStmt([*pre, ir.Bind(s.var, value, s.loc)])
        if isinstance(s, ir.Evaluate):
            pre, (value,) = self.hoist([s.value], s.loc, parallel, guarded)
            return ir.SeqStmt([*pre, ir.Evaluate(value, loc=s.loc)])
        if isinstance(s, ir.AssertStmt):
            pre, (cond, msg) = self.hoist([s.condition, s.message], s.loc, parallel, guarded)
            return ir.SeqStmt([*pre, ir.AssertStmt(cond, msg, s.loc)])
        name = self._first_name(s)
        raise errors.compile_error(
            f"`T.{EXCHANGES.get(name, name)}` is not supported on cpu inside a "
            f"{type(s).__name__} statement",
            getattr(s, "loc", None),
        )

    @staticmethod
    def _first_name(node):
        found = []

        def visit(x):
            name = _extern_name(x)
            if not found and name in _NAMES:
                found.append(name)

        tvm_ffi.structural_walk(node, visit)
        return found[0] if found else "?"

    def _check(self, name, loc, parallel, guarded):
        label = "sync_warp" if name == SYNC_WARP else EXCHANGES[name]
        if parallel:
            raise errors.compile_error(
                f"`T.{label}` is not supported on cpu inside T.Parallel (the CPU backend has no "
                "thread mapping for parallel loops; use the thread index, "
                "T.get_thread_binding(), outside T.Parallel)",
                loc,
            )
        if guarded:
            raise errors.compile_error(
                f"`T.{label}` is not supported on cpu under a condition or loop bound that "
                "depends on the thread index (every thread of the block must reach it)",
                loc,
            )
        if self.total is None:
            raise errors.compile_error(
                f"`T.{label}` is not supported on cpu with a dynamic thread count", loc
            )

    # ------------------------------------------------------------------ expressions
    def hoist(self, exprs, loc, parallel, guarded):
        """(statements to run first, ``exprs`` with every exchange replaced by its result)."""
        pre = []
        for x in exprs:  # checked first: an exception inside structural_map loses its type
            if isinstance(x, ir.Expr) and _has_exchange(x):
                self._check(self._first_name(x), loc, parallel, guarded)

        def on_call(call):
            name = _extern_name(call)
            return call if name not in EXCHANGES else self.exchange(name, call, pre)

        out = [
            x if not isinstance(x, ir.Expr) else tvm_ffi.structural_map(x, [(ir.Call, on_call)])
            for x in exprs
        ]
        return pre, out

    def _buffer(self, dtype, role):
        self.counter += 1
        var = ir.Var(f"warp_{role}{self.counter}", _T.Tensor((self.total,), dtype, scope="shared"))
        self.allocs.append(make_alloc(var))
        return var

    def exchange(self, name, call, pre):
        """Stage the operands of ``call``, compute it for every thread, return ``out[flat]``."""
        args = list(call.args[1:])
        getters = []
        for k, arg in enumerate(args):
            if isinstance(arg, ir.IntImm | ir.FloatImm):
                getters.append(lambda t, a=arg: a)
                continue
            buf = self._buffer(str(arg.ty), f"arg{k}_")
            pre.append(ir.TensorStore(buf, [self.flat], arg))
            getters.append(lambda t, b=buf: ir.TensorLoad(b, [t]))
        dtype = str(call.ty)
        out = self._buffer(dtype, "out")
        t = ir.Var("t", "int32")
        if name in BLOCK_VOTES:
            pre.append(self._block_vote(name, getters[0], out, t))
            pre.append(self.barrier())
            return ir.TensorLoad(out, [ir.const(0, "int32")])
        if name in SHUFFLES:
            body = self._shuffle(name, getters, out, t)
        else:
            body = self._warp_fold(name, getters, out, t, dtype)
        zero = ir.const(0, "int32")
        pre.append(ir.For(t, zero, ir.const(self.total, "int32"), ir.const(1, "int32"),
                          ir.ForKind.DEFAULT, body))  # fmt: skip
        pre.append(self.barrier())
        return ir.TensorLoad(out, [self.flat])

    def _shuffle(self, name, get, out, t):
        i32 = "int32"
        lane = _tirx.floormod(t, WARP_SIZE)
        base = t - lane
        value, k, width = get[1], get[2](t), get[3](t)
        seg = _tirx.floormod(lane, width)
        if name == "__shfl_xor_sync":
            src = _tirx.bitwise_xor(lane, k)
            ok = src < (lane - seg) + width
        elif name == "__shfl_down_sync":
            src, ok = lane + k, seg + k < width
        elif name == "__shfl_up_sync":
            src, ok = lane - k, seg >= k
        else:
            src, ok = (lane - seg) + _tirx.floormod(k, width), ir.const(True, "bool")
        ok = _tirx.all(ok, base + src < ir.const(self.total, i32), base + src >= 0)
        picked = value(_tirx.Select(ok, base + src, t))  # a lane without a partner keeps its own
        return ir.TensorStore(out, [t], picked)

    def _warp_fold(self, name, get, out, t, dtype):
        """out[t] = fold over the lanes j of t's warp (only lanes that exist)."""
        lane = _tirx.floormod(t, WARP_SIZE)
        base = t - lane
        j = ir.Var("j", "int32")
        src = base + j
        exists = src < ir.const(self.total, "int32")
        if name in REDUCTIONS:
            kind = REDUCTIONS[name].rsplit("_", 1)[1]
            value = get[0]
            init = value(base)
            fold = REDUCTION_COMBINE[kind]
            start = 1
            term = None
        else:
            init, start = ir.const(0, dtype), 0
            if name in ("__any_sync", "__all_sync"):
                pred = get[1]
                fold = _tirx.bitwise_or if name == "__any_sync" else _tirx.bitwise_and
                init = ir.const(0 if name == "__any_sync" else 1, dtype)

                def term(jj):
                    return _tirx.Cast(
                        dtype, _tirx.NE(pred(base + jj), ir.const(0, str(pred(t).ty)))
                    )

            else:
                fold = _tirx.bitwise_or
                one = ir.const(1, dtype)

                def bit(jj):
                    return _tirx.shift_left(one, _tirx.Cast(dtype, jj))

                if name == "__ballot_sync":
                    pred, mask = get[1], get[0]

                    def term(jj):
                        hit = _tirx.all(
                            _tirx.NE(pred(base + jj), ir.const(0, str(pred(t).ty))),
                            _in_mask(mask(t), jj),
                        )
                        return _tirx.if_then_else(hit, bit(jj), ir.const(0, dtype))

                elif name == "tl::match_all_sync":
                    value, mask = get[1], get[0]
                    fold, init = _tirx.bitwise_and, ir.const(1, dtype)

                    # every masked lane equals the highest masked lane (31 - clz(mask))
                    top = ir.const(31, "int32") - _tirx.Cast("int32", _tirx.clz(mask(t)))
                    ref = base + top
                    ref = _tirx.Select(ref < ir.const(self.total, "int32"), ref, t)

                    def term(jj):
                        agree = _tirx.any(
                            _tirx.EQ(value(base + jj), value(ref)), _not(_in_mask(mask(t), jj))
                        )
                        return _tirx.Cast(dtype, agree)

                elif name == "__match_any_sync":
                    value, mask = get[1], get[0]

                    def term(jj):
                        hit = _tirx.all(_tirx.EQ(value(base + jj), value(t)), _in_mask(mask(t), jj))
                        return _tirx.if_then_else(hit, bit(jj), ir.const(0, dtype))

                else:  # __activemask

                    def term(jj):
                        return bit(jj)

        if term is None:

            def term(jj):
                return get[0](base + jj)

        acc = ir.TensorLoad(out, [t])
        step = ir.If(exists, ir.TensorStore(out, [t], fold(acc, term(j))), None)
        loop = ir.For(j, ir.const(start, "int32"), ir.const(WARP_SIZE, "int32"),
                      ir.const(1, "int32"), ir.ForKind.DEFAULT, step)  # fmt: skip
        stmts = [ir.TensorStore(out, [t], init), loop]
        if name == "tl::match_all_sync":  # 1/0 -> mask/0
            zero = ir.const(0, dtype)
            picked = _tirx.Select(_tirx.NE(acc, zero), _tirx.Cast(dtype, get[0](t)), zero)
            stmts.append(ir.TensorStore(out, [t], picked))
        return ir.SeqStmt(stmts)

    def _block_vote(self, name, pred, out, t):
        zero = ir.const(0, "int32")
        term = _tirx.Cast("int32", _tirx.NE(pred(t), ir.const(0, str(pred(t).ty))))
        acc = ir.TensorLoad(out, [zero])
        if name == "__syncthreads_count":
            init, fold = 0, lambda a, b: a + b
        elif name == "__syncthreads_and":
            init, fold = 1, _tirx.bitwise_and
        else:
            init, fold = 0, _tirx.bitwise_or
        loop = ir.For(t, zero, ir.const(self.total, "int32"), ir.const(1, "int32"),
                      ir.ForKind.DEFAULT, ir.TensorStore(out, [zero], fold(acc, term)))  # fmt: skip
        return ir.SeqStmt([ir.TensorStore(out, [zero], ir.const(init, "int32")), loop])


def _not(cond):
    return _tirx.EQ(_tirx.Cast("int32", cond), ir.const(0, "int32"))


def _in_mask(mask, j):
    """Whether bit ``j`` of the uint32 ``mask`` is set."""
    bit = _tirx.shift_right(mask, _tirx.Cast(str(mask.ty), j))
    return _tirx.NE(_tirx.bitwise_and(bit, ir.const(1, str(mask.ty))), ir.const(0, str(mask.ty)))
