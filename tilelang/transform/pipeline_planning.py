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

Guarantees: the results of the loop are those of the original loop. ``order``/``stage``/
``group`` annotations are accepted and ignored (the schedule above is always valid).
Loops that do not match are left unchanged (their copies lower synchronously).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, tirx
from tvm_tirx.tirx.tensor import TensorType

from ..layout.swizzle import dtype_bits
from ..ops import tile_op_of
from ..ops.context import LowerContext
from ..ops.copy import COPY, matched_axes
from ..ops.gemm_cuda import shared_ptr
from ..ops.region import RegionView, _const
from .stmt import StmtMutator, alloc_of, launch_of, substitute

VEC_BYTES = 16


def make_alloc(var) -> ir.Bind:
    """``var = alloc_tensor()`` (with the empty attrs CUDA codegen expects)."""
    return ir.Bind(var, ir.Call("tirx.alloc_tensor", [], attrs={}, ty_args=[var.ty], ty=var.ty))


def _call(name, *args):
    return ir.Evaluate(tirx.call_extern(name, *args, ty="void"))


def sync_threads():
    return _call("__syncthreads")


def cp_async_commit():
    return _call("tl::cp_async_commit")


def cp_async_wait(n: int):
    return _call(f"tl::cp_async_wait<{int(n)}>")


def _i32(x):
    return ir.const(int(x), "int32") if isinstance(x, int) else x


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

    def issue(self, ctx, tx, threads: int, layout, subst=None, dst_view=None):
        """Statements issuing this copy (``subst``: Var -> value in the source indices)."""
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
            sptr = shared_ptr(dst_lead, layout, _i32(d_row), _i32(d_col))
            gptr = tirx.address_of(ir.TensorLoad(src.tensor, s_idx))
            conds = [
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
    hit = []
    h = var.__chandle__()

    def visit(v):
        if v.__chandle__() == h:
            hit.append(v)

    tvm_ffi.structural_walk(node, [(ir.Var, visit)])
    return bool(hit)


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
        copies, rest = _leading_copies(loop.body, ctx)
        if not copies:
            return None
        tiles = []
        for c in copies:
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

        def issue(k_value, stage, ictx=ctx):
            stmts = []
            for c in copies:
                new = mapping[c.dst.tensor]
                dst = RegionView(new, [stage, *c.dst.begins], [1, *c.dst.extents])
                stmts += c.issue(
                    ictx, self.tx, self.threads, self.pctx.get_layout(new), {k: k_value}, dst
                )
            return stmts

        def guarded(cond, stmts):
            if ctx.prove(cond):
                return stmts
            return [ir.If(cond, ir.SeqStmt(stmts) if len(stmts) > 1 else stmts[0], None)]

        body_rest = _restage(ir.SeqStmt(rest) if len(rest) > 1 else rest[0], mapping, rel % stages)
        if stages == 1:
            new_body = [*issue(k, ir.const(0, "int32")), cp_async_commit(), cp_async_wait(0)]
            new_body += [sync_threads(), body_rest, sync_threads()]
            return _with_loop(loop, new_body)
        prologue = []
        for s in range(stages - 1):
            prologue += guarded(begin + s < end, issue(begin + s, ir.const(s, "int32")))
            prologue.append(cp_async_commit())
        ahead = k + (stages - 1)
        new_body = [cp_async_wait(stages - 2), sync_threads()]
        # under the guard k + S-1 < end: source predicates can use the narrower range of k
        inner = ctx.with_range(k, begin, end - begin - (stages - 1))
        new_body += guarded(ahead < end, issue(ahead, (rel + stages - 1) % stages, inner))
        new_body += [cp_async_commit(), body_rest]
        return ir.SeqStmt([*prologue, _with_loop(loop, new_body), cp_async_wait(0)])


def _with_loop(loop, stmts):
    ann = {a: b for a, b in (loop.annotations or {}).items() if a != "num_stages"}
    ann = {a: b for a, b in ann.items() if not a.startswith("tl_pipeline")}
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
    planner = _Planner(ctx, func.body)
    body = planner(func.body, LowerContext("cuda", threads=int(ctx.threads)))
    if planner.replaced:
        body = _ReplaceAllocs(planner.replaced)(body)
    return func.with_body(body)


__all__ = ["AsyncCopy", "cp_async_commit", "cp_async_wait", "plan_pipelines", "sync_threads"]
