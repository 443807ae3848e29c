"""Tile ops: one module per op, each with its IR form and per-backend lowering."""

from . import atomic, copy, cumsum, fill, gemm, reduce, sync  # noqa: F401 - registration
from . import copy_cuda, fill_cuda, gemm_scalar_cuda, reduce_cuda, sync_cuda  # noqa: F401
from . import debug  # noqa: F401 - T.print, T.device_assert
from .registry import OPS, lowering_for, tile_op_of  # noqa: F401
from . import gemm_cuda  # noqa: F401,E402 - CUDA gemm layout/lowering rules
