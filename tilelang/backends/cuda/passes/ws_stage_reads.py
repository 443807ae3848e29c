"""Element reads of a pipelined tile in a warp-specialized loop: when the release is safe.

A warp-specialized consumer (:mod:`.warp_specialize_auto`) hands a stage back with an
mbarrier arrive at the end of its iteration; the producer's next TMA load may overwrite the
stage as soon as every consumer arrived. For a stage read by ordinary loads (``lse[j]`` or
``Delta[j]`` of FlashAttention's backward, read in a ``T.Parallel``), the load must have
*returned* before the arrive is issued. Program order alone does not give that: on the H200
ptxas issued the arrive right after ldmatrix loads, before the mmas that used their values
(``tma_lowering._only_wgmma_readers``).

What does order them: a warpgroup gemm (``wgmma.mma_async``) is issued only once its register
operands are ready, a register produced from a load is ready only once the load returned
(GPUs issue in order, a dependent instruction waits on the load's scoreboard), and shared
operands written by ordinary stores are ordered by ``fence.proxy.async`` before the gemm. The
gemm's ``wgmma.wait_group`` precedes the arrive, and ptxas does not move an mbarrier arrive
above a ``wgmma.wait_group`` (CUTLASS's sm90 mainloops release their TMA stages the same way).
So a loop qualifies when the value of every element load of a pipelined tile reaches an
operand of a wgmma gemm later in the same iteration.

:func:`stage_loads_reach_wgmma` checks that by a taint walk over the loop body's top-level
statements in order: a load of a pipelined tile starts a taint; a statement that writes a
tensor from values carrying taints passes them on (a store that does not read its own tensor
replaces that tensor's taints: a dead value proves nothing); a wgmma gemm discharges the taints
of its operands. Anything the walk does not understand (a load of a tile in a statement kind
it does not model) answers False, keeping the loop unspecialized.
"""

from __future__ import annotations

import itertools

import tvm_ffi
from tvm_tirx import ir

from ....lowering.region import RegionView
from ....ops import tile_op_of

#: Operand names of the tile ops that write (the rest are read).
_WRITTEN = ("dst", "C")


class _Unsupported(Exception):
    """The walk met a statement it does not model while taints were live."""


def _handle(x):
    return x.__chandle__()


def _operand_tensor(value):
    try:
        return RegionView.of(value).tensor
    except Exception:  # noqa: BLE001 - a scalar operand
        return None


class _Taints:
    def __init__(self, planner, tiles):
        self.planner = planner
        self.tiles = {_handle(t) for t in tiles}
        self.of = {}  # tensor or scalar Var handle -> set of taint ids
        self.live = set()  # taint ids started and not yet discharged
        self.ids = itertools.count()
        self.scalars = {}  # Var handle -> taints, for the binds among top-level statements

    # ------------------------------------------------------------------ expressions
    def expr(self, e, scalars) -> set:
        """Taints an expression's value carries (new ones for loads of pipelined tiles)."""
        out = set()

        def load(x):
            h = _handle(x.source) if isinstance(x.source, ir.Var) else None
            if h in self.tiles:
                t = next(self.ids)
                self.live.add(t)
                out.add(t)
            elif h is not None:
                out.update(self.of.get(h, ()))

        def var(v):
            out.update(scalars.get(_handle(v), ()))

        tvm_ffi.structural_walk(e, [(ir.TensorLoad, load), (ir.Var, var)])
        return out

    # ------------------------------------------------------------------ statements
    def top(self, stmt):
        found = tile_op_of(stmt)
        if found is not None:
            self.tile_op(stmt, *found)
            return
        writes = {}  # tensor handle -> (taints, reads itself)
        self.stmt(stmt, self.scalars, set(), writes)
        for h, (taints, reads_self) in writes.items():
            self.of[h] = (self.of.get(h, set()) if reads_self else set()) | taints

    def stmt(self, s, scalars, ctrl, writes):
        if isinstance(s, ir.SeqStmt):
            for x in s.seq:
                self.stmt(x, scalars, ctrl, writes)
        elif isinstance(s, ir.For):
            inner = dict(scalars)
            bound = self.expr(s.begin, scalars) | self.expr(s.end, scalars)
            inner[_handle(s.var)] = bound
            self.stmt(s.body, inner, ctrl | bound, writes)
        elif isinstance(s, ir.If):
            cond = ctrl | self.expr(s.condition, scalars)
            self.stmt(s.then_case, scalars, cond, writes)
            if s.else_case is not None:
                self.stmt(s.else_case, scalars, cond, writes)
        elif isinstance(s, ir.Bind):
            scalars[_handle(s.var)] = self.expr(s.value, scalars)
        elif isinstance(s, ir.TensorStore):
            h = _handle(s.dest)
            taints = set(ctrl) | self.expr(s.value, scalars)
            for i in s.indices:
                taints |= self.expr(i, scalars)
            reads_self = []

            def load(x):
                if isinstance(x.source, ir.Var) and _handle(x.source) == h:
                    reads_self.append(x)

            tvm_ffi.structural_walk(s.value, [(ir.TensorLoad, load)])
            old = writes.get(h, (set(), False))
            writes[h] = (old[0] | taints, old[1] or bool(reads_self))
        elif self.touches(s, scalars):  # a nested tile op or call, a While ...: not modeled
            raise _Unsupported

    def touches(self, node, scalars) -> bool:
        """Whether ``node`` reads a pipelined tile or a value carrying live taints."""
        hit = []

        def source(x):
            h = _handle(x.source) if isinstance(x.source, ir.Var) else None
            if h is not None and (h in self.tiles or self.of.get(h, set()) & self.live):
                hit.append(x)

        def var(v):
            if scalars.get(_handle(v), set()) & self.live:
                hit.append(v)

        tvm_ffi.structural_walk(
            node, [(ir.TensorLoad, source), (ir.TensorRegion, source), (ir.Var, var)]
        )
        return bool(hit)

    def tile_op(self, stmt, op, call):
        view = op.view(call)
        if self.planner._reader_of(stmt) is not None:  # a wgmma gemm: discharge
            read = ("A", "B") if getattr(view, "clear_accum", False) else ("A", "B", "C")
            for name in read:  # (a cleared accumulator is not read)
                t = _operand_tensor(getattr(view, name))
                if t is not None:
                    self.live -= self.of.get(_handle(t), set())
            c = _operand_tensor(view.C)
            if c is not None:
                self.of[_handle(c)] = set()
            return
        reads, written = set(), []
        for name in op.operands:
            value = getattr(view, name)
            t = _operand_tensor(value)
            if name in _WRITTEN:
                if t is not None:
                    written.append(t)
                    if getattr(view, "clear_accum", True) is False or (
                        name == "dst" and getattr(view, "clear", True) is False
                    ):
                        reads |= self.of.get(_handle(t), set())
                continue
            if t is not None:
                if _handle(t) in self.tiles:
                    raise _Unsupported  # a tile op reading a stage (handled elsewhere)
                reads |= self.of.get(_handle(t), set())
            elif self.touches(value, {}):
                raise _Unsupported
        for t in written:
            self.of[_handle(t)] = set(reads)


def stage_loads_reach_wgmma(planner, rest, tiles) -> bool:
    """Whether every element load of a pipelined tile (``tiles``) in the loop body ``rest``
    (top-level statements, in order) feeds an operand of a later wgmma gemm of the same
    iteration (module doc); True when there are no such loads."""
    walk = _Taints(planner, tiles)
    try:
        for s in rest:
            walk.top(s)
    except _Unsupported:
        return False
    return not walk.live


__all__ = ["stage_loads_reach_wgmma"]
