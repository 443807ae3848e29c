"""Tile ops: one module per op, each with its IR form and per-backend lowering."""

from . import (  # noqa: F401  # noqa: F401
    annotate_layout,
    atomic,
    copy,
    copy_cuda,
    cumsum,
    debug,
    fill,
    fill_cuda,
    gemm,
    gemm_cuda,
    gemm_scalar_cuda,
    rasterize,
    reduce,
    reduce_cuda,
    sync,
    sync_cuda,
)
from .registry import OPS, lowering_for, tile_op_of  # noqa: F401
