"""Upstream's mma layout helpers: the shared-memory swizzle and the mma fragment index maps.

Each map is a plain function of ints or PrimExprs, usable inside a ``T.Layout`` transform or
while tracing a kernel.
"""

from __future__ import annotations

from ....dtypes import bits as _bits
from ....dtypes import canonical as _canonical


def _dtype_bits(dtype) -> int:
    if hasattr(dtype, "bits"):
        return int(dtype.bits)
    return _bits(_canonical(str(dtype)))


def get_swizzle_layout(row_idx, col_idx, row_size, dtype, swizzle_bytes=None):
    """``(col_tile, row, swizzled_col)`` of element ``(row_idx, col_idx)`` of a shared tile
    with ``row_size`` elements per row: 16-byte chunks of each row are XOR-permuted by the
    row (``swizzle_bytes``: 32, 64 or 128 bytes; default ``min(128, row bytes)``), so that
    eight consecutive rows read by ``ldmatrix`` fall in different banks."""
    row_bytes = _dtype_bits(dtype) * int(row_size) // 8
    if row_bytes % 32:
        raise ValueError(
            f"get_swizzle_layout: a row of {row_size} x {dtype} is {row_bytes} bytes; it must be "
            "a multiple of 32 bytes"
        )
    if swizzle_bytes is None:
        swizzle_bytes = min(128, row_bytes)
    if int(swizzle_bytes) not in (32, 64, 128):
        raise ValueError(f"get_swizzle_layout: swizzle_bytes={swizzle_bytes} must be 32, 64 or 128")
    elem_per_16b = 128 // _dtype_bits(dtype)
    vectors = int(swizzle_bytes) // 16
    chunk, within = col_idx // elem_per_16b, col_idx % elem_per_16b
    col_tile, c = chunk // vectors, chunk % vectors
    src = (row_idx % 8) // (8 // vectors)
    return col_tile, row_idx, (c ^ src) * elem_per_16b + within


def make_mma_swizzle_layout(shared_buf, is_smooth: bool = False):
    """A ``T.Layout`` for a shared tile: the swizzle of :func:`get_swizzle_layout` when a row
    is a multiple of 64 bytes (and not ``is_smooth``), else the identity."""
    from ....layout import Layout

    dtype, shape = shared_buf.dtype, list(shared_buf.shape)
    if is_smooth or (int(shape[-1]) * _dtype_bits(dtype)) % 512:
        return Layout(shape, lambda *args: list(args))

    def transform(*args):
        i, j = args[-2:]
        return [*args[:-2], *get_swizzle_layout(i, j, shape[-1], dtype)]

    return Layout(shape, transform)


def mma_store_32x8_to_shared_16x16_layout(thread_id, local_id):
    """(row, col) in a 16x16 C tile of accumulator ``local_id`` (< 8) of lane ``thread_id``."""
    row = 8 * (local_id % 4 // 2) + (thread_id // 4)
    col = 8 * (local_id // 4) + (thread_id % 4) * 2 + (local_id % 2)
    return row, col


def mma_32x8_to_shared_16x16_layout(thread_id, local_id):
    """(row, col) in a 16x16 C tile of accumulator ``local_id`` of lane ``thread_id``."""
    return mma_store_32x8_to_shared_16x16_layout(thread_id, local_id)


def ldmatrix_32x8_to_shared_16x16_layout(thread_id, local_id):
    """(row, col) in a 16x16 tile of element ``local_id`` (< 8) of the 16-byte row that lane
    ``thread_id`` addresses in an ``ldmatrix.x4`` (matrices column-major: lanes 0-15 give
    the rows of columns 0-7, lanes 16-31 those of columns 8-15)."""
    return thread_id % 16, 8 * (thread_id // 16) + local_id % 8


# ---------------------------------------------------------------------------------------
# shared tile element -> (lane, register element) of the mma.sync operand fragments
# ---------------------------------------------------------------------------------------
# A 32-bit register holds ``per = 32 // bits`` consecutive k of one row; the four (A) or
# two-per-n8-half (B) registers of a lane tile 16 x (4 per) elements. Names are upstream's:
# ``sr`` = (spatial, reduction) index order, ``rs`` = (reduction, spatial); ``_trans`` swaps.
def _operand_inverse(bits: int, matrix: str):
    per = 32 // bits
    span = 4 * per  # k covered by one register column

    def inverse(s, r):
        lane = 4 * (s % 8) + (r % span) // per
        if matrix == "A":  # registers: (row half, k block) with the row half fastest
            return lane, per * (2 * (r // span) + s // 8) + r % per
        return lane, per * (2 * (s // 8) + r // span) + r % per  # B: n8 half slowest

    inverse.__doc__ = (
        f"(lane, element) holding element (spatial={'m' if matrix == 'A' else 'n'}, k) of a "
        f"{bits}-bit mma.sync {matrix} operand tile."
    )
    return inverse


def _swapped(fn):
    def swapped(i, j):
        return fn(j, i)

    swapped.__doc__ = (fn.__doc__ or "") + " Arguments in (k, spatial) order."
    return swapped


shared_16x8_to_mma_a_32x4_layout = _operand_inverse(32, "A")
shared_16x8_to_mma_b_32x4_layout = _operand_inverse(32, "B")
shared_16x16_to_mma_a_32x8_layout = _operand_inverse(16, "A")
shared_16x16_to_mma_b_32x8_layout = _operand_inverse(16, "B")
shared_16x32_to_mma_a_32x16_layout = _operand_inverse(8, "A")
shared_16x32_to_mma_b_32x16_layout = _operand_inverse(8, "B")
shared_16x8_to_mma_a_32x4_layout_trans = _swapped(shared_16x8_to_mma_a_32x4_layout)
shared_16x8_to_mma_b_32x4_layout_trans = _swapped(shared_16x8_to_mma_b_32x4_layout)
shared_16x16_to_mma_a_32x8_layout_trans = _swapped(shared_16x16_to_mma_a_32x8_layout)
shared_16x16_to_mma_b_32x8_layout_trans = _swapped(shared_16x16_to_mma_b_32x8_layout)
shared_32x16_to_mma_a_32x16_layout_trans = _swapped(shared_16x32_to_mma_a_32x16_layout)
shared_32x16_to_mma_b_32x16_layout_trans = _swapped(shared_16x32_to_mma_b_32x16_layout)

shared_16x8_to_mma_32x4_layout_sr_a = shared_16x8_to_mma_a_32x4_layout
shared_16x8_to_mma_32x4_layout_sr_b = shared_16x8_to_mma_b_32x4_layout
shared_16x8_to_mma_32x4_layout_rs_a = shared_16x8_to_mma_a_32x4_layout_trans
shared_16x8_to_mma_32x4_layout_rs_b = shared_16x8_to_mma_b_32x4_layout_trans
shared_16x16_to_mma_32x8_layout_sr_a = shared_16x16_to_mma_a_32x8_layout
shared_16x16_to_mma_32x8_layout_sr_b = shared_16x16_to_mma_b_32x8_layout
shared_16x16_to_mma_32x8_layout_rs_a = shared_16x16_to_mma_a_32x8_layout_trans
shared_16x16_to_mma_32x8_layout_rs_b = shared_16x16_to_mma_b_32x8_layout_trans
shared_16x32_to_mma_32x16_layout_sr_a = shared_16x32_to_mma_a_32x16_layout
shared_16x32_to_mma_32x16_layout_sr_b = shared_16x32_to_mma_b_32x16_layout
shared_16x32_to_mma_32x16_layout_rs_a = shared_32x16_to_mma_a_32x16_layout_trans
shared_16x32_to_mma_32x16_layout_rs_b = shared_32x16_to_mma_b_32x16_layout_trans


def _operand_forward(bits: int, matrix: str):
    per = 32 // bits
    span = 4 * per

    def forward(thread_id, local_id):
        g, t = thread_id // 4, thread_id % 4
        reg, e = local_id // per, local_id % per
        if matrix == "A":  # (m, k)
            return g + 8 * (reg % 2), span * (reg // 2) + per * t + e
        return g + 8 * (reg // 2), span * (reg % 2) + per * t + e  # B: (n, k)

    forward.__doc__ = (
        f"(row, col) = ({'m' if matrix == 'A' else 'n'}, k) of element ``local_id`` of lane "
        f"``thread_id`` in a {bits}-bit mma.sync {matrix} operand tile."
    )
    return forward


mma_load_a_32x4_to_shared_16x8_layout = _operand_forward(32, "A")
mma_load_b_32x4_to_shared_16x8_layout = _operand_forward(32, "B")
mma_load_a_32x8_to_shared_16x16_layout = _operand_forward(16, "A")
mma_load_b_32x8_to_shared_16x16_layout = _operand_forward(16, "B")
mma_load_a_32x16_to_shared_16x32_layout = _operand_forward(8, "A")
mma_load_b_32x16_to_shared_16x32_layout = _operand_forward(8, "B")
