"""Thread-block clusters (CUDA sm_90): the cluster launch, and TMA multicast in the
warp-specialized pipeline.

**Launch.** ``T.Kernel(..., cluster_dims=(x, y, z))`` records the op ``tl.cluster_dims``;
:func:`take_cluster_dims` (first CUDA stage) removes it and keeps the shape on the lowering
context (``CudaLowerContext.cluster_dims``). :func:`mark_cluster_launch` (a late stage)
puts the no-op call ``tl::cluster_dims<x, y, z>()`` in the kernel, which the source fix-up
``hopper_source.with_cluster_dims`` turns into ``__cluster_dims__(x, y, z)`` on the kernel
definition: every launch of the kernel then forms clusters (TIRx's packed call and the
direct ``cuLaunchKernel`` alike), the grid being a whole number of clusters (checked when
tracing for static extents, by a host assert at the call for dynamic ones).
``T.use_swizzle`` renumbers blocks at cluster granularity (``rasterize_blocks``), so the
blocks of one cluster keep adjacent tiles along the cluster's axes.

**Multicast** (pass config ``tl.cluster_multicast = C``, C >= 2): in the warp-specialized
loop (``warp_specialize_auto.py``) the kernel runs in clusters of ``C`` blocks along
``blockIdx.x``. A TMA copy whose source region is provably the same for the ``C`` blocks of
a cluster (block ``x`` and ``x ^ r``: e.g. the README GEMM's A tile, ``A[by * bm, k * bk]``,
with ``blockIdx.x`` walking N) is *shared*: its tile's boxes are cut into ``C`` row slices
and block rank ``r`` loads slice ``r`` with ``.multicast::cluster`` into every block of
the cluster (each block's copy of the tile, each block's ``full`` mbarrier). The other
copies stay per block. So each block's ``full[s]`` still expects the bytes of every copy,
and ``empty[s]`` counts the consumers of all ``C`` blocks: each consumer warp arrives on
``empty[s]`` of every block of the cluster (``tl::mbarrier_arrive_cluster_warp<C>``,
lane ``r`` arrives on block ``r`` through ``mapa``), because the next load into stage
``s`` of one block writes the slices of the others too. The synchronisation is CUTLASS's
``PipelineTmaAsync`` (pass config ``tl.cluster_multicast_sync = "cta"``, the default):
the remote arrivals are plain ``mbarrier.arrive.shared::cluster`` (release at CTA scope:
a consumer hands back a stage it only read) and the producer's wait is a CTA-scope
``try_wait``, so neither main loop holds a fence in SASS; the mbarrier initialisation is
published with ``fence.mbarrier_init.release.cluster`` + a relaxed cluster arrive + wait;
each branch arrives on a closing cluster barrier once its loop is done (the consumers'
last remote arrival is then behind them) and the kernel ends with its wait, so no block
exits while a peer may still arrive on its barriers, and the epilogue overlaps the
peers'. Every peer write into a block's stage buffers is for an iteration its consumers
wait for, so the staged TMA-store epilogue may reuse any stage (``tma_store.py``)::

    init full[s] (1), empty[s] (C * T / 32); fence.mbarrier_init; cluster arrive.relaxed + wait
    producer: for k: wait(empty[s], ph ^ 1); arrive.expect_tx(full[s], all bytes)
                     shared copy: slice rank of each box, multicast to mask 2^C - 1
                     other copies: as before
              cluster arrive                         (all 128 producer threads)
    consumer: ... mbarrier_arrive_cluster_warp<C>(empty[s]) ...; cluster arrive; epilogue
    cluster wait                                    (every thread, after the split)

``tl.cluster_multicast_sync = "cluster"`` keeps the first schedule for A/B runs:
``.release.cluster`` arrivals (``MEMBAR.ALL.GPU`` + ``ERRBAR`` + ``CGAERRBAR`` before each
in every iteration of every consumer warp), cluster-scope acquire waits (``CCTL.IVALL``),
full cluster barriers after the initialisation and at the end, register-store epilogue
(it measured 0.64-0.69x torch.matmul on the H200 where one-block launches ran 1.01-1.05x).

Not applied (a ``tl.tma`` note says why) when: the grid's x extent is not a static multiple
of ``C``; the kernel has other cluster dims; no copy is shared; a shared tile's boxes
cannot be cut in ``C`` slices of whole swizzle atoms.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import tvm_ffi
from tvm_tirx import ir, sym, tirx

from ....lowering.stmt import launches_of, substitute, with_launch_body
from ....lowering.thread_utils import extern_stmt as _call
from ..tensor_map import BoxPlan, TensorMapSpec

#: The no-op device call that marks a cluster kernel (``cluster.h``).
MARKER = "tl::cluster_dims"


# ------------------------------------------------------------------------------ launch
def take_cluster_dims(func):
    """(``func`` without its ``tl.cluster_dims`` op, the shape ``(x, y, z)`` or None)."""
    from ....ops.hopper.op import CLUSTER_DIMS
    from ....ops.registry import tile_op_of

    found = []

    def is_op(node):
        hit = tile_op_of(node) if isinstance(node, ir.Evaluate) else None
        if hit is not None and hit[0] is CLUSTER_DIMS:
            found.append(tuple(int(d) for d in CLUSTER_DIMS.view(hit[1]).dims))
            return True
        return False

    def drop(seq):  # removed, not left as a no-op: statements before the binds stop the
        # warp-specialization's scan of the kernel's leading binds
        kept = [s for s in seq.seq if not is_op(s)]
        return seq if len(kept) == len(seq.seq) else ir.SeqStmt(kept)

    body = tvm_ffi.structural_map(func.body, [(ir.SeqStmt, drop)])
    if not found:
        return func, None
    return func.with_body(body), found[0]


def mark_cluster_launch(func, dims):
    """``func`` whose kernel calls ``tl::cluster_dims<x, y, z>()`` (first statement), with
    a host assert in front of the launch for every dynamic grid extent that must be a
    multiple of the cluster's."""
    if dims is None or tuple(dims) == (1, 1, 1):
        return func
    x, y, z = dims
    launches, inner = launches_of(func.body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    body = with_launch_body(func.body, ir.SeqStmt([_call(f"{MARKER}<{x}, {y}, {z}>"), *stmts]))
    asserts = []
    for tag, extent, _ in launches:
        if not tag.startswith("blockIdx."):
            continue
        axis = tag[len("blockIdx.") :]
        d = dims["xyz".index(axis)]
        if d == 1 or isinstance(extent, ir.IntImm):
            continue
        msg = (
            f"the grid's {axis} extent must be a multiple of the cluster's ({d}): "
            "cluster launches run whole clusters"
        )
        cond = ir.prim.EQ(ir.prim.floormod(extent, ir.const(d, str(extent.ty))), 0)
        asserts.append(ir.AssertStmt(cond, ir.StringImm("ValueError"), [ir.StringImm(msg)]))
    if asserts:
        body = ir.SeqStmt([*asserts, body])
    return func.with_body(body)


def cluster_shape(pctx):
    """The cluster shape of the kernel being lowered, ``(1, 1, 1)`` when none."""
    return tuple(getattr(pctx, "cluster_dims", None) or (1, 1, 1))


# --------------------------------------------------------------------------- multicast
@dataclass
class Multicast:
    """What the warp-specialized loop needs to multicast: the cluster size ``size`` (along
    ``blockIdx.x``) and the shared copies, each with its row-sliced plan and map."""

    size: int
    shared: dict  # id(TmaCopy) -> sliced TmaCopy
    sync: str = "cta"  # tl.cluster_multicast_sync: "cta" (default) or "cluster"

    @property
    def mask(self) -> int:
        return (1 << self.size) - 1

    @property
    def early_exit_arrive(self) -> bool:
        """Whether each branch arrives on the closing cluster barrier when its loop is done
        (``"cta"``), rather than every thread at the end of the kernel (``"cluster"``)."""
        return self.sync == "cta"


def release_call(mc) -> str:
    """The consumer warps' stage release: one arrival per warp on ``empty[s]`` of each block
    (CTA scope, no fence; ``.release.cluster`` for ``tl.cluster_multicast_sync="cluster"``)."""
    suffix = "_release" if mc.sync == "cluster" else ""
    return f"tl::mbarrier_arrive_cluster_warp{suffix}<{mc.size}>"


def empty_wait_call(mc) -> str:
    """The producer's wait on ``empty[s]``: CTA-scope ``try_wait`` (CUTLASS's
    ``ClusterBarrier::wait``), or cluster-scope acquire for ``"cluster"``."""
    return "tl::mbarrier_wait_cluster" if mc.sync == "cluster" else "tl::mbarrier_wait"


def publishing_barrier(sync) -> list:
    """The cluster barrier after thread 0 initialised (and fenced) the mbarriers: relaxed
    arrive + wait (the ``fence.mbarrier_init.release.cluster`` before it is the release),
    or a full ``cluster_sync`` for ``"cluster"``."""
    if sync == "cluster":
        return [_call("tl::cluster_sync")]
    return [_call("tl::cluster_arrive_relaxed"), _call("tl::cluster_wait")]


def closing_barrier(sync) -> list:
    """The kernel's last statement: the wait of the cluster barrier each branch arrived on
    after its loop (``"cta"``), or a full ``cluster_sync`` (``"cluster"``)."""
    return [_call("tl::cluster_sync" if sync == "cluster" else "tl::cluster_wait")]


def _lead_binds(root):
    """The scalar Binds at the top of the kernel body (block-index arithmetic, e.g.
    ``T.use_swizzle``'s), in order."""
    _, inner = launches_of(root)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    out = []
    for s in stmts:
        if not isinstance(s, ir.Bind):
            break
        loads = []
        tvm_ffi.structural_walk(s.value, [(ir.TensorLoad, loads.append)])
        if not loads and not hasattr(s.var.ty, "shape"):
            out.append(s)
    return out


def _same_for_cluster(exprs, binds, bx, extents, size, loop) -> bool:
    """Whether every expression of ``exprs`` has one value for the ``size`` blocks
    ``c * size + r`` (r < size) of a cluster along ``blockIdx.x``."""
    c = ir.Var("cluster_x", bx.ty)
    constraints = sym.ConstraintContext()
    constraints.append(sym.RangeConstraint(c, ir.Range.from_min_extent(0, extents[0] // size)))
    for var, extent in extents[1]:
        constraints.append(sym.RangeConstraint(var, ir.Range.from_min_extent(0, extent)))
    constraints.append(
        sym.RangeConstraint(loop.var, ir.Range.from_min_extent(loop.begin, loop.end - loop.begin))
    )
    analyzer = sym.Analyzer()
    analyzer.sync_constraint_context(constraints)
    for e in exprs:
        for b in reversed(binds):
            e = substitute(e, {b.var: b.value})
        first = substitute(e, {bx: c * size})
        for r in range(1, size):
            other = substitute(e, {bx: c * size + r})
            if not analyzer.can_prove(ir.prim.EQ(first, other)):
                return False
    return True


def _sliced(t, size):
    """``t`` (a TmaCopy) with each box cut into ``size`` row slices (a new map whose box
    has ``box_rows / size`` rows), or the reason it cannot be."""
    p = t.plan
    rows = p.box_rows // size
    nbytes = t.bits // 8
    align = 128 if int(p.mode) == 0 else p.mode.smem_alignment()
    if p.box_rows % size or (int(p.mode) != 0 and rows % 8):
        return f"{t.dst.name}: a {p.box_rows}-row box does not split in {size} swizzle atoms"
    if (rows * p.box_cols * nbytes) % align:
        return f"{t.dst.name}: a slice of {rows} rows is not {align}-byte aligned"
    plan = BoxPlan(p.mode, rows, p.box_cols, p.boxes)
    box = list(t.spec.box)
    box[t.row_axis] = rows
    spec = TensorMapSpec(t.spec.tensor, t.spec.dtype, tuple(box), p.mode)
    return replace(t, spec=spec, plan=plan)


def plan_multicast(planner, loop, tma):
    """The :class:`Multicast` of the warp-specialized ``loop`` with TMA copies ``tma``, or
    None (multicast off, or not applicable: a ``tl.tma`` note says why)."""
    pctx = planner.pctx
    size = int(pctx.options.get("cluster_multicast") or 1)
    if size < 2:
        return None
    name = loop.var.name

    def skip(why):
        pctx.tma_notes.append(f"loop {name}: no cluster multicast ({why})")
        return None

    dims = cluster_shape(pctx)
    if dims not in ((1, 1, 1), (size, 1, 1)):
        return skip(f"the kernel's cluster_dims {dims} differ from ({size}, 1, 1)")
    launches, _ = launches_of(planner.root)
    blocks = {tag: (var, extent) for tag, extent, var in launches if tag.startswith("blockIdx")}
    if "blockIdx.x" not in blocks:
        return skip("no blockIdx.x")
    bx, gx = blocks["blockIdx.x"]
    if not isinstance(gx, ir.IntImm) or int(gx) % size:
        return skip(f"the grid's x extent ({gx}) is not a static multiple of {size}")
    others = [(v, e) for tag, (v, e) in blocks.items() if tag != "blockIdx.x"]
    binds = _lead_binds(planner.root)
    shared = {}
    for t in tma:
        if not _same_for_cluster(list(t.src.begins), binds, bx, (int(gx), others), size, loop):
            continue
        sliced = _sliced(t, size)
        if isinstance(sliced, str):
            return skip(sliced)
        shared[id(t)] = sliced
    if not shared:
        return skip(f"no copy reads the same region in the {size} blocks of a cluster")
    from .tma_lowering import shared_map

    for t in tma:
        if id(t) in shared:
            s = shared[id(t)]
            s.spec = shared_map(pctx, s.spec)
            pctx.tma_notes.append(
                f"loop {name}: {t.src.name} -> {t.dst.name} multicast to the {size} blocks "
                f"of a cluster along blockIdx.x, each loading {s.plan.box_rows}-row slices"
            )
    # maps no copy uses any more (the full-box map of a shared copy)
    used = {id(shared[id(t)].spec) if id(t) in shared else id(t.spec) for t in tma}
    planned = {id(t.spec) for t in tma}
    pctx.tma_maps[:] = [m for m in pctx.tma_maps if id(m) not in planned or id(m) in used]
    pctx.cluster_dims = (size, 1, 1)
    return Multicast(size, shared, str(pctx.options.get("cluster_multicast_sync") or "cta"))


def issue_multicast(mc, t, tile_mb, stage, k, k_value, bar_ptr, rank):
    """``tl::tma_load_multicast_<R>d`` of slice ``rank`` of every box of the shared copy
    ``t`` into stage ``stage`` of ``tile_mb`` in every block of the cluster."""
    s = mc.shared[id(t)]
    begins = [substitute(b, {k: k_value}) for b in s.src.begins]
    nbytes = s.bits // 8
    p = s.plan
    tile_elems = p.box_rows * mc.size * p.box_cols * len(p.boxes)
    ptr_ty = ir.PtrType(ir.PrimType(s.dst.dtype), s.dst.scope)
    out = []
    for row0, col0, offset in p.boxes:
        coords = s.box_coords(begins, row0, col0)
        coords[s.row_axis] = coords[s.row_axis] + rank * p.box_rows
        if s.spec.shift is not None:
            coords[-1] = coords[-1] + s.spec.shift
        elem = stage * tile_elems + offset + rank * (p.box_rows * p.box_cols)
        smem = tirx.ptr_byte_offset(tirx.address_of(tile_mb), elem * nbytes, ty=ptr_ty)
        args = [smem, tirx.address_of(s.spec.var), bar_ptr, ir.const(mc.mask, "uint32")]
        args += [ir.prim.Cast("int32", c) if str(c.ty) != "int32" else c for c in reversed(coords)]
        out.append(_call(f"tl::tma_load_multicast_{s.spec.rank}d", *args))
    return out


def rank_bind():
    """(Var, Bind) of this block's rank in its cluster."""
    rank = ir.Var("cluster_rank", "int32")
    value = ir.prim.Cast("int32", tirx.call_extern("tl::block_rank_in_cluster", ty="uint32"))
    return rank, ir.Bind(rank, value)


__all__ = [
    "MARKER",
    "Multicast",
    "closing_barrier",
    "cluster_shape",
    "empty_wait_call",
    "issue_multicast",
    "mark_cluster_launch",
    "plan_multicast",
    "publishing_barrier",
    "rank_bind",
    "release_call",
    "take_cluster_dims",
]
