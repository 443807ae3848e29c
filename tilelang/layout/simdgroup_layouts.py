"""Register layout of Apple's ``simdgroup_matrix`` 8x8 accumulators, as :class:`Fragment`s.

``simdgroup_float8x8::thread_elements()`` gives each of the 32 lanes of a SIMD-group two
consecutive elements of a row: lane ``l`` holds ``C[row(l), col(l)]`` and
``C[row(l), col(l) + 1]`` with ``q = l // 4``, ``row(l) = (q & 4) + (l // 2) % 4`` and
``col(l) = 2 (q & 2) + 2 (l % 2)`` (the mapping Apple's GPUs use; MLX's steel GEMM
relies on the same one). The block-level accumulator repeats the atom over each
SIMD-group's ``tm x tn`` atoms and the block's ``group_m x group_n`` SIMD-groups
(row-major). ``prove_fragment`` proves them injective and full
(``testing/python/backends/metal/test_metal_backend.py``).
"""

from __future__ import annotations

from .fragment import Fragment
from .partition import atom_partition

#: lanes of an Apple SIMD-group
SIMD = 32


def _lane_of(i, j):
    """Lane holding element ``(i, j)`` of an 8x8 atom (inverse of row(l)/col(l) above)."""
    # row = (q & 4) + (l // 2) % 4 and col = 2 (q & 2) + 2 (l % 2), q = l // 4:
    # bit 0 of l = (j // 2) % 2, bits 1-2 = i % 4, bit 3 = (j // 4), bit 4 = i // 4
    return (j // 2) % 2 + 2 * (i % 4) + 8 * (j // 4) + 16 * (i // 4)


def make_simdgroup_c_atom_fragment() -> Fragment:
    """The 8x8 accumulator of one ``simdgroup_float8x8``: 2 elements in each of 32 lanes."""
    return Fragment([8, 8], lambda i, j: (_lane_of(i, j), j % 2))


def make_simdgroup_accumulator_fragment(block_m: int, block_n: int, group_m: int, group_n: int):
    """C of a ``block_m x block_n`` tile on ``group_m x group_n`` SIMD-groups of 8x8 atoms.

    Register ``(ti * tn + tj) * 2 + r`` of lane ``l`` in SIMD-group ``g`` holds row
    ``(g // group_n) * Mw + 8 ti + row(l)`` and column ``(g % group_n) * Nw + 8 tj + col(l) + r``.
    """
    for value, name in (
        (block_m, "block_m"),
        (block_n, "block_n"),
        (group_m, "group_m"),
        (group_n, "group_n"),
    ):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if block_m % (8 * group_m) or block_n % (8 * group_n):
        raise ValueError(
            f"{block_m}x{block_n} does not split into {group_m}x{group_n} groups of 8x8 atoms"
        )
    mw, nw = block_m // group_m, block_n // group_n
    tn = nw // 8

    def forward(i, j):
        group = (i // mw) * group_n + j // nw
        index = (((i % mw) // 8) * tn + (j % nw) // 8) * 2 + j % 2
        return group * SIMD + _lane_of(i % 8, j % 8), index

    return Fragment([block_m, block_n], forward)


def group_partition(m: int, n: int, groups: int, policy: int = 0):
    """``(group_m, group_n)`` splitting ``m x n`` into 8x8 atoms over ``groups`` SIMD-groups
    (upstream's policies: 0 Square, 1 FullRow, 2 FullCol); None when none divides."""
    return atom_partition(m, n, groups, policy, 8, 8)


__all__ = [
    "SIMD",
    "group_partition",
    "make_simdgroup_accumulator_fragment",
    "make_simdgroup_c_atom_fragment",
]
