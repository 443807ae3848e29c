"""Tile ops: one module per op, each with its IR form and per-backend lowering."""

from . import atomic, copy, cumsum, debug, fill, gemm, rasterize, reduce, sync  # noqa: F401
from . import copy_cuda, fill_cuda, gemm_cuda, gemm_scalar_cuda, reduce_cuda, sync_cuda  # noqa: F401
from .registry import OPS, lowering_for, tile_op_of  # noqa: F401
