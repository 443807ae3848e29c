"""Register layouts of AMD CDNA matrix instructions (MFMA), as :class:`Fragment`s.

The ROCm backend (``tilelang/ops/gemm/mfma_rocm.py``) lowers ``T.gemm`` to 16x16 MFMA
instructions of a 64-lane wavefront:

* ``v_mfma_f32_16x16x16f16`` / ``..._16x16x16bf16_1k`` / ``v_mfma_i32_16x16x16i8``
  (gfx90a): every lane holds 4 consecutive k elements of A and of B;
* ``v_mfma_i32_16x16x32_i8`` (gfx940/942): 8 consecutive k elements per lane.

In all of them lane ``l`` holds ``A[l % 16, kpl * (l // 16) + v]`` and
``B[kpl * (l // 16) + v, l % 16]`` (``v < kpl``, the k elements per lane), and the 16x16
accumulator element ``D[4 * (l // 16) + r, l % 16]`` in its register ``r`` (r < 4), as
AMD's matrix instruction calculator lists them for these opcodes. The block-level
accumulator repeats the atom over the wavefront's ``tm x tn`` atoms and the block's
``wave_m x wave_n`` wavefronts (row-major: wave ``w`` covers rows ``(w // wave_n) * M/wave_m``
and columns ``(w % wave_n) * N/wave_n``). ``tilelang.layout.proofs.prove_fragment`` proves
each of them injective and full (testing/python/layout/test_mfma_layouts.py).
"""

from __future__ import annotations

from .fragment import Fragment
from .partition import atom_partition

#: lanes of a CDNA wavefront
WAVE = 64


def _positive(value, name):
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _split(total, parts, atom, what):
    _positive(total, what)
    _positive(parts, f"waves along {what}")
    if total % (parts * atom):
        raise ValueError(f"{what} = {total} is not a multiple of {parts} waves x {atom}")
    return total // parts


def make_mfma_c_atom_fragment() -> Fragment:
    """The 16x16 accumulator of one 16x16xK MFMA: 4 registers in each of 64 lanes."""
    return Fragment(
        [16, 16],
        forward_thread_fn=lambda i, j: (i // 4) * 16 + j,
        forward_index_fn=lambda i, j: i % 4,
    )


def make_mfma_a_atom_fragment(k_per_lane: int = 4, transposed: bool = False) -> Fragment:
    """A operand of one MFMA: 16 x (4 * k_per_lane) (``transposed``: stored as (k, m))."""
    _positive(k_per_lane, "k_per_lane")
    k = 4 * k_per_lane
    if transposed:
        return Fragment([k, 16], lambda kk, m: (m + 16 * (kk // k_per_lane), kk % k_per_lane))
    return Fragment([16, k], lambda m, kk: (m + 16 * (kk // k_per_lane), kk % k_per_lane))


def make_mfma_b_atom_fragment(k_per_lane: int = 4, transposed: bool = False) -> Fragment:
    """B operand of one MFMA: (4 * k_per_lane) x 16 (``transposed``: stored as (n, k))."""
    _positive(k_per_lane, "k_per_lane")
    k = 4 * k_per_lane
    if transposed:
        return Fragment([16, k], lambda n, kk: (n + 16 * (kk // k_per_lane), kk % k_per_lane))
    return Fragment([k, 16], lambda kk, n: (n + 16 * (kk // k_per_lane), kk % k_per_lane))


def make_mfma_accumulator_fragment(
    block_m: int, block_n: int, wave_m: int, wave_n: int
) -> Fragment:
    """C of a ``block_m x block_n`` tile on ``wave_m x wave_n`` wavefronts of 16x16 MFMAs.

    Register ``(ti * tn + tj) * 4 + r`` of lane ``l`` in wave ``w`` holds row
    ``(w // wave_n) * Mw + 16 * ti + 4 * (l // 16) + r`` and column
    ``(w % wave_n) * Nw + 16 * tj + l % 16``, with ``Mw = block_m / wave_m``,
    ``Nw = block_n / wave_n`` and ``tn = Nw / 16``.
    """
    mw = _split(block_m, wave_m, 16, "block_m")
    nw = _split(block_n, wave_n, 16, "block_n")
    tn = nw // 16

    def forward(i, j):
        wave = (i // mw) * wave_n + j // nw
        lane = ((i % 16) // 4) * 16 + j % 16
        index = (((i % mw) // 16) * tn + (j % nw) // 16) * 4 + i % 4
        return wave * WAVE + lane, index

    return Fragment([block_m, block_n], forward)


def wave_partition(m: int, n: int, waves: int, policy: int = 0):
    """``(wave_m, wave_n)`` splitting an ``m x n`` C tile over ``waves`` wavefronts in
    16x16 atoms, following upstream's GemmWarpPolicy (0 Square, 1 FullRow, 2 FullCol);
    None when no split divides the tile."""
    return atom_partition(m, n, waves, policy, 16, 16)


__all__ = [
    "WAVE",
    "make_mfma_a_atom_fragment",
    "make_mfma_accumulator_fragment",
    "make_mfma_b_atom_fragment",
    "make_mfma_c_atom_fragment",
    "wave_partition",
]
