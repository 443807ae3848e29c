"""``T.copy(shared -> fragment)`` through ``ldmatrix`` (CUDA, sm_75+).

``ldmatrix.m8n8.x{1,2,4}[.trans].b16`` (``tilelang/backends/cuda/include/tl_templates/cuda/ldsm.h``): lanes
``8q .. 8q+7`` of a warp give the addresses of the eight 16-byte rows of matrix ``q``;
32-bit register ``q`` of lane ``t`` receives row ``t // 4``, word ``t % 4`` of matrix ``q``
(``.trans``: the 16-bit elements ``(2 (t % 4) + h, t // 4)``, ``h = 0, 1``).

When it is used (decided from the layouts, no names involved)
    The fragment's local slots are cut into 32-bit registers (2 slots of 16 bits, or 4
    of 8 bits). A register is *one ldmatrix matrix* of a warp when, for every lane, the
    shared-memory offsets of the elements the fragment puts in it are exactly where
    ``ldmatrix`` (or ``.trans``, 16-bit only) delivers them: every register of lane ``t``
    holds word ``t % 4`` of the 16-byte row that lane ``4 (t // 4)`` holds word 0 of,
    and that row starts 16-byte aligned in the tensor. This is checked by enumerating
    every (thread, slot) of the fragment (from its forward map) and every shared offset
    (through the shared tile's layout: linear, swizzled, multi-buffered), over every
    value the copy's symbolic begins can take (their bounds and divisibility as the
    analyzer proves them, clipped to the tensor; at most :data:`MAX_BEGIN_VALUES`
    combinations). Consecutive registers of the same mode form ``x4``/``x2``/``x1``
    calls; if any register is not a matrix the copy keeps the per-thread loads.

Other requirements: same 16-bit (or 8-bit, no ``.trans``) element type on both sides,
a static shared tile, a whole fragment with a 1-d local index spanning whole warps, and
``ctx.arch`` at least sm_75. Shared tiles are always inside their allocation (no tails).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np
from tvm_tirx import ir, tirx

from ...layout import Fragment
from ...layout import expr as E
from ...lowering.thread_utils import _bits, fragment_points, is_shared, physical

#: Set False to lower every shared -> fragment copy with per-thread loads.
#: Most combinations of symbolic begin values the fit is checked over.
MAX_BEGIN_VALUES = 256
WARP = 32


@dataclass(frozen=True)
class LdmatrixCall:
    """One warp-wide ``ldmatrix``: local slots ``slot .. slot + num * per`` (``per`` elements/register)."""

    slot: int
    num: int
    trans: bool

    @property
    def extern(self) -> str:
        return f"tl::ptx_ldmatrix_x{self.num}" + ("_trans" if self.trans else "")


def _arch_ok(arch) -> bool:
    m = re.match(r"sm_(\d+)", str(arch or ""))
    return m is not None and int(m.group(1)) >= 75


def _slot_table(layout: Fragment):
    """``X[thread, slot] -> logical coordinates`` (shape ``(span, slots, dims)``), or None
    unless every (thread < span, slot) holds exactly one element."""
    shape = [int(s) for s in layout.get_input_shape()]
    span, slots = layout.get_thread_size(), layout.get_local_size()
    points = E.grid(shape)
    logical = layout.get_forward_vars()[-len(shape) :]
    (slot,) = E.evaluate_all(layout.get_forward_index(), logical, points)
    threads = layout.thread_table().reshape(layout.get_replicate(), -1)
    table = np.full((span, slots, len(shape)), -1, np.int64)
    count = np.zeros((span, slots), np.int64)
    coords = np.stack(points, axis=-1)
    for rep_threads in threads:
        if rep_threads.min() < 0 or slot.min() < 0 or slot.max() >= slots:
            return None
        np.add.at(count, (rep_threads, slot), 1)
        table[rep_threads, slot] = coords
    return table if (count == 1).all() else None


def _begin_values(begin, dim_extent, tile_extent, ctx):
    """Every value ``begin`` can take with the tile inside the tensor, or None if too many."""
    c = E.as_const_int(begin)
    if c is not None:
        return [c]
    bound = ctx.analyzer.const_int_bound(begin)
    lo, hi = max(int(bound.min_value), 0), min(int(bound.max_value), dim_extent - tile_extent)
    mod = ctx.analyzer.modular_set(begin)
    coeff, base = int(mod.coeff), int(mod.base)
    if coeff == 0:
        return [base] if lo <= base <= hi else []
    first = lo + (base - lo) % coeff
    values = list(range(first, hi + 1, coeff))
    return values if len(values) <= MAX_BEGIN_VALUES else None


def _offset_tables(table, shared_view, fa, oa, ctx):
    """Shared element offsets ``O[combo, thread, slot]`` over every begin combination."""
    shape = [E.as_const_int(s) for s in shared_view.shape]
    extents = [E.as_const_int(e) for e in shared_view.extents]
    if None in shape or None in extents:
        return None
    choices = []
    for b, dim, ext in zip(shared_view.begins, shape, extents):
        values = _begin_values(b, dim, ext, ctx)
        if values is None:
            return None
        choices.append(values)
    combos = list(itertools.product(*choices))
    if not combos or len(combos) > MAX_BEGIN_VALUES:
        return None
    layout = ctx.get_layout(shared_view.tensor)
    out = []
    for combo in combos:
        idx = [np.full(table.shape[:2], v, np.int64) for v in combo]
        for f, o in zip(fa, oa):
            idx[o] = idx[o] + table[..., f]
        if layout is None:
            coords, box = idx, shape
        else:
            flat_idx = [i.reshape(-1) for i in idx]
            coords = E.evaluate_all(layout.get_forward_index(), layout.get_forward_vars(), flat_idx)
            coords = [np.asarray(c).reshape(table.shape[:2]) for c in coords]
            box = [int(b) for b in layout.get_output_shape()]
        off = np.zeros(table.shape[:2], np.int64)
        for c, b in zip(coords, box):
            off = off * b + c
        out.append(off)
    return np.stack(out)


def _register_mode(offsets, slot, per, align):
    """True (``.trans``), False (plain) or None: how the register at ``slot`` is one matrix."""
    c, span, _ = offsets.shape
    o = offsets.reshape(c, span // WARP, WARP, -1)
    got = o[..., slot : slot + per]
    lanes = np.arange(WARP)
    rows = o[:, :, 4 * np.arange(8), slot]  # plain: row rho is held (word 0) by lane 4 rho
    want = rows[:, :, lanes // 4, None] + per * (lanes % 4)[:, None] + np.arange(per)
    if (rows % align == 0).all() and (got == want).all():
        return False
    if per != 2:
        return None
    m = np.arange(8)  # .trans: row m is held (column 0) by lane m // 2, half m % 2
    rows = o[:, :, m // 2, slot + m % 2]
    want = np.stack([rows[:, :, 2 * (lanes % 4) + h] + lanes // 4 for h in (0, 1)], axis=-1)
    if (rows % align == 0).all() and (got == want).all():
        return True
    return None


def _enabled(ctx) -> bool:
    """Pass config ``tl.disable_ldmatrix`` unset (contexts without options: enabled)."""
    options = getattr(ctx, "options", None)
    return True if options is None else options["ldmatrix"]


def plan_ldmatrix(frag_view, shared_view, fa, oa, ctx):
    """The ``ldmatrix`` calls that perform this shared -> fragment copy, or None."""
    if not (
        _enabled(ctx) and is_shared(shared_view.tensor) and _arch_ok(getattr(ctx, "arch", None))
    ):
        return None
    layout = ctx.get_layout(frag_view.tensor)
    bits = _bits(frag_view.tensor)
    if (
        not isinstance(layout, Fragment)
        or frag_view.dtype != shared_view.dtype
        or bits not in (8, 16)
        or layout.output_dim != 1
        or any(E.as_const_int(b) != 0 for b in frag_view.begins)
        or [E.as_const_int(e) for e in frag_view.extents]
        != [E.as_const_int(d) for d in frag_view.shape]
        or (layout.get_thread_range() is not None and E.as_const_int(layout.thread_range[0]) != 0)
    ):
        return None
    per = 32 // bits
    span, slots = layout.get_thread_size(), layout.get_local_size()
    if span % WARP or span > ctx.threads or slots % per:
        return None
    table = _slot_table(layout)
    if table is None:
        return None
    offsets = _offset_tables(table, shared_view, fa, oa, ctx)
    if offsets is None:
        return None
    modes = [_register_mode(offsets, s, per, 128 // bits) for s in range(0, slots, per)]
    if any(m is None for m in modes):
        return None
    calls, i = [], 0
    while i < len(modes):
        num = next(n for n in (4, 2, 1) if modes[i : i + n] == [modes[i]] * n)
        calls.append(LdmatrixCall(i * per, num, modes[i]))
        i += num
    return calls


def lower_ldmatrix_copy(frag_view, shared_view, fa, oa, ctx, loc):
    """``shared -> fragment`` as warp-wide ``ldmatrix`` calls, or None when they do not fit."""
    calls = plan_ldmatrix(frag_view, shared_view, fa, oa, ctx)
    if calls is None:
        return None
    layout = ctx.get_layout(frag_view.tensor)
    local = ctx.local_of(frag_view.tensor)
    per = 32 // _bits(frag_view.tensor)
    tx = ctx.thread_var
    lane, warp0 = tx % WARP, tx // WARP * WARP
    stmts = []
    for call in calls:
        q = (lane // 8) % call.num if call.num > 1 else 0
        r = lane % 8
        if call.trans:  # row r: lane r // 2, half r % 2 holds its first element
            src_t, src_slot = warp0 + r // 2, call.slot + per * q + r % 2
        else:  # row r: lane 4 r holds its first word
            src_t, src_slot = warp0 + 4 * r, call.slot + per * q
        points = fragment_points(layout, src_slot, src_t)[:-1]
        idx = shared_view.index({o: points[f] for f, o in zip(fa, oa)})
        phys = physical(shared_view.tensor, [ctx.simplify(i) for i in idx], ctx)
        ptr = tirx.address_of(ir.TensorLoad(shared_view.tensor, phys))
        dst = tirx.address_of(ir.TensorLoad(local, [ir.const(call.slot, "int32")]))
        stmts.append(ir.Evaluate(tirx.call_extern(call.extern, ptr, dst, ty="void"), loc=loc))
    body = stmts[0] if len(stmts) == 1 else ir.SeqStmt(stmts)
    span = layout.get_thread_size()
    if span < ctx.threads:
        body = ir.If(tx < span, body, None)
    return body


__all__ = ["LdmatrixCall", "lower_ldmatrix_copy", "plan_ldmatrix"]
