"""Reads of a pipelined tile in a warp-specialized loop: how a consumer releases the stage.

A warp-specialized consumer (:mod:`.warp_specialize_auto`) hands a stage back with an
mbarrier arrive at the end of its iteration; the producer's next TMA load may overwrite the
stage as soon as every consumer arrived. For a stage read by ordinary loads (``lse[j]`` or
``Delta[j]`` of FlashAttention's backward, read in a ``T.Parallel``), the load must have
*returned* before the arrive is issued. Program order alone does not give that: on the H200
ptxas issued the arrive right after ldmatrix loads, before the mmas that used their values
(benchmark/RESULTS.md, session 5).

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
it does not model) answers False.

Every other access of a stage through the generic proxy (``ldmatrix`` of a ``T.copy`` into a
fragment, an mma.sync gemm reading the tile, element loads whose values go elsewhere, stores
into the tile) is released with a cross-proxy fence (:func:`stage_release`): each consumer
thread runs ``fence.proxy.async.shared::cta`` after its last access of the stage and before
its arrive on the stage's empty barrier; the producer's acquire wait on that barrier then
orders the next TMA write (async proxy) after those accesses. The PTX memory model asks for
a proxy fence between generic and async-proxy accesses of the same bytes; the mbarrier's
release/acquire alone orders the generic proxy only. This is what CUTLASS's sm90 TMA epilogue
does before ``consumer_release`` of a source stage read with ordinary shared loads
(``fence_view_async_shared()``), and Triton's proxy-fence insertion between a ``local_load``
and a later TMA load of the buffer. Placing the arrive after the mma.sync that consumes the
ldmatrix registers would not do: ptxas orders an arrive after memory operations, not after
register-only instructions, and issued it right after the ldmatrix calls on the H200. In the
SASS the fence is ``MEMBAR.ALL.CTA; FENCE.VIEW.ASYNC.S`` before the arrive (the membar:
this thread's earlier loads are performed); ptxas may still schedule mmas consuming the last
ldmatrix registers after the arrive, which is then harmless.
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


#: :func:`stage_release` answers: the wgmma's wait orders every access of the stage / each
#: consumer thread fences its generic-proxy accesses before its arrive.
RELEASE_AFTER_WGMMA = "after_wgmma"
RELEASE_FENCED = "fenced"


def _explicit_hopper(op) -> bool:
    return "barrier" in op.name or "tma" in op.name or "wgmma" in op.name


def stage_release(planner, rest, mapping, wgmma: bool, arch: str = "sm_90a"):
    """How a warp-specialized consumer may hand back the stages of the loop whose body after
    its pipelined copies is ``rest`` (``mapping``: pipelined tile -> staged tile; ``wgmma``:
    the body has a wgmma gemm): :data:`RELEASE_AFTER_WGMMA` when wgmma gemms are the only
    readers of the tiles, or element loads whose values feed one (module doc);
    :data:`RELEASE_FENCED` when other statements access them through the generic proxy
    (ldmatrix, mma.sync, ``T.copy``, element loads or stores); None when the loop is not
    specialized: the body uses explicit Hopper ops (mbarriers, ``T.tma_copy``,
    ``T.wgmma_gemm``: a program that schedules itself), has neither a wgmma nor an
    mma.sync gemm (a loop without tensor-core work keeps cp.async), or has only mma.sync
    gemms on an ``arch`` other than sm_90/sm_90a (the specialized mma.sync loop was checked
    on the H200 only)."""
    from ....ops.copy.op import COPY

    tiles = {_handle(t) for t in mapping}
    explicit, generic, gemms, loads = [], [], [], []

    def visit(stmt):
        found = tile_op_of(stmt)
        if found is None:
            return
        op, call = found
        if _explicit_hopper(op):
            explicit.append(stmt)
        elif op.name == "gemm":
            gemms.append(stmt)
            if planner._reader_of(stmt) is None:  # mma.sync (or scalar): ordinary loads
                view = op.view(call)
                if any(_handle(RegionView.of(getattr(view, x)).tensor) in tiles for x in "AB"):
                    generic.append(stmt)
        elif op.name == "copy":
            view = COPY.view(call)
            if any(_handle(RegionView.of(x).tensor) in tiles for x in (view.src, view.dst)):
                generic.append(stmt)
        else:
            for name in op.operands:  # any other tile op touching a stage (T.fill, ...)
                t = _operand_tensor(getattr(op.view(call), name))
                if t is not None and _handle(t) in tiles:
                    generic.append(stmt)
                    break

    def load(x):
        if isinstance(x.source, ir.Var) and _handle(x.source) in tiles:
            loads.append(x)

    def store(s):
        if _handle(s.dest) in tiles:
            generic.append(s)

    body = ir.SeqStmt(list(rest))
    tvm_ffi.structural_walk(
        body, [(ir.Evaluate, visit), (ir.TensorLoad, load), (ir.TensorStore, store)]
    )
    # a loop a T.annotate_ws_schedule producer/consumer schedule specializes needs no gemm
    scheduled = planner.pctx.options.get("ws_schedule_loop", False)
    if explicit or not (wgmma or gemms or scheduled) or not (wgmma or arch in ("sm_90", "sm_90a")):
        return None
    if generic or (loads and not stage_loads_reach_wgmma(planner, list(rest), list(mapping))):
        return RELEASE_FENCED
    return RELEASE_AFTER_WGMMA if wgmma else RELEASE_FENCED


__all__ = ["RELEASE_AFTER_WGMMA", "RELEASE_FENCED", "stage_loads_reach_wgmma", "stage_release"]
