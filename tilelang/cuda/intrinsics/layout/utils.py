"""Upstream's mma layout utilities (``tilelang.cuda.intrinsics.layout.utils``)."""

from __future__ import annotations

from .mma_layout import mma_store_32x8_to_shared_16x16_layout


def mma_store_index_map(thread_id, local_id):
    """(row, col) in a 16x16 C tile of accumulator ``local_id`` of lane ``thread_id``."""
    return mma_store_32x8_to_shared_16x16_layout(thread_id, local_id)


def get_mma_micro_size(dtype):
    """``(micro_size_x, micro_size_y, micro_size_k)`` of one mma tile: 16, 16, and k = 32 for
    int8 / fp8 operands, 16 otherwise."""
    k = 32 if str(dtype) in {"float8_e4m3", "float8_e5m2", "int8"} else 16
    return 16, 16, k
