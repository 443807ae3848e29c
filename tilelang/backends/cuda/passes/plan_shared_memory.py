"""PlanSharedMemory (CUDA): all shared tiles in one ``shared.dyn`` buffer.

Assumes: thread-level code after ``insert_sync``; shared tiles are ``alloc_tensor`` Binds
(scope ``shared``/``shared.dyn``) inside the innermost launch; TIRx allows a single
dynamic shared allocation per kernel.

Guarantees: one ``uint8`` ``shared.dyn`` buffer at the top of the kernel body; each tile
becomes a typed view at a 16-byte aligned byte offset. Tiles whose live ranges (spans of
top-level statements of the kernel body that mention them) do not overlap share memory;
a barrier is placed before the first statement of a tile that reuses another's bytes
unless one is already between them. A total above the architecture's limit raises a
CompileError naming the buffers. The placement ({name: (offset, bytes)}) goes into the
``plan`` dict the caller passes (the pipeline records it on the function).

Padded layouts: a tile whose Layout (``layouts``, e.g. ``T.annotate_layout`` with rows of
``bK + 8``) reaches past its element count gets the bytes its largest offset needs, and
its typed view becomes a tensor of the same rank whose first extent covers them (the
thread-level accesses, split over the tile's trailing extents by
``thread_utils.physical``, already index it that way).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir

from .... import errors
from ....layout import expr as E
from ....layout.annotation import storage_elements
from ....lowering.stmt import alloc_of, launches_of, substitute, uses_any, with_launch_body
from ....lowering.thread_utils import (
    _bits,
    alloc,
    collect_vars,
    decl_view,
    extern_calls,
    extern_name,
    is_shared,
    is_sync,
    new_tensor,
    scope_of,
    sync_threads,
)
from .insert_sync import shared_views
from .warp_specialize_auto import consumer_barrier

ALIGN = 16
LIMITS = {
    "sm_90": 227 * 1024,
    "sm_80": 163 * 1024,
    "sm_87": 163 * 1024,
    "sm_86": 99 * 1024,
    "sm_89": 99 * 1024,
    "sm_100": 227 * 1024,
    "sm_120": 99 * 1024,
}


def smem_limit(arch: str) -> int:
    """Shared-memory bytes one block may use on ``arch`` (CUDA sm_*, or a ROCm gfx* arch)."""
    if arch.startswith("gfx"):
        return 64 * 1024  # LDS per workgroup on CDNA2/3 (gfx90a, gfx94x)
    base = arch.rstrip("af")
    return LIMITS.get(base, 48 * 1024)


def _tile_alignment(size: int) -> int:
    """Byte alignment of a tile: the largest power of two dividing its size, 16 to 1024.

    A swizzled tile (8 rows of 32/64/128 bytes per swizzle atom, so a multiple of 256/512/
    1024 bytes) then starts on its swizzle period, which wgmma descriptors (and TMA) need:
    the hardware applies the swizzle to absolute shared addresses (tilelang/ops/gemm_wgmma.py).
    """
    align = ALIGN
    while align < 1024 and size % (2 * align) == 0:
        align *= 2
    return align


def _round_up(x: int, align: int) -> int:
    return (x + align - 1) // align * align


def tile_bytes(var) -> int:
    """Bytes of the static-shaped tile ``var`` (a compile error for a dynamic shape)."""
    n = E.as_const_int(E.prod(list(var.ty.shape)))
    if n is None:
        raise errors.compile_error(f"shared tile {var.name} needs a static shape")
    return (n * _bits(var) + 7) // 8


def _layout_of(var, layouts):
    for k, v in (layouts or {}).items():
        if k.same_as(var):
            return v
    return None


def _storage_var(var, layouts):
    """``var`` itself, or a same-rank tensor holding its padded layout's largest offset (or,
    for a tile allocated in static ``"shared"`` memory, the same tensor in the dynamic
    shared memory every tile is planned into)."""
    layout = _layout_of(var, layouts)
    shape = [E.as_const_int(d) for d in var.ty.shape]
    dynamic = new_tensor(var.name, list(var.ty.shape), str(var.ty.dtype), "shared.dyn")
    static = scope_of(var) != "shared.dyn"
    if layout is None or None in shape or not shape:
        return dynamic if static else var
    need = storage_elements(layout)
    have = int(E.prod(shape))
    if need <= have:
        return dynamic if static else var
    inner = int(E.prod(shape[1:]))
    rows = -(-need // inner)
    return new_tensor(var.name, [rows] + shape[1:], str(var.ty.dtype), "shared.dyn")


def _alloc_loc(stmt):
    """Source location of an allocation (on the Bind, or on its ``alloc_tensor`` call)."""
    loc = getattr(stmt, "loc", None)
    if errors.where(loc):
        return loc
    return getattr(getattr(stmt, "value", None), "loc", None)


def _hoist_nested_tiles(inner):
    """``T.alloc_shared`` inside a loop or branch (upstream allows it: DSA's indexer kernels
    allocate their tiles in the loop body) moves to the kernel's top level: one tile for
    every iteration, as upstream's allocation planning gives it. Shapes are static, so the
    tile does not depend on where it was written. ``inner`` itself if nothing moves."""
    top = {
        id_.__chandle__()
        for id_ in (alloc_of(s) for s in (inner.seq if isinstance(inner, ir.SeqStmt) else [inner]))
        if id_ is not None
    }
    moved = []

    def keep(stmt) -> bool:
        var = alloc_of(stmt)
        if var is None or not is_shared(var) or var.__chandle__() in top:
            return True
        if any(not isinstance(d, ir.IntImm) for d in var.ty.shape):
            return True  # left for the error below
        moved.append(stmt)
        return False

    def on_seq(seq):
        kept = [s for s in seq.seq if keep(s)]
        if len(kept) == len(seq.seq):
            return seq
        return (
            kept[0] if len(kept) == 1 else ir.SeqStmt(kept or [ir.Evaluate(ir.const(0, "int32"))])
        )

    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    new = [
        tvm_ffi.structural_map(s, [(ir.SeqStmt, on_seq)]) if alloc_of(s) is None else s
        for s in stmts
    ]
    if not moved:
        return inner
    return ir.SeqStmt(moved + new)


def plan_shared_memory(
    body, arch: str = "sm_90a", layouts=None, plan: dict | None = None, ws_split=None
):
    """Place every shared tile of ``body`` in one ``shared.dyn`` buffer (module docstring).

    ``layouts`` maps tile Vars to their Layouts (the CUDA pipeline's layout map); only
    padded ones change anything here. ``ws_split``: the thread Var of an automatically
    warp-specialized kernel (its consumer branch is spread out, :class:`_Timeline`).
    """
    _, inner = launches_of(body)
    hoisted_inner = _hoist_nested_tiles(inner)
    if hoisted_inner is not inner:
        body, inner = with_launch_body(body, hoisted_inner), hoisted_inner
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    tiles = []  # (var, index of its alloc)
    alloc_locs = {}  # var handle -> the allocation's source location
    for s in stmts:
        var = alloc_of(s)
        if var is not None and is_shared(var):
            tiles.append(var)
            alloc_locs[var.__chandle__()] = _alloc_loc(s)
    nested = []
    nested_locs = []

    def find(node):
        var = alloc_of(node) if isinstance(node, ir.Bind) else None
        if var is not None and is_shared(var) and not any(var.same_as(t) for t in tiles):
            nested.append(var)
            nested_locs.append(_alloc_loc(node))

    tvm_ffi.structural_walk(inner, [(ir.Bind, find)])
    if nested:
        raise errors.compile_error(
            f"shared tiles must be allocated at the kernel's top level: {[v.name for v in nested]}",
            nested_locs[0],
        )
    plan = {} if plan is None else plan
    if not tiles:
        return body
    timeline = _Timeline(stmts, ws_split, shared_views(inner))
    uses = {var.__chandle__(): timeline.live_range(var) for var in tiles}
    placed = []  # (var, offset, size, first, last)
    syncs_before = set()
    storage = {v.__chandle__(): _storage_var(v, layouts) for v in tiles}
    order = sorted(tiles, key=lambda v: uses[v.__chandle__()][0])
    for var in order:
        first, last = uses[var.__chandle__()]
        size = (tile_bytes(storage[var.__chandle__()]) + ALIGN - 1) // ALIGN * ALIGN
        align = _tile_alignment(size)
        busy = sorted(
            (o, o + sz, pl) for (_, o, sz, f, pl) in placed if not (pl < first or last < f)
        )
        offset = 0
        for lo, hi, _ in busy:
            if offset + size <= lo:
                break
            offset = _round_up(max(offset, hi), align)
        for _v2, o2, sz2, _f2, l2 in placed:
            overlap = offset < o2 + sz2 and o2 < offset + size
            if overlap and l2 < first and not timeline.synced_between(l2, first):
                syncs_before.add(first)
        placed.append((var, offset, size, first, last))
    total = max(o + sz for _, o, sz, _, _ in placed)
    limit = smem_limit(arch)
    if total > limit:
        names = ", ".join(f"{v.name} ({sz} B)" for v, _, sz, _, _ in placed)
        largest = max(placed, key=lambda p: p[2])[0]
        raise errors.compile_error(
            f"shared memory: {total} bytes needed but {arch} allows {limit} per block: {names} "
            f"(largest: {largest.name}); use smaller tiles or fewer pipeline stages",
            alloc_locs.get(largest.__chandle__()),
        )
    smem = new_tensor("smem", [total], "uint8", "shared.dyn")
    views = {v.__chandle__(): decl_view(storage[v.__chandle__()], smem, o) for v, o, *_ in placed}
    renamed = {
        v: storage[v.__chandle__()] for v in tiles if not storage[v.__chandle__()].same_as(v)
    }
    for v, o, sz, _, _ in placed:
        plan[v.name] = (o, sz)
    out = [alloc(smem)]
    for k, s in enumerate(stmts):
        var = alloc_of(s)
        if var is not None and var.__chandle__() in views:
            out.append(views[var.__chandle__()])
            continue
        if timeline.unit_of_top(k) in syncs_before:
            out.append(sync_threads())
        if k == timeline.split_at:
            s = timeline.consumer_with_syncs(s, syncs_before)
        out.append(substitute(s, renamed) if renamed else s)
    return with_launch_body(body, out[0] if len(out) == 1 else ir.SeqStmt(out))


class _Timeline:
    """The order in which tiles are live: the kernel body's top-level statements, with the
    consumer branch of an automatically warp-specialized kernel (``ws_split``) spread out.

    That branch (``if tx < T: consumers else: producer``, ``warp_specialize_auto``) runs
    the user's statements one after another; the producer only fills the pipeline's stage
    tiles and completes each on an mbarrier the consumers wait for in the pipelined loop.
    So a tile the producer touches is live from the split to the last consumer statement
    touching any producer tile (the loop: every producer write has landed once the
    consumers' last wait returned); a tile only the consumers use is live over its own
    statements, and after the loop it may take the stage tiles' bytes (the epilogue's
    ``O_shared`` of MLA decoding); mbarriers are never reused (PTX allows only mbarrier
    operations on an initialised mbarrier's bytes). A reuse inside the branch is preceded by the consumers'
    named barrier (``bar.sync 1, T``), not ``__syncthreads`` (the producer never reaches
    it). Cluster launches keep the whole split as one unit: peers multicast into and
    arrive on this block's tiles on their own schedule."""

    def __init__(self, stmts, ws_split, views=None):
        self.stmts = stmts
        self.views = views or {}  # tile handle -> its T.reshape / T.view Vars
        self.split_at = None
        self.consumer = []
        if ws_split is not None and not _cluster_launch(stmts):
            for k, s in enumerate(stmts):
                if _is_split(s, ws_split):
                    self.split_at = k
                    c = s.then_case
                    self.consumer = list(c.seq) if isinstance(c, ir.SeqStmt) else [c]
                    self.producer = s.else_case
                    self.threads = s.condition.b
        # units: ("top", k) or ("consumer", j), in program order
        self.units = []
        for k in range(len(stmts)):
            if k == self.split_at:
                self.units += [("consumer", j) for j in range(len(self.consumer))]
            else:
                self.units.append(("top", k))
        self._top_unit = {k: i for i, (kind, k) in enumerate(self.units) if kind == "top"}
        first_consumer = next((i for i, u in enumerate(self.units) if u[0] == "consumer"), None)
        self._consumer_unit0 = first_consumer

    def _stmt(self, unit):
        kind, k = self.units[unit]
        return self.stmts[k] if kind == "top" else self.consumer[k]

    def unit_of_top(self, k) -> int:
        return self._top_unit.get(k, -1)

    def live_range(self, var):
        """(first, last) unit mentioning ``var`` or a view of it ((0, -1): none)."""
        names = [var, *self.views.get(var.__chandle__(), [])]
        idx = [
            i
            for i in range(len(self.units))
            if alloc_of(self._stmt(i)) is None and uses_any(self._stmt(i), names)
        ]
        if self.split_at is not None and uses_any(self.producer, names):
            if str(var.ty.dtype) == "uint64":  # mbarriers: their bytes are never reused
                return (0, len(self.units) - 1)
            idx += [self._consumer_unit0, self._last_producer_wait()]
        return (min(idx), max(idx)) if idx else (0, -1)

    def _last_producer_wait(self) -> int:
        if not hasattr(self, "_wait"):
            shared = collect_vars(self.producer, is_shared)
            hits = [
                self._consumer_unit0 + j for j, s in enumerate(self.consumer) if uses_any(s, shared)
            ]
            # no consumer statement touches them: live through the whole branch
            self._wait = max(hits) if hits else self._consumer_unit0 + len(self.consumer) - 1
        return self._wait

    def synced_between(self, last, first) -> bool:
        """Whether a barrier every thread of ``first``'s statement takes part in lies
        strictly between units ``last`` and ``first``."""
        return any(self._is_barrier_for(first, u) for u in range(last + 1, first))

    def _is_barrier_for(self, first, unit) -> bool:
        s = self._stmt(unit)
        if self.units[first][0] == "consumer" and self.units[unit][0] == "consumer":
            return is_sync(s) or _is_named_barrier(s, self.threads)
        return self.units[unit][0] == "top" and is_sync(s)

    def consumer_with_syncs(self, split, syncs_before):
        """The split with the consumers' named barrier before each consumer statement
        whose unit is in ``syncs_before``."""
        out = []
        for j, s in enumerate(self.consumer):
            if self._consumer_unit0 + j in syncs_before:
                out.append(consumer_barrier(self.threads))
            out.append(s)
        seq = out[0] if len(out) == 1 else ir.SeqStmt(out)
        return ir.If(split.condition, seq, split.else_case, split.loc)


def _is_split(stmt, thread_var) -> bool:
    """``if threadIdx.x < T: ... else: ...`` (the split of ``warp_specialize_auto``)."""
    if not isinstance(stmt, ir.If) or stmt.else_case is None:
        return False
    cond = stmt.condition
    a, b = getattr(cond, "a", None), getattr(cond, "b", None)
    return (
        type(cond).__name__ == "LT"
        and isinstance(a, ir.Var)
        and a.same_as(thread_var)
        and (isinstance(b, ir.IntImm))
    )


def _cluster_launch(stmts) -> bool:
    """Whether the kernel synchronises a thread-block cluster (``tl::cluster_*``: the
    publishing and closing barriers of a cluster launch, of either multicast schedule)."""
    return any(extern_calls(s, "tl::cluster_") for s in stmts)


def _is_named_barrier(stmt, threads) -> bool:
    if not isinstance(stmt, ir.Evaluate) or extern_name(stmt.value) != "tl::named_barrier_sync":
        return False
    return int(stmt.value.args[2].value) == int(threads)
