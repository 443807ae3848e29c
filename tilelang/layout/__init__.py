"""Layout algebra: memory layouts, register fragments, swizzles and their proofs.

Public names follow upstream TileLang's ``tilelang.layout``.
"""

from .fragment import Fragment
from .gemm_layouts import (
    ldmatrix_bank_conflicts,
    ldmatrix_lane_layout,
    make_gemm_fragment_8x8,
    make_gemm_fragment_8x8_transposed,
    make_ldmatrix_fragment,
    make_mma_a_atom_fragment,
    make_mma_a_fragment,
    make_mma_accumulator_fragment,
    make_mma_b_atom_fragment,
    make_mma_b_fragment,
    make_mma_c_atom_fragment,
    make_parallel_fragment,
    make_wgmma_a_fragment,
    make_wgmma_accumulator_fragment,
    make_wgmma_atom_fragment,
)
from .layout import Layout
from .swizzle import (
    SwizzleMode,
    detect_swizzle_mode,
    make_full_bank_swizzled_layout,
    make_half_bank_swizzled_layout,
    make_linear_layout,
    make_padded_layout,
    make_quarter_bank_swizzled_layout,
    make_swizzle_layout_for_mode,
    make_swizzled_layout,
    make_wgmma_swizzled_layout,
    wgmma_swizzle_mode,
)

__all__ = [
    "Fragment",
    "Layout",
    "SwizzleMode",
    "detect_swizzle_mode",
    "ldmatrix_bank_conflicts",
    "ldmatrix_lane_layout",
    "make_full_bank_swizzled_layout",
    "make_half_bank_swizzled_layout",
    "make_ldmatrix_fragment",
    "make_linear_layout",
    "make_mma_a_atom_fragment",
    "make_mma_a_fragment",
    "make_mma_accumulator_fragment",
    "make_mma_b_atom_fragment",
    "make_mma_b_fragment",
    "make_gemm_fragment_8x8",
    "make_gemm_fragment_8x8_transposed",
    "make_mma_c_atom_fragment",
    "make_padded_layout",
    "make_parallel_fragment",
    "make_quarter_bank_swizzled_layout",
    "make_swizzle_layout_for_mode",
    "make_swizzled_layout",
    "make_wgmma_a_fragment",
    "make_wgmma_accumulator_fragment",
    "make_wgmma_atom_fragment",
    "make_wgmma_swizzled_layout",
    "wgmma_swizzle_mode",
]
