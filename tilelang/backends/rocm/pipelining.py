"""Software pipelining of ``T.Pipelined`` loops on ROCm: register-staged prefetch into
multi-buffered LDS tiles.

CDNA2/3 have no cp.async, and the direct global -> LDS loads (``global_load_lds_dword*``,
gfx90a/gfx94x: at most 4 bytes a lane; 16 bytes only on gfx950) have no builtin in the
HIP toolchain this backend compiles with (Debian's clang 15: no
``__builtin_amdgcn_global_load_lds``, no gfx942/gfx950 target). So the next tile travels
global -> registers -> LDS, the schedule of AMD's own CK/rocBLAS kernels.

Assumes: tile-op level (after layout inference, before tile-op lowering), as
``backends/cuda/passes/pipeline_planning.py``, whose eligibility rules it shares: a loop
annotated ``num_stages = S >= 2`` whose body starts with ``T.copy(global -> shared)`` calls
that move 16-byte vectors (``AsyncCopy``: 8/16/32-bit elements, contiguous rows a multiple
of 16 bytes, provably aligned offsets), each destination tile used only in the loop.

*Later copies* (``backends/cuda/passes/pipeline_copies.py``: a later top-level
``T.copy(global -> shared)`` that may move to the top of the body, FlashAttention's V) are
staged with the leading ones unless the pass config ``tl.pipeline_copy_schedule`` is
``"leading"`` (then they stay synchronous where they are); ``"split"`` has no meaning here
(there are no cp.async groups) and hoists them as ``"hoist"`` does.

Each destination tile ``X`` becomes ``X_mb`` of shape ``(S, *shape)``; uses in the loop
body address stage ``(k - begin) % S``. With ``ahead = S - 1``::

    prologue: for s < ahead: load(begin + s) -> registers; store registers -> stage s
    loop k:   __syncthreads()
              load(k + ahead) -> registers            (zero where k + ahead >= end)
              rest of the body (reads stage (k - begin) % S; the MFMAs overlap the loads)
              store registers -> stage (k - begin + ahead) % S

One barrier an iteration: it makes the stores of iteration k-1 visible, and every thread
has finished iteration k-1's reads of the stage iteration k refills (stage
``(k - begin - 1) % S``, S >= 2) before it. The stores are ``tl::stage_copy`` calls and
the loop carries ``tl_async_stages``, so ``insert_sync`` treats them as pipeline-stage
writes and adds no barrier of its own for them (``backends/cuda/passes/insert_sync.py``).

Loads are ``tl::load_vec<16>`` into a per-copy register array: a 16-byte ``memcpy``, one
``global_load_dwordx4`` whatever the base pointer's alignment (global tensors promise only
element alignment; CDNA loads unaligned dwords, and ROCm runs in unaligned mode). The
register array is only ever accessed 16 bytes at a time, so it stays in VGPRs (no
scratch). Vectors outside the global tensor (tails) are zero, as the unpipelined copy
makes them.

Guarantees: the loop computes what the unpipelined loop computes. Loops that do not match
(``S < 2``, no eligible leading copy) are left as they are: their copies stay synchronous.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.tirx.tensor import TensorType

from ...lowering.context import LowerContext
from ...lowering.irb import seq
from ...lowering.region import RegionView
from ...lowering.stmt import StmtMutator
from ...lowering.thread_utils import alloc, new_tensor
from ...lowering.vectorize import ZERO_VEC, vector_call
from ..cuda.passes.insert_sync import ATTR_ASYNC_STAGES
from ..cuda.passes.pipeline_copies import _later_copies
from ..cuda.passes.pipeline_planning import (
    VEC_BYTES,
    _count_uses,
    _leading_copies,
    _ReplaceAllocs,
    _restage,
    _with_loop,
    sync_threads,
)

#: ``tl::stage_copy<N>(lds, regs)``: a register -> LDS store into a pipeline stage
#: (``include/tl_hip.h``; ``insert_sync`` counts it as a pipeline-stage write)
STAGE_COPY = "tl::stage_copy"
#: ``tl::load_vec<N>(regs, global)``: N bytes from a global address of any alignment
LOAD_VEC = "tl::load_vec"


class _Piece:
    """One 16-byte vector of a copy, as ``AsyncCopy.issue`` lays it out: its LDS address,
    its global element (a TensorLoad), the predicate under which it reads the source
    (else zero) and the guard under which this thread has the vector at all."""

    def __init__(self, stmt):
        self.guard = None
        if isinstance(stmt, ir.If) and stmt.else_case is None:
            self.guard, stmt = stmt.condition, stmt.then_case
        call = stmt.value if isinstance(stmt, ir.Evaluate) else None
        name = str(call.args[0].value) if call is not None and call.args else ""
        if not name.startswith("tl::cp_async_gs"):
            raise ValueError(f"unexpected statement in a staged copy: {stmt}")
        self.sptr, gptr = call.args[1], call.args[2]
        self.pred = call.args[3] if len(call.args) > 3 else None
        self.source = gptr.args[0]  # address_of(A[...]) -> A[...]

    def guarded(self, stmt):
        return stmt if self.guard is None else ir.If(self.guard, stmt, None)


class _StagedCopy:
    """A leading copy of a pipelined loop, moved through a register array."""

    def __init__(self, copy, stages):
        self.copy = copy
        self.vec = copy.vec
        tile = copy.dst.tensor
        self.tile = tile
        self.multi = ir.Var(
            f"{tile.name}_mb",
            TensorType(
                [ir.const(stages, "int32"), *tile.ty.shape], tile.ty.dtype, scope=tile.ty.scope
            ),
        )
        self.regs = None  # set by pieces() once the vector count is known

    def pieces(self, pctx, ctx, k, k_value, stage, pred):
        """The vectors this thread moves for tile ``k_value`` into ``stage``."""
        c = self.copy
        dst = RegionView(self.multi, [stage, *c.dst.begins], [1, *c.dst.extents])
        layout = pctx.get_layout(self.multi)
        stmts = c.issue(ctx, pctx.thread_var, int(pctx.threads), layout, {k: k_value}, dst, pred)
        pieces = [_Piece(s) for s in stmts]
        if self.regs is None:
            self.regs = new_tensor(
                f"{self.tile.name}_stage", [len(pieces) * self.vec], str(c.src.dtype), "local"
            )
        return pieces

    def loads(self, pieces):
        """Global -> registers (zero where the predicate fails)."""
        out = []
        for i, p in enumerate(pieces):
            slot = _tirx.address_of(ir.TensorLoad(self.regs, [ir.const(i * self.vec, "int32")]))
            load = vector_call(LOAD_VEC, VEC_BYTES, slot, _tirx.address_of(p.source))
            if p.pred is not None:
                load = ir.If(p.pred, load, vector_call(ZERO_VEC, VEC_BYTES, slot))
            out.append(p.guarded(load))
        return out

    def stores(self, pieces):
        """Registers -> the LDS stage."""
        out = []
        for i, p in enumerate(pieces):
            slot = ir.TensorLoad(self.regs, [ir.const(i * self.vec, "int32")])
            call = _tirx.call_extern(
                f"{STAGE_COPY}<{VEC_BYTES}>", p.sptr, _tirx.address_of(slot), ty="void"
            )
            out.append(p.guarded(ir.Evaluate(call)))
        return out


class _Planner(StmtMutator):
    def __init__(self, pctx, root):
        super().__init__("rocm")
        self.pctx = pctx
        self.root = root
        self.replaced = {}  # old tile Var -> multi-buffered Var

    def visit_For(self, stmt, ctx):
        out = super().visit_For(stmt, ctx)
        ann = stmt.annotations or {}
        stages = int(ann["num_stages"]) if "num_stages" in ann else 0
        if stages < 2 or self.pctx.thread_var is None:
            return out
        inner = ctx.with_range(stmt.var, stmt.begin, stmt.end - stmt.begin)
        planned = self._plan(out, stages, inner)
        return out if planned is None else planned

    def _plan(self, loop, stages, ctx):
        copies, rest = _leading_copies(loop.body, ctx)
        if not copies:
            return None
        if self.pctx.options["copy_schedule"] != "leading":  # later copies join them
            taken = [c.dst.tensor for c in copies]
            later = _later_copies(rest, loop, ctx, taken, self.root)
            copies += [c for _, c in later]
            hoisted = {i for i, _ in later}
            rest = [s for i, s in enumerate(rest) if i not in hoisted]
        if not rest:
            return None
        tiles = [c.dst.tensor for c in copies]
        if any(a.same_as(b) for i, a in enumerate(tiles) for b in tiles[i + 1 :]):
            return None
        for t in tiles:  # used only inside this loop (one use outside: its allocation)
            if _count_uses(self.root, t) != _count_uses(loop, t) + 1:
                return None
        staged = [_StagedCopy(c, stages) for c in copies]
        mapping = {s.tile: s.multi for s in staged}
        for s in staged:
            layout = self.pctx.get_layout(s.tile)
            if layout is not None:
                self.pctx.layout_map[s.multi] = layout.expand([stages])
        k, begin, end = loop.var, loop.begin, loop.end
        rel, ahead = k - begin, stages - 1

        def move(k_value, stage, ictx, pred):
            pieces = [s.pieces(self.pctx, ictx, k, k_value, stage, pred) for s in staged]
            loads = [x for s, p in zip(staged, pieces) for x in s.loads(p)]
            return seq(loads), [x for s, p in zip(staged, pieces) for x in s.stores(p)]

        def predicate(cond, pctx):
            return None if pctx.prove(cond) else pctx.simplify(cond)

        prologue = []
        for s in range(ahead):
            loads, stores = move(
                begin + s, ir.const(s, "int32"), ctx, predicate(begin + s < end, ctx)
            )
            prologue += [loads, *stores]
        # under k + ahead < end the source offsets can use the narrower range of k
        narrow = ctx.with_range(k, begin, end - begin - ahead)
        loads, stores = move(
            k + ahead, (rel + ahead) % stages, narrow, predicate(k + ahead < end, ctx)
        )
        rest_body = _restage(seq(list(rest)), mapping, rel % stages)
        body = [sync_threads(), loads, rest_body, *stores]
        self.replaced.update(mapping)
        self.pctx.extra_allocs.extend(alloc(s.regs) for s in staged)
        return seq([*prologue, _with_loop(loop, body, {ATTR_ASYNC_STAGES: 1})])


def plan_register_pipelines(func, ctx):
    """Software-pipeline every matching ``T.Pipelined`` loop of ``func`` (module doc);
    ``ctx`` is the ROCm lowering context (threads, thread variable, layouts)."""
    planner = _Planner(ctx, func.body)
    body = planner(func.body, LowerContext("rocm", threads=int(ctx.threads)))
    if planner.replaced:
        body = _ReplaceAllocs(planner.replaced)(body)
    return func.with_body(body)


__all__ = ["STAGE_COPY", "plan_register_pipelines"]
