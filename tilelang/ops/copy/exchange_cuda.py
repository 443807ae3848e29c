"""``T.copy`` between two fragments whose layouts differ: an exchange through shared memory.

Gemm operands and accumulators fix their fragments' layouts, and they need not agree: in
FlashAttention with 8 warps on 64 rows, the Q @ K^T accumulator splits each row over two
warp columns while P @ V's register A wants whole rows on every warp. Such a copy cannot be
done register to register, so each thread stores its source elements into a shared
workspace laid out like the destination (row-major; the rows padded by 16 bytes when their
size is a multiple of 128 bytes, so a fragment's rows do not land on the same banks), and
then loads the elements its destination layout gives it. Both halves are the ordinary
fragment <-> shared lowerings (``lower_fragment_side``: vectorized runs, replica 0 stores);
the barriers between them, and before the workspace is written again in a loop, come from
sync insertion like every other shared access. The workspace is stored in the destination's
dtype (the copy's cast happens on the way in).
"""

from __future__ import annotations

from ...layout import expr as E
from ...lowering.irb import seq
from ...lowering.region import RegionView, make_region
from ...lowering.thread_utils import _bits, alloc, new_tensor

_BANK_ROW_BYTES = 128  # 32 banks x 4 bytes
_PAD_BYTES = 16


def workspace_shape(shape: list[int], dtype_bits: int) -> list[int]:
    """The workspace's shape: ``shape`` with the last axis padded by 16 bytes when a row is
    a multiple of 128 bytes (every row would start on bank 0)."""
    shape = list(shape)
    row_bytes = shape[-1] * dtype_bits // 8
    if len(shape) > 1 and row_bytes % _BANK_ROW_BYTES == 0:
        shape[-1] += _PAD_BYTES * 8 // dtype_bits
    return shape


def lower_fragment_exchange(src, dst, sa, da, ctx, loc):
    """``dst = src`` for fragments (or parts of them) with different layouts, or different
    parts, through shared memory.

    ``sa`` / ``da``: the copy's matched axes (``copy.matched_axes``) of ``src`` / ``dst``.
    """
    from .cuda import lower_fragment_side  # noqa: PLC0415 - copy_cuda imports this module

    shape = [E.as_const_int(d) for d in dst.tensor.ty.shape]
    padded = workspace_shape(shape, _bits(dst.tensor))
    ws = new_tensor(f"{dst.name}_exchange", padded, dst.dtype, "shared.dyn")
    ctx.extra_allocs.append(alloc(ws))
    view = RegionView.of(make_region(ws, dst.begins, dst.extents))
    # the workspace has dst's shape: dst's matched axes index it, src's axes map onto them;
    # for parts of fragments, src's part lands at dst's part and dst reads it back from there
    write = lower_fragment_side(src, view, sa, da, ctx, False, loc)
    read = lower_fragment_side(dst, view, da, da, ctx, True, loc)
    return seq([write, read])
