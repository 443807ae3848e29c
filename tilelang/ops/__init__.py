"""Tile ops: one package per op (``ops/<op>/``): its IR form and checks, CPU rule, and CUDA
layout and lowering rules. Importing ``tilelang.ops`` registers every rule.

``registry.py`` is the table: ``(op, backend) -> lowering rule`` and ``op -> layout rule``.
"""

from . import (  # noqa: F401 - each package registers its rules
    annotate_layout,
    atomic,
    copy,
    cumsum,
    debug,
    fill,
    gemm,
    hopper,
    rasterize,
    reduce,
    sync,
    ws_schedule,
)
from .registry import OPS, lowering_for, tile_op_of  # noqa: F401
