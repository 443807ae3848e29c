"""Register fragments of the warp-level ``mma.sync`` and ``ldmatrix`` helpers (``mma.h``, ``ldsm.h``).

One table shared by the code that emits these helpers (``tilelang.cuda.intrinsics``) and the
code that gives them a meaning off the GPU (the CPU backend's ``warp_mma.py``). Maps take the
lane's group ``g = lane // 4``, its thread-in-group ``t = lane % 4`` and the register element
``i``, and return ``(row, col)`` in the ``16 x K`` A tile, the ``K x 8`` B tile or the
``16 x 8`` C tile (PTX ISA, "Matrix Fragments for mma.m16n8k*"). Works on ints and PrimExprs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MmaShape:
    """One ``tl::mma_m16n8k*`` helper: operand/accumulator types, K, per-lane element counts."""

    name: str
    operand_dtype: str
    accum_dtype: str
    k: int
    a_elems: int
    b_elems: int
    a_map: Callable
    b_map: Callable
    c_elems: int = 4

    @staticmethod
    def c_map(g, t, i):
        """(row, col) of accumulator element ``i`` in the 16 x 8 C tile."""
        return g + 8 * (i // 2), 2 * t + i % 2


MMA_SHAPES = {
    s.name: s
    for s in (
        MmaShape(
            "tl::mma_m16n8k16_f16f16f32", "float16", "float32", 16, 8, 4,
            lambda g, t, i: (g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)),
            lambda g, t, i: (2 * t + i % 2 + 8 * (i // 2), g),
        ),
        MmaShape(
            "tl::mma_m16n8k16_bf16bf16f32", "bfloat16", "float32", 16, 8, 4,
            lambda g, t, i: (g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)),
            lambda g, t, i: (2 * t + i % 2 + 8 * (i // 2), g),
        ),
        MmaShape(
            "tl::mma_m16n8k32_s8s8s32", "int8", "int32", 32, 16, 8,
            lambda g, t, i: (g + 8 * ((i // 4) % 2), 4 * t + i % 4 + 16 * (i // 8)),
            lambda g, t, i: (4 * t + i % 4 + 16 * (i // 4), g),
        ),
    )
}  # fmt: skip

#: (operand dtype, accumulator dtype) -> helper name
MMA_BY_DTYPES = {(s.operand_dtype, s.accum_dtype): s.name for s in MMA_SHAPES.values()}


def ldmatrix_name(num: int, trans: bool) -> str:
    """``tl::ptx_ldmatrix_x{num}[_trans]``."""
    return f"tl::ptx_ldmatrix_x{num}" + ("_trans" if trans else "")


def parse_ldmatrix(name: str):
    """``(num, trans)`` of an ``ldmatrix`` helper name, or None."""
    prefix = "tl::ptx_ldmatrix_x"
    if not name or not name.startswith(prefix):
        return None
    rest = name[len(prefix) :]
    trans = rest.endswith("_trans")
    num = rest.removesuffix("_trans")
    if num not in ("1", "2", "4"):
        return None
    return int(num), trans


def ldmatrix_source(lane, num: int, trans: bool, elems_per_reg: int, j):
    """``(source lane, column offset)`` of element ``j`` of matrix register ``q`` that ``lane``
    receives from ``ldmatrix`` (``j < elems_per_reg``): the lane whose row address it reads,
    and the element offset within that 16-byte row. Returns a function of ``q``."""

    def of(q):
        if trans:  # 16-bit only: lane gets (row 2*(lane%4)+j, col lane//4) of matrix q
            return 8 * q + 2 * (lane % 4) + j, lane // 4
        return 8 * q + lane // 4, (lane % 4) * elems_per_reg + j

    return of
