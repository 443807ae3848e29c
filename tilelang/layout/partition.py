"""How a gemm's C tile is split over a block's warps (wavefronts, SIMD-groups).

Shared by the gemm rules whose unit owns a grid of fixed-size C atoms (the scalar CUDA
fallback's 16x8, ROCm MFMA's 16x16, Metal simdgroup's 8x8); the mma.sync and wgmma rules
have their own, with upstream's FullRow/FullCol fallbacks.
"""

from __future__ import annotations

_FULL_ROW, _FULL_COL = 1, 2  # upstream's GemmWarpPolicy values (0 is Square)


def atom_partition(m: int, n: int, units: int, policy: int, atom_m: int, atom_n: int):
    """``(units_m, units_n)`` splitting an ``m x n`` tile over ``units`` in ``atom_m x atom_n``
    atoms, or None when no split divides the tile.

    FullRow (1) puts every unit along M when ``m`` is a multiple of ``atom_m * units``,
    FullCol (2) along N likewise; otherwise (and for Square, 0) the dividing split whose
    per-unit tile is closest to square, the fewest units along M on ties.
    """
    if policy == _FULL_ROW and m % (atom_m * units) == 0:
        return units, 1
    if policy == _FULL_COL and n % (atom_n * units) == 0:
        return 1, units
    best = None
    for um in range(1, units + 1):
        if units % um:
            continue
        un = units // um
        if m % (atom_m * um) or n % (atom_n * un):
            continue
        score = abs(m / um - n / un)
        if best is None or score < best[0]:
            best = (score, um, un)
    return None if best is None else (best[1], best[2])
