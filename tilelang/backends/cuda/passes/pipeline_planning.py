"""PlanPipelines: software pipelining of ``T.Pipelined`` loops with cp.async (sm_80+).

Assumes: the function is at tile-op level (after layout inference, before tile-op
lowering); ``ctx`` has ``threads``, ``layout_map`` (tensor Var -> Layout, updated in
place for the new multi-buffered tensors) and optionally ``thread_var`` (else the
``threadIdx.x`` launch variable is used).

For each serial loop annotated ``num_stages = S >= 1`` whose body starts with
``T.copy(global -> shared)`` calls (the *leading copies*) that can use 16-byte cp.async
(16-bit or 8-bit elements, contiguous dimension a multiple of the 16-byte vector and
provably aligned), with each destination shared tile used only inside the loop:

* each destination tile ``X`` (shape ``s``) becomes ``X_mb`` of shape ``(S, *s)`` with
  layout ``layout(X).expand([S])``; every use of ``X`` in the loop body addresses stage
  ``(k - begin) % S``;
* the copies become 16-byte ``cp.async`` (zero-filling vectors outside the global
  tensor), issued ``S - 1`` iterations ahead::

      prologue: for s < S-1: issue(begin + s) -> stage s; commit
      loop k:   cp.async.wait_group S-2; __syncthreads()
                issue(k + S-1) -> stage (k-begin+S-1) % S (guarded k + S-1 < end); commit
                rest of the body (reads stage (k-begin) % S)
      after:    cp.async.wait_group 0

  The barrier after the wait makes every thread's copies visible and guarantees that
  every thread finished iteration k-1, whose stage is the one refilled. ``S == 1``:
  issue, commit, wait 0, barrier, body, barrier (no overlap).

wgmma gemms (sm_90a, ``tilelang/ops/gemm_wgmma.py``) in the loop body read the tiles
through the async proxy, so the steady state becomes ``wait_group; fence.proxy.async;
__syncthreads()`` (each thread fences its own completed cp.async writes before the
barrier); a wgmma gemm whose A and B are pipelined tiles not touched before it in the body
is marked ``tl_wgmma_fenced`` (it then skips its own fence). With ``S >= 3`` and a single
top-level wgmma gemm whose accumulator nothing else in the body touches, one wgmma group
stays in flight across iterations: the gemm waits for ``wgmma.wait_group 1`` (attribute
``tl_wgmma_in_flight``), ``wait_group 0`` follows the loop, and the copies run ``S - 2``
iterations ahead instead of ``S - 1`` (the stage refilled at iteration k was read by the
wgmma of iteration k-2, which every warpgroup completed before the barrier)::

      loop k:   cp.async.wait_group S-3; fence.proxy.async; __syncthreads()
                issue(k + S-2) -> stage (k-begin+S-2) % S (guarded); commit
                gemm (wgmma ... commit; wait_group 1)
      after:    cp.async.wait_group 0; wgmma.wait_group 0

mma.sync gemms (``tilelang/ops/gemm_cuda.py``): when the body after the copies is one
16-bit gemm of two pipelined tiles with an even number of k16 slices ``tk`` (A in shared
memory, no ``clear_accum``), the gemm is split into phases that share double-buffered
fragment registers (``PHASE_PREFETCH``/``PHASE_MAIN``/``PHASE_LAST``), the sm80 CUTLASS
schedule: the next tile's slice-0 fragments are loaded right after the iteration's
barrier, while the mmas of the current tile's last slice still run, so no warp waits for
ldmatrix after the barrier::

      prologue: copies of tiles begin .. begin+S-2 (one group each)
                cp.async.wait_group S-2; __syncthreads(); load slice 0 of stage 0
      loop k:   ldmatrix slice 1; mmas slice 0          (stage (k-begin) % S)
                issue(k + S-1) -> stage (k-begin+S-1) % S, zero-filling when
                k + S-1 >= end (predicated, no branch); commit
                ldmatrix slice ki+1; mmas slice ki      (1 <= ki < tk-1)
                cp.async.wait_group S-2; __syncthreads()
                ldmatrix slice 0 of stage (k-begin+1) % S; mmas slice tk-1
      after:    cp.async.wait_group 0

  The stage refilled at iteration k was last read before the barrier of iteration k-1;
  the loop carries ``tl_async_stages`` so that ``insert_sync`` adds no barrier between
  those reads and the copies (it sees whole tiles, not stages). ``tl.mma_split_pipeline = False``
  (module attribute) keeps the plain schedule above.

Copies after the leading ones (pass config ``tl.pipeline_copy_schedule``, :mod:`.pipeline_copies`): a later
top-level ``T.copy(global -> shared)`` that can move to the top of the body (FlashAttention's
V copy, after Q @ K^T and softmax) is pipelined too. ``"hoist"`` (default with ``S >= 2``)
adds it to the leading copies (the schedules above, one group and one barrier per
iteration); ``"split"`` (default with ``S == 1``) gives it its own stages and group, waited
for (with its own barrier) where it stood, so that with one stage its load overlaps the
statements before it. ``"leading"`` keeps later copies synchronous (the old schedule).
Outside ``"leading"``, a wgmma gemm also skips its own fence when its A is in registers, or
when a shared operand is no pipelined tile but nothing else in the loop touches it (Q in
FlashAttention: written before the loop, fenced by the loop's fence in every iteration).

The pass config ``tl.wgmma_in_flight = False`` turns the in-flight schedule off;
``tl.wgmma_copies_after = True`` issues the copies after the wgmma batch (the gemm is marked
``tl_wgmma_defer_wait`` and the loop waits for ``wait_group 1`` after the copies).

Guarantees: the results of the loop are those of the original loop. ``order``/``stage``/
``group`` annotations are honored in a warp-specialized loop when legal (its consumer loop
becomes prologue, steady state and epilogue: :mod:`.pipeline_order`; pass configs
``tl.pipeline_order``, and ``tl.wgmma_overlap`` for the same schedule without annotations),
otherwise ignored with a note in ``tl.tma`` (the schedules above are always valid).
Loops that do not match are left unchanged (their copies lower synchronously).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, tirx
from tvm_tirx.tirx.tensor import TensorType

from ....layout.swizzle import dtype_bits
from ....lowering.context import LowerContext
from ....lowering.global_layouts import vectorizable
from ....lowering.kernel_hints import ATTR_NO_SET_MAX_NREG
from ....lowering.region import RegionView, _const
from ....lowering.shared_address import shared_ptr
from ....lowering.stmt import StmtMutator, alloc_of, launch_of, substitute, uses_any
from ....lowering.thread_utils import extern_stmt as _call
from ....lowering.thread_utils import i32
from ....ops import tile_op_of
from ....ops.copy.op import COPY, matched_axes
from ....ops.registry import pipeline_rule_for
from .insert_sync import ATTR_ASYNC_STAGES
from .pipeline_copies import _later_copies, _plan_split_copies, inline_address_binds
from .pipeline_order import ordered_loop, plan_order, plan_overlap
from .tma_lowering import tma_loop

VEC_BYTES = 16


def make_alloc(var) -> ir.Bind:
    """``var = alloc_tensor()`` (with the empty attrs CUDA codegen expects)."""
    return ir.Bind(var, ir.Call("tirx.alloc_tensor", [], attrs={}, ty_args=[var.ty], ty=var.ty))


def sync_threads():
    return _call("__syncthreads")


def fence_proxy_async():
    return _call("tl::fence_proxy_async_shared")


def cp_async_commit():
    return _call("tl::cp_async_commit")


def cp_async_wait(n: int):
    return _call(f"tl::cp_async_wait<{int(n)}>")


# ---------------------------------------------------------------------------------------
# one copy as cp.async
# ---------------------------------------------------------------------------------------
class AsyncCopy:
    """A ``T.copy(global -> shared)`` that can be issued as 16-byte cp.async."""

    def __init__(self, view, ctx):
        self.view = view
        src, dst = RegionView.of(view.src), RegionView.of(view.dst)
        self.src, self.dst = src, dst
        self.ok = False
        if not src.scope.startswith("global") or not dst.scope.startswith("shared"):
            return
        if not vectorizable(src.tensor):
            return  # a global tensor with a storage layout: 16-byte pieces are not contiguous
        if src.dtype != dst.dtype or dtype_bits(src.dtype) not in (8, 16, 32):
            return
        sa, da, extents = matched_axes(src, dst, view.loc)
        if not sa or sa[-1] != len(src.extents) - 1 or da[-1] != len(dst.extents) - 1:
            return  # the contiguous dimensions must iterate together
        ext = [_const(e) for e in extents]
        if any(e is None for e in ext):
            return
        self.vec = VEC_BYTES * 8 // dtype_bits(src.dtype)
        row_len = _const(src.shape[-1])
        if ext[-1] % self.vec or row_len is None or row_len % self.vec:
            return
        if not ctx.prove(ir.prim.floormod(src.begins[-1], self.vec) == 0):
            return
        if not ctx.prove(ir.prim.floormod(dst.begins[-1], self.vec) == 0):
            return
        self.sa, self.da, self.ext = sa, da, ext
        self.ok = True

    def issue(self, ctx, tx, threads: int, layout, subst=None, dst_view=None, pred=None):
        """Statements issuing this copy (``subst``: Var -> value in the source indices).

        ``pred``: a uniform condition under which the copy reads its source; where it is
        false the copy zero-fills its destination instead (``cp_async_gs_conditional``).
        """
        src, dst = self.src, dst_view or self.dst
        if subst:
            src = RegionView(src.tensor, [substitute(b, subst) for b in src.begins], src.extents)
        ext = list(self.ext)
        ext[-1] //= self.vec
        total = 1
        for e in ext:
            total *= e
        iters = (total + threads - 1) // threads
        stmts = []
        for it in range(iters):
            v = tx + it * threads
            coords, rem = [], v
            for e in reversed(ext):
                coords.append(rem % e)
                rem = rem // e
            coords.reverse()
            coords[-1] = coords[-1] * self.vec
            s_idx = src.index(dict(zip(self.sa, coords)))
            rank = len(dst.extents)
            shift = rank - len(self.dst.extents)  # leading stage axis of a multi-buffer
            d_rel = {a + shift: x for a, x in zip(self.da, coords)}
            d_row = d_rel.get(rank - 2, 0)
            d_col = d_rel.get(rank - 1, 0)
            lead = {a: x for a, x in d_rel.items() if a < rank - 2}
            dst_lead = RegionView(dst.tensor, dst.index(lead), dst.extents) if lead else dst
            sptr = shared_ptr(dst_lead, layout, i32(d_row), i32(d_col))
            gptr = tirx.address_of(ir.TensorLoad(src.tensor, s_idx))
            conds = [] if pred is None else [pred]
            conds += [
                ctx.simplify(i < n)
                for a, (i, n) in enumerate(zip(s_idx, src.shape))
                if a in self.sa and not ctx.prove(i < n)
            ]
            if total % threads and it == iters - 1:
                guard = v < total
            else:
                guard = None
            if conds:
                pred = conds[0]
                for cnd in conds[1:]:
                    pred = ir.prim.And(pred, cnd)
                stmt = _call(f"tl::cp_async_gs_conditional<{VEC_BYTES}>", sptr, gptr, pred)
            else:
                stmt = _call(f"tl::cp_async_gs<{VEC_BYTES}>", sptr, gptr)
            stmts.append(stmt if guard is None else ir.If(guard, stmt, None))
        return stmts


# ---------------------------------------------------------------------------------------
# rewriting uses of a tile to a stage of its multi-buffered replacement
# ---------------------------------------------------------------------------------------
def _restage(node, mapping: dict, stage):
    """Replace tensor ``X`` by ``X_mb[stage, ...]`` in regions, loads and stores."""
    handles = {k.__chandle__(): v for k, v in mapping.items()}

    def region(r):
        new = handles.get(r.source.__chandle__()) if isinstance(r.source, ir.Var) else None
        if new is None:
            return r
        ranges = [ir.Range.from_min_extent(stage, ir.const(1, "int32"))] + list(r.region)
        return ir.TensorRegion(new, ranges, r.ty, r.loc)

    def load(x):
        new = handles.get(x.source.__chandle__()) if isinstance(x.source, ir.Var) else None
        return x if new is None else ir.TensorLoad(new, [stage, *x.indices], x.loc)

    def store(x):
        new = handles.get(x.dest.__chandle__()) if isinstance(x.dest, ir.Var) else None
        if new is None:
            return x
        return ir.TensorStore(new, [stage, *x.indices], x.value, x.loc)

    return tvm_ffi.structural_map(
        node,
        [(ir.TensorRegion, region), (ir.TensorLoad, load), (ir.TensorStore, store)],
    )


def _uses(node, var) -> bool:
    return uses_any(node, [var])


def _leading_copies(body, ctx):
    stmts = list(body.seq) if isinstance(body, ir.SeqStmt) else [body]
    copies = []
    for s in stmts:
        found = tile_op_of(s)
        if found is None or found[0].name != "copy":
            break
        ac = AsyncCopy(COPY.view(found[1]), ctx)
        if not ac.ok:
            break
        copies.append(ac)
    return copies, stmts[len(copies) :]


# ---------------------------------------------------------------------------------------
# the pass
# ---------------------------------------------------------------------------------------
class _Planner(StmtMutator):
    def __init__(self, pctx, root):
        super().__init__("cuda")
        self.pctx = pctx
        self.root = root
        self.tx = getattr(pctx, "thread_var", None)
        self.threads = int(pctx.threads)
        self.replaced = {}  # old tensor Var -> multi-buffered Var
        # automatic warp specialization (passes/warp_specialize_auto.py): the loop it may
        # apply to, the scalars its producer may not read, and the parts once planned
        self.ws_loop = None
        self.ws_forbidden = set()
        self.ws_parts = None

    def visit_RegionStmt(self, stmt, ctx):
        launch = launch_of(stmt)
        if launch is not None and launch[0] == "threadIdx.x" and self.tx is None:
            self.tx = launch[2]
        return super().visit_RegionStmt(stmt, ctx)

    def visit_For(self, stmt, ctx):
        out = super().visit_For(stmt, ctx)
        ann = stmt.annotations or {}
        stages = int(ann["num_stages"]) if "num_stages" in ann else 0
        if stages < 1 or self.tx is None:
            return out
        planned = self._plan(
            out, stages, ctx.with_range(stmt.var, stmt.begin, stmt.end - stmt.begin)
        )
        return out if planned is None else planned

    def _plan(self, loop, stages, ctx):
        loop = inline_address_binds(loop, self.root)
        copies, rest = _leading_copies(loop.body, ctx)
        if not copies:
            return None
        # original body index of each statement of ``rest`` / of each pipelined copy
        rest_index = list(range(len(copies), len(copies) + len(rest)))
        copy_index = list(range(len(copies)))
        mode = copy_schedule(stages, self.pctx.options)
        later = []
        if mode != "leading":
            later = _later_copies(rest, loop, ctx, [c.dst.tensor for c in copies], self.root)
        if mode == "hoist" or (mode == "split" and stages >= 2 and not later):
            copies = copies + [c for _, c in later]
            hoisted = {j for j, _ in later}
            copy_index += [rest_index[j] for j in sorted(hoisted)]
            rest = [s for i, s in enumerate(rest) if i not in hoisted]
            rest_index = [x for i, x in enumerate(rest_index) if i not in hoisted]
            later = []
        tiles = []
        for c in copies + [c for _, c in later]:
            t = c.dst.tensor
            if any(t.same_as(x) for x in tiles):
                return None
            tiles.append(t)
        # the tiles must be used only inside this loop (its stage index is meaningless outside)
        for t in tiles:  # one use outside the loop: its allocation
            if _count_uses(self.root, t) != _count_uses(loop, t) + 1:
                return None
        mapping = {}
        for t in tiles:
            shape = [ir.const(stages, "int32"), *t.ty.shape]
            new = ir.Var(f"{t.name}_mb", TensorType(shape, t.ty.dtype, scope=t.ty.scope))
            mapping[t] = new
            layout = self.pctx.get_layout(t)
            if layout is not None:
                self.pctx.layout_map[new] = layout.expand([stages])
        self.replaced.update(mapping)
        k, begin, end = loop.var, loop.begin, loop.end
        rel = k - begin
        # a later copy's own wait point fences its tile: mark as if the copy were not there
        at = {i for i, _ in later}
        nop = ir.Evaluate(ir.const(0, "int32"))
        marked = [nop if i in at else s for i, s in enumerate(rest)]
        marked, wgmma, in_flight = self._mark_async_readers(marked, tiles, stages, bool(later))
        rest = [rest[i] if i in at else s for i, s in enumerate(marked)]
        ahead = stages - 2 if in_flight is not None else stages - 1
        fence = [fence_proxy_async()] if wgmma else []

        def issue(k_value, stage, ictx=ctx, pred=None, group=None):
            stmts = []
            for c in copies if group is None else group:
                new = mapping[c.dst.tensor]
                dst = RegionView(new, [stage, *c.dst.begins], [1, *c.dst.extents])
                layout = self.pctx.get_layout(new)
                stmts += c.issue(ictx, self.tx, self.threads, layout, {k: k_value}, dst, pred)
            return stmts

        def guarded(cond, stmts):
            if ctx.prove(cond):
                return stmts
            return [ir.If(cond, ir.SeqStmt(stmts) if len(stmts) > 1 else stmts[0], None)]

        if later:
            return _plan_split_copies(loop, ctx, stages, rest, copies, later, mapping, issue, fence)
        # sm_90+: TMA boxes completing on mbarriers (passes/tma_lowering.py), except where
        # the mma.sync split schedule (tuned for cp.async) applies
        if wgmma or stages < 2 or self._phase_plan(rest, tiles, stages) is None:
            ordered = self._ordered(loop, ctx, stages, rest, rest_index, copy_index, mapping)
            ordered = None if in_flight is not None else ordered
            tma = tma_loop(
                self,
                loop,
                ctx,
                stages,
                copies,
                rest,
                mapping,
                in_flight,
                fence,
                _restage,
                ordered=ordered,
            )
            if tma is not None:
                return tma
        body_rest = _restage(ir.SeqStmt(rest) if len(rest) > 1 else rest[0], mapping, rel % stages)
        if stages == 1:
            new_body = [*issue(k, ir.const(0, "int32")), cp_async_commit(), cp_async_wait(0)]
            new_body += [*fence, sync_threads(), body_rest, sync_threads()]
            return _with_loop(loop, new_body)
        split = None if wgmma else self._phase_plan(rest, tiles, stages)
        if split is not None:
            return self._plan_split(loop, ctx, rest[0], split, mapping, issue, guarded, stages)
        prologue = []
        for s in range(ahead):
            prologue += guarded(begin + s < end, issue(begin + s, ir.const(s, "int32")))
            prologue.append(cp_async_commit())
        k_ahead = k + ahead
        new_body = [cp_async_wait(ahead - 1), *fence, sync_threads()]
        # under the guard k + ahead < end: source predicates can use the narrower range of k
        inner = ctx.with_range(k, begin, end - begin - ahead)
        copies = guarded(k_ahead < end, issue(k_ahead, (rel + ahead) % stages, inner))
        if in_flight is not None and self.pctx.options["wgmma_copies_after"]:
            # body (wgmma batch committed, no wait), then the copies, then wait_group 1
            new_body += [body_rest, *copies, cp_async_commit()]
            rule, reader = in_flight
            new_body += rule.wait(self.pctx, reader, 1)
        else:
            new_body += [*copies, cp_async_commit(), body_rest]
        after = [cp_async_wait(0)]
        if in_flight is not None:
            rule, reader = in_flight
            after += rule.drain(self.pctx, reader)
        return ir.SeqStmt([*prologue, _with_loop(loop, new_body), *after])

    def _ordered(self, loop, ctx, stages, rest, rest_index, copy_index, mapping):
        """The consumer-loop builder honoring ``T.Pipelined(order=, stage=, group=)`` for a
        warp-specialized loop (``passes/pipeline_order.py``), or None (a note says why)."""
        options, notes = self.pctx.options, self.pctx.tma_notes
        tiles = list(mapping)
        plan, why = None, ""
        if options.get("pipeline_order", True):
            plan, why = plan_order(loop, rest_index, copy_index, stages, rest, tiles)
            if why:
                notes.append(f"loop {loop.var.name}: order/stage/group ignored ({why})")
        overlap = options.get("wgmma_overlap")  # None: FlashAttention's shape only
        annotated = plan is None and bool(why)  # the user's order, refused: program order
        if plan is None and overlap is not False and not (annotated and overlap is None):
            plan, why = plan_overlap(
                rest, self._accumulator_of, stages, tiles, several_scores=overlap is True
            )
            if why and overlap is True:
                notes.append(f"loop {loop.var.name}: no automatic wgmma overlap ({why})")
        if plan is None:
            return None

        def build(wait_full, release, per_tile):
            self.pctx.tma_notes.append(
                f"loop {loop.var.name}: consumer software-pipelined (groups in order: "
                + ", ".join(f"{g.positions}@stage{g.stage}" for g in plan.groups)
                + ("; one mbarrier ring per copy)" if per_tile else ")")
            )
            rings = (wait_full, release, per_tile)
            return ordered_loop(plan, loop, rest, mapping, _restage, stages, ctx.prove, rings)

        return build

    def _accumulator_of(self, stmt):
        """The accumulator Var of ``stmt`` when it is an asynchronous (wgmma) gemm."""
        found = self._reader_of(stmt)
        return None if found is None else found[1].accumulator

    def _phase_plan(self, rest, tiles, stages):
        """(rule, plan) when the body after the copies is one tile op whose pipelining rule
        can split it into phases over the pipelined ``tiles`` (mma.sync gemm), else None."""
        if not self.pctx.options["mma_split"] or stages < 2 or len(rest) != 1:
            return None
        found = tile_op_of(rest[0])
        rule = None if found is None else pipeline_rule_for(found[0], "cuda")
        if rule is None or not hasattr(rule, "phase_plan"):
            return None
        plan = rule.phase_plan(found[0].view(found[1]), tiles, self.pctx)
        return None if plan is None else (rule, plan)

    def _plan_split(self, loop, ctx, op_stmt, split, mapping, issue, guarded, stages):
        """The phased schedule: registers of the next tile loaded before the last slice's
        math, one barrier per iteration (see the module docstring)."""
        rule, plan = split
        k, begin, end = loop.var, loop.begin, loop.end
        rel = k - begin
        ahead = stages - 1
        buffers, binds = rule.phase_buffers(plan)
        self.pctx.extra_allocs.extend(binds)
        slices = rule.phase_slices(plan)

        def phase(stage, which, span=None):
            return rule.phase(_restage(op_stmt, mapping, stage), which, buffers, span)

        prologue = []
        for s in range(ahead):
            prologue += guarded(begin + s < end, issue(begin + s, ir.const(s, "int32")))
            prologue.append(cp_async_commit())
        prologue += [cp_async_wait(stages - 2), sync_threads()]
        prologue.append(phase(ir.const(0, "int32"), rule.PREFETCH))
        # the copies are predicated, not branched around: one basic block per iteration
        inner = ctx.with_range(k, begin, end - begin - ahead)
        pred = None if ctx.prove(k + ahead < end) else ctx.simplify(k + ahead < end)
        copies = issue(k + ahead, (rel + ahead) % stages, inner, pred)
        # slice 1's register loads before the copies (which they cannot pass: both touch
        # shared memory)
        new_body = [phase(rel % stages, rule.MAIN, (0, 1)), *copies, cp_async_commit()]
        if slices > 2:
            new_body.append(phase(rel % stages, rule.MAIN, (1, slices - 1)))
        new_body += [cp_async_wait(stages - 2), sync_threads()]
        new_body += [phase((rel + 1) % stages, rule.PREFETCH), phase(rel % stages, rule.LAST)]
        new_loop = _with_loop(loop, new_body, {ATTR_ASYNC_STAGES: 1})
        return ir.SeqStmt([*prologue, new_loop, cp_async_wait(0)])

    def _reader_of(self, stmt):
        """(rule, reader) when ``stmt`` is a tile op reading shared memory asynchronously."""
        found = tile_op_of(stmt)
        rule = None if found is None else pipeline_rule_for(found[0], "cuda")
        if rule is None or not hasattr(rule, "async_reader"):
            return None
        reader = rule.async_reader(found[0].view(found[1]), self.pctx)
        return None if reader is None else (rule, reader)

    def _mark_async_readers(self, rest, tiles, stages, split=False):
        """(rest with its asynchronous readers marked, whether there is any, the
        (rule, reader) kept in flight across iterations or None)."""
        found = []  # every asynchronous reader in the body, nested ones included

        def visit(node):
            if self._reader_of(node) is not None:
                found.append(node)

        tvm_ffi.structural_walk(ir.SeqStmt(list(rest)), [(ir.Evaluate, visit)])
        if not found:
            return rest, False, None
        in_flight = None
        out = list(rest)
        options = self.pctx.options
        for i, s in enumerate(rest):
            found_here = self._reader_of(s)
            if found_here is None:
                continue
            rule, reader = found_here
            before = rest[:i]
            others = rest[:i] + rest[i + 1 :]
            # the "leading" schedule keeps its old rule: A and B both pipelined tiles
            old_rule = options["copy_schedule"] == "leading"
            fenced = not (old_rule and reader.a_in_regs) and all(
                self._fenced_operand(t, tiles, before, others) for t in reader.shared_operands
            )
            # a group may stay in flight across iterations only when the next iteration
            # cannot overwrite its shared operands: each is a multi-buffered tile or
            # nothing else in the loop touches it (a tile the loop's threads copy into
            # synchronously, e.g. one TMA and cp.async cannot load, would be rewritten
            # under the still-running wgmma)
            operands_stable = all(
                any(t.same_as(x) for x in tiles) or not any(_uses(x, t) for x in others)
                for t in reader.shared_operands
            )
            keep = (
                options["wgmma_in_flight"]
                and operands_stable
                and not split
                and stages >= 3
                and len(found) == 1
                and not any(_uses(x, reader.accumulator) for x in others)
                and _has_local(self.pctx, reader.accumulator)
            )
            defer = bool(keep and options["wgmma_copies_after"])
            out[i] = rule.mark(s, fenced=fenced, in_flight=keep, defer_wait=defer)
            if keep:
                in_flight = (rule, reader)
        return out, True, in_flight

    def _fenced_operand(self, t, tiles, before, others) -> bool:
        """Whether the loop's fence after its cp.async wait covers shared operand ``t``.

        A pipelined tile not touched before the gemm, or (with a copy schedule other
        than ``"leading"``) a tile nothing else in the loop touches: its writes precede
        the loop, and every iteration fences (each thread its own writes) before its
        barrier.
        """
        if any(t.same_as(x) for x in tiles):
            return not any(_uses(x, t) for x in before)
        return self.pctx.options["copy_schedule"] != "leading" and not any(
            _uses(x, t) for x in others
        )


def copy_schedule(stages: int, options: dict) -> str:
    """The effective copy schedule (pass config ``tl.pipeline_copy_schedule``) for a loop of
    ``stages`` stages."""
    mode = options["copy_schedule"]
    if mode == "auto":
        return "hoist" if stages >= 2 else "split"
    return mode


def _has_local(pctx, tensor) -> bool:
    """Whether the fragment ``tensor`` already has its local array (needed for the drain)."""
    try:
        pctx.local_of(tensor)
    except (AttributeError, KeyError):
        return False
    return True


def _with_loop(loop, stmts, extra=None):
    ann = {a: b for a, b in (loop.annotations or {}).items() if a != "num_stages"}
    ann = {a: b for a, b in ann.items() if not a.startswith("tl_pipeline")}
    ann.update(extra or {})
    body = ir.SeqStmt(stmts)
    return ir.For(loop.var, loop.begin, loop.end, loop.step, loop.kind, body, ann or None, loop.loc)


def _count_uses(node, var) -> int:
    n = [0]
    h = var.__chandle__()

    def visit(v):
        if v.__chandle__() == h:
            n[0] += 1

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return n[0]


class _ReplaceAllocs(StmtMutator):
    def __init__(self, mapping):
        super().__init__("cuda")
        self.mapping = mapping

    def visit_Bind(self, stmt, ctx):
        var = alloc_of(stmt)
        if var is not None:
            for old, new in self.mapping.items():
                if old.same_as(var):
                    return make_alloc(new)
        return stmt


def plan_pipelines(func, ctx):
    """Software-pipeline every matching ``T.Pipelined`` loop of ``func`` (see module doc)."""
    from . import warp_specialize_auto as ws

    planner = _Planner(ctx, func.body)
    if ctx.options.get("warp_specialize") and int(ctx.threads) % 128 == 0:
        planner.ws_loop = ws.candidate_loop(func.body)
        planner.ws_forbidden = ws.consumer_scalars(func.body)
    body = planner(func.body, LowerContext("cuda", threads=int(ctx.threads)))
    if planner.replaced:
        body = _ReplaceAllocs(planner.replaced)(body)
    if planner.ws_parts is not None:
        parts = planner.ws_parts
        keep_regs = bool((func.attrs or {}).get(ATTR_NO_SET_MAX_NREG, False))  # the user's hint
        regs = ws.register_split(parts.threads) if ctx.arch == "sm_90a" and not keep_regs else None
        body = ws.split_kernel(body, parts, regs)
    return func.with_body(body)


__all__ = ["AsyncCopy", "cp_async_commit", "cp_async_wait", "plan_pipelines", "sync_threads"]
