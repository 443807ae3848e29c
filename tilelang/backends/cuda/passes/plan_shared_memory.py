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
    decl_view,
    is_shared,
    is_sync,
    new_tensor,
    scope_of,
    sync_threads,
)

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
    """``var`` itself, or a same-rank tensor holding its padded layout's largest offset."""
    layout = _layout_of(var, layouts)
    shape = [E.as_const_int(d) for d in var.ty.shape]
    if layout is None or None in shape or not shape:
        return var
    need = storage_elements(layout)
    have = int(E.prod(shape))
    if need <= have:
        return var
    inner = int(E.prod(shape[1:]))
    rows = -(-need // inner)
    return new_tensor(var.name, [rows] + shape[1:], str(var.ty.dtype), scope_of(var))


def _alloc_loc(stmt):
    """Source location of an allocation (on the Bind, or on its ``alloc_tensor`` call)."""
    loc = getattr(stmt, "loc", None)
    if errors.where(loc):
        return loc
    return getattr(getattr(stmt, "value", None), "loc", None)


def plan_shared_memory(body, arch: str = "sm_90a", layouts=None, plan: dict | None = None):
    """Place every shared tile of ``body`` in one ``shared.dyn`` buffer (module docstring).

    ``layouts`` maps tile Vars to their Layouts (the CUDA pipeline's layout map); only
    padded ones change anything here.
    """
    _, inner = launches_of(body)
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
    uses = {}
    for var in tiles:
        idx = [k for k, s in enumerate(stmts) if alloc_of(s) is None and uses_any(s, [var])]
        uses[var.__chandle__()] = (min(idx), max(idx)) if idx else (0, -1)
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
            if overlap and l2 < first:
                if not any(is_sync(stmts[k]) for k in range(l2 + 1, first)):
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
        if k in syncs_before:
            out.append(sync_threads())
        out.append(substitute(s, renamed) if renamed else s)
    return with_launch_body(body, out[0] if len(out) == 1 else ir.SeqStmt(out))
