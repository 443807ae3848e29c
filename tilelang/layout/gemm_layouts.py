"""Register fragments used by GEMM instruction selection, and the default loop fragment.

Conventions (all fragments are :class:`~tilelang.layout.Fragment`):

* ``mma.sync.m16n8k16`` (16-bit A/B) and ``m16n8k32`` (8-bit A/B) per-warp atoms follow
  the PTX ISA "Matrix Fragments for mma.m16n8k16 / m16n8k32" tables: with
  ``groupID = lane >> 2`` and ``threadID_in_group = lane % 4``, register ``r`` of lane
  ``lane`` holds the element listed there.  The local index of an atom *is* the PTX
  register element number (``a0..a7``, ``b0..b3``, ``c0..c3``; 8-bit: ``a0..a15``, ``b0..b7``).
* Operand shapes are the stored (logical) tile: A is ``(m, k)`` (``transposed``:
  ``(k, m)``), B is ``(k, n)`` (``transposed``: ``(n, k)``), C is ``(m, n)``.
* Block fragments use ``warp_m x warp_n`` warps; warp ``(wm, wn)`` is warp number
  ``wm + warp_m * wn`` (threads ``32 * warp .. 32 * warp + 31``) and owns the contiguous
  ``(block_m / warp_m) x (block_n / warp_n)`` sub-tile of C.  Inside a warp the mma tiles
  are numbered row-major over the operand's tile grid and
  ``local = tile * atom_registers + register``.
* A is replicated over the ``warp_n`` warps of a row (``rep = wn``); B over the
  ``warp_m`` warps of a column (``rep = wm``).
"""

from __future__ import annotations

from . import expr as E
from .fragment import Fragment
from .layout import Layout

WARP_SIZE = 32
WARPGROUP_SIZE = 128


def _positive_int(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _positive_ints(**named) -> None:
    """:func:`_positive_int` on each keyword argument, in order (the error names it)."""
    for name, value in named.items():
        _positive_int(value, name)


def _divides(total: int, part: int, what: str) -> int:
    if total % part:
        raise ValueError(f"{what}: {total} is not a multiple of {part}")
    return total // part


def _k_atom(element_bits: int) -> int:
    if element_bits not in (8, 16):
        raise ValueError(f"element_bits must be 8 or 16 for mma.sync operands, got {element_bits}")
    return 256 // element_bits


# ---------------------------------------------------------------------------------------
# per-warp mma.sync atoms
# ---------------------------------------------------------------------------------------


def make_mma_c_atom_fragment() -> Fragment:
    """The 16x8 accumulator of one ``mma.m16n8k*`` (f32/f16/s32): ``c0..c3`` per lane."""
    return Fragment(
        [16, 8],
        forward_thread_fn=lambda i, j: (i % 8) * 4 + j // 2,
        forward_index_fn=lambda i, j: (i // 8) * 2 + j % 2,
    )


def make_gemm_fragment_8x8() -> Fragment:
    """The 8x8 tile of one ``ldmatrix``/``stmatrix`` matrix (16-bit elements): lane ``t``
    holds row ``t // 4``, columns ``2 (t % 4)`` and ``2 (t % 4) + 1``."""
    return Fragment(
        [8, 8],
        forward_thread_fn=lambda i, j: i * 4 + j // 2,
        forward_index_fn=lambda i, j: j % 2,
    )


def make_gemm_fragment_8x8_transposed() -> Fragment:
    """:func:`make_gemm_fragment_8x8` transposed (``ldmatrix .trans``): lane ``t`` holds
    column ``t // 4``, rows ``2 (t % 4)`` and ``2 (t % 4) + 1``."""
    return Fragment(
        [8, 8],
        forward_thread_fn=lambda i, j: j * 4 + i // 2,
        forward_index_fn=lambda i, j: i % 2,
    )


def _a_atom(m, k, element_bits):
    per_reg = 32 // element_bits  # consecutive k elements per 32-bit register: 2 or 4
    half = 128 // element_bits  # k extent of the first register pair: 8 or 16
    thread = (m % 8) * 4 + (k % half) // per_reg
    index = (k // half) * (2 * per_reg) + (m // 8) * per_reg + k % per_reg
    return thread, index


def _b_atom(k, n, element_bits):
    per_reg = 32 // element_bits
    half = 128 // element_bits
    thread = n * 4 + (k % half) // per_reg
    index = (k // half) * per_reg + k % per_reg
    return thread, index


def make_mma_a_atom_fragment(element_bits: int = 16, transposed: bool = False) -> Fragment:
    """A operand of one mma: 16x16 (16-bit, ``a0..a7``) or 16x32 (8-bit, ``a0..a15``).

    ``transposed`` gives the same registers for a tile stored as ``(k, m)``.
    """
    k = _k_atom(element_bits)
    if transposed:
        return Fragment([k, 16], lambda kk, m: _a_atom(m, kk, element_bits))
    return Fragment([16, k], lambda m, kk: _a_atom(m, kk, element_bits))


def make_mma_b_atom_fragment(element_bits: int = 16, transposed: bool = False) -> Fragment:
    """B operand of one mma: 16x8 (16-bit, ``b0..b3``) or 32x8 (8-bit, ``b0..b7``).

    ``transposed`` gives the same registers for a tile stored as ``(n, k)``.
    """
    k = _k_atom(element_bits)
    if transposed:
        return Fragment([8, k], lambda n, kk: _b_atom(kk, n, element_bits))
    return Fragment([k, 8], lambda kk, n: _b_atom(kk, n, element_bits))


# ---------------------------------------------------------------------------------------
# block-level mma.sync fragments
# ---------------------------------------------------------------------------------------


def make_mma_accumulator_fragment(block_m: int, block_n: int, warp_m: int, warp_n: int) -> Fragment:
    """C/accumulator fragment of a ``block_m x block_n`` tile on ``warp_m x warp_n`` warps."""
    _positive_ints(block_m=block_m, block_n=block_n, warp_m=warp_m, warp_n=warp_n)
    tiles_m = _divides(block_m, 16 * warp_m, "block_m vs 16 * warp_m")
    tiles_n = _divides(block_n, 8 * warp_n, "block_n vs 8 * warp_n")
    warp_tile = make_mma_c_atom_fragment().repeat([tiles_m, tiles_n], False, True)
    return warp_tile.repeat([warp_m, warp_n], True, lower_dim_first=False)


def make_mma_a_fragment(
    block_m: int,
    block_n: int,
    block_k: int,
    warp_m: int,
    warp_n: int,
    element_bits: int = 16,
    transposed: bool = False,
) -> Fragment:
    """A fragment (A held in registers) of a ``block_m x block_k`` tile, replicated over ``warp_n``."""
    _positive_ints(block_m=block_m, block_n=block_n, block_k=block_k, warp_m=warp_m, warp_n=warp_n)
    _divides(block_n, warp_n, "block_n vs warp_n")
    k_atom = _k_atom(element_bits)
    tiles_m = _divides(block_m, 16 * warp_m, "block_m vs 16 * warp_m")
    tiles_k = _divides(block_k, k_atom, f"block_k vs {k_atom}")
    atom = make_mma_a_atom_fragment(element_bits, transposed)
    if transposed:
        warp_tile = atom.repeat([tiles_k, tiles_m], False, True)
        block = warp_tile.repeat([1, warp_m], True, lower_dim_first=False)
    else:
        warp_tile = atom.repeat([tiles_m, tiles_k], False, True)
        block = warp_tile.repeat([warp_m, 1], True, lower_dim_first=False)
    return block.replicate(warp_n)


def make_mma_b_fragment(
    block_m: int,
    block_n: int,
    block_k: int,
    warp_m: int,
    warp_n: int,
    element_bits: int = 16,
    transposed: bool = False,
) -> Fragment:
    """B fragment of a ``block_k x block_n`` tile (``transposed``: ``block_n x block_k``).

    Each warp column holds its ``block_n / warp_n`` columns; the ``warp_m`` warps of a
    column hold replicas.
    """
    _positive_ints(block_m=block_m, block_n=block_n, block_k=block_k, warp_m=warp_m, warp_n=warp_n)
    _divides(block_m, warp_m, "block_m vs warp_m")
    k_atom = _k_atom(element_bits)
    tiles_n = _divides(block_n, 8 * warp_n, "block_n vs 8 * warp_n")
    tiles_k = _divides(block_k, k_atom, f"block_k vs {k_atom}")
    atom = make_mma_b_atom_fragment(element_bits, transposed)
    if transposed:
        warp_tile = atom.repeat([tiles_n, tiles_k], False, True).replicate(warp_m)
        return warp_tile.repeat([warp_n, 1], True, lower_dim_first=False)
    warp_tile = atom.repeat([tiles_k, tiles_n], False, True).replicate(warp_m)
    return warp_tile.repeat([1, warp_n], True, lower_dim_first=False)


# ---------------------------------------------------------------------------------------
# wgmma (sm_90a)
# ---------------------------------------------------------------------------------------


def make_wgmma_atom_fragment(n: int) -> Fragment:
    """Accumulator of one ``wgmma.m64nNk*`` over a warpgroup: 64 x n, ``d0..d(n/2-1)``.

    Warp ``w`` of the warpgroup holds rows ``16w .. 16w+15``; within a warp every 8
    columns repeat the ``mma`` C layout.
    """
    _positive_int(n, "n")
    if n % 8 or n > 256:
        raise ValueError(f"wgmma N must be a multiple of 8 in [8, 256], got {n}")
    return Fragment(
        [64, n],
        forward_thread_fn=lambda i, j: (i // 16) * 32 + (i % 8) * 4 + (j % 8) // 2,
        forward_index_fn=lambda i, j: (j // 8) * 4 + ((i % 16) // 8) * 2 + j % 2,
    )


def make_wgmma_accumulator_fragment(
    block_m: int,
    block_n: int,
    warpgroup_m: int = 1,
    warpgroup_n: int = 1,
    instr_n: int | None = None,
) -> Fragment:
    """Accumulator of a ``block_m x block_n`` tile on ``warpgroup_m x warpgroup_n`` warpgroups.

    Warpgroup ``(gm, gn)`` (threads ``128 * (gm + warpgroup_m * gn)`` onwards) owns a
    contiguous ``(block_m / warpgroup_m) x (block_n / warpgroup_n)`` sub-tile, covered by
    ``m64n<instr_n>`` instructions (default: the whole sub-tile width, at most 256);
    ``local = instruction * (instr_n / 2) + d``, instructions numbered row-major.
    """
    _positive_ints(
        block_m=block_m, block_n=block_n, warpgroup_m=warpgroup_m, warpgroup_n=warpgroup_n
    )
    tiles_m = _divides(block_m, 64 * warpgroup_m, "block_m vs 64 * warpgroup_m")
    width = _divides(block_n, warpgroup_n, "block_n vs warpgroup_n")
    if instr_n is None:
        instr_n = width if width <= 256 else 256
    tiles_n = _divides(width, instr_n, "per-warpgroup width vs instr_n")
    atom = make_wgmma_atom_fragment(instr_n)
    group_tile = atom.repeat([tiles_m, tiles_n], False, True)
    return group_tile.repeat([warpgroup_m, warpgroup_n], True, lower_dim_first=False)


def make_wgmma_a_fragment(
    block_m: int,
    block_k: int,
    warpgroup_m: int = 1,
    warpgroup_n: int = 1,
) -> Fragment:
    """A held in registers for ``wgmma.m64nNk16`` (16-bit A): a ``block_m x block_k`` tile.

    PTX ISA "Matrix Fragments for wgmma.m64nNk16", multiplicand A in registers: warp ``w``
    of the warpgroup holds rows ``16w .. 16w+15`` of each m64 tile, in the per-warp
    ``mma.m16n8k16`` A layout (``a0..a7``). Warpgroup ``gm`` (threads ``128 * (gm +
    warpgroup_m * gn)``) holds rows ``gm * block_m / warpgroup_m ..``, the whole K,
    replicated over the ``warpgroup_n`` warpgroups of a row (as the accumulator's
    :func:`make_wgmma_accumulator_fragment` splits C). Tile ``(mi, ki)`` (m64 x k16,
    row-major) holds ``local = 8 * (mi * tiles_k + ki) + a``.

    A 64 x 16 tile has the thread map of a ``make_wgmma_atom_fragment(16)`` accumulator
    and the same local order, so a wgmma accumulator cast to 16 bits is a valid A without
    moving data (FlashAttention's P = cast(Q @ K^T) for P @ V).
    """
    _positive_ints(
        block_m=block_m, block_k=block_k, warpgroup_m=warpgroup_m, warpgroup_n=warpgroup_n
    )
    tiles_m = _divides(block_m, 64 * warpgroup_m, "block_m vs 64 * warpgroup_m")
    tiles_k = _divides(block_k, 16, "block_k vs 16")
    atom = make_mma_a_atom_fragment(16).repeat([4, 1], True)  # 64 x 16 over 4 warps
    group_tile = atom.repeat([tiles_m, tiles_k], False, True)
    block = group_tile.repeat([warpgroup_m, 1], True, lower_dim_first=False)
    return block.replicate(warpgroup_n) if warpgroup_n > 1 else block


# ---------------------------------------------------------------------------------------
# ldmatrix
# ---------------------------------------------------------------------------------------


def make_ldmatrix_fragment(trans: bool = False) -> Fragment:
    """Registers of one 8x8 matrix loaded by ``ldmatrix`` (``.trans``: transposed).

    Without ``.trans`` lane ``t`` receives row ``t // 4``, columns ``2 * (t % 4) + {0, 1}``.
    """
    if trans:
        return Fragment([8, 8], lambda i, j: (j * 4 + i // 2, i % 2))
    return Fragment([8, 8], lambda i, j: (i * 4 + j // 2, j % 2))


def _matrix_origin(q, operand_major_rows_first: bool):
    if operand_major_rows_first:
        return (q % 2) * 8, (q // 2) * 8
    return (q // 2) * 8, (q % 2) * 8


def ldmatrix_lane_layout(operand: str = "A", trans: bool = False, num_matrices: int = 4) -> Layout:
    """Lane -> ``(row, col)`` of the 16-byte row each lane addresses in ``ldmatrix.x{n}``.

    Coordinates are in the stored tile (row = strided dimension, col = contiguous one, 8
    elements of 16 bits per addressed row).  Matrix ``q`` is read from lanes
    ``8q .. 8q+7`` and lands in register ``q``; the order is chosen so the registers
    are the mma operand registers:

    * A stored ``(m, k)`` (``trans=False``) and B stored ``(k, n)`` (``trans=True``):
      matrices at ``(0,0), (8,0), (0,8), (8,8)``,
    * B stored ``(n, k)`` (``trans=False``) and A stored ``(k, m)`` (``trans=True``):
      matrices at ``(0,0), (0,8), (8,0), (8,8)``.
    """
    if operand not in ("A", "B"):
        raise ValueError(f"operand must be 'A' or 'B', got {operand!r}")
    if num_matrices not in (1, 2, 4):
        raise ValueError(f"num_matrices must be 1, 2 or 4, got {num_matrices!r}")
    rows_first = (operand == "A") != bool(trans)

    def forward(lane):
        row0, col0 = _matrix_origin(lane // 8, rows_first)
        return [row0 + lane % 8, col0]

    return Layout([8 * num_matrices], forward)


def ldmatrix_bank_conflicts(
    shared_layout: Layout,
    element_bits: int = 16,
    operand: str = "A",
    trans: bool = False,
    row0: int = 0,
    col0: int = 0,
    num_matrices: int = 4,
) -> int:
    """Extra shared-memory wavefronts of one ``ldmatrix`` on a 2-d shared layout.

    Each 8-lane phase reads eight 16-byte rows; it is conflict free when they fall in
    eight different 16-byte bank groups of a 128-byte line.  Returns the sum over phases of
    ``(max rows sharing a bank group) - 1`` (0 means conflict free).
    """
    if shared_layout.input_dim != 2 or not shared_layout.is_static():
        raise ValueError("ldmatrix_bank_conflicts needs a static 2-d shared layout")
    lanes = ldmatrix_lane_layout(operand, trans, num_matrices)
    box = [int(b) for b in shared_layout.get_output_shape()]
    extra = 0
    for q in range(num_matrices):
        groups: dict[int, int] = {}
        for lane in range(8 * q, 8 * q + 8):
            row, col = lanes.forward_point(lane)
            coords = shared_layout.forward_point(row0 + row, col0 + col)
            flat = 0
            for c, extent in zip(coords, box):
                flat = flat * extent + c
            group = (flat * element_bits // 8 // 16) % 8
            groups[group] = groups.get(group, 0) + 1
        extra += max(groups.values()) - 1
    return extra


# ---------------------------------------------------------------------------------------
# default T.Parallel fragment
# ---------------------------------------------------------------------------------------


def make_parallel_fragment(shape, threads: int, vector: int = 1) -> Fragment:
    """Default fragment of an unconstrained ``T.Parallel`` loop over ``shape``.

    The row-major flattened index is cut into vectors of ``vector`` contiguous elements;
    vector ``v`` goes to thread ``v % threads`` and the ``v // threads``-th iteration, so
    ``local = (flat // (vector * threads)) * vector + flat % vector``.  When there are fewer
    vectors than threads and they divide ``threads``, the fragment is replicated over the
    remaining threads.
    """
    shape = E.normalize_shape(shape)
    if not E.is_static(shape):
        raise ValueError(f"make_parallel_fragment needs a static shape, got {shape}")
    _positive_int(threads, "threads")
    _positive_int(vector, "vector")
    total = int(E.prod(shape))
    vectors = _divides(total, vector, "element count vs vector")
    replicate = 1
    if vectors < threads and threads % vectors == 0:
        replicate = threads // vectors

    def flatten(idx):
        flat = E.as_expr(0)
        for var, extent in zip(idx, shape):
            flat = flat * extent + var
        return flat

    if replicate > 1:
        return Fragment(
            shape,
            forward_thread_fn=lambda *idx: flatten(idx[:-1]) // vector + vectors * idx[-1],
            replicate=replicate,
            forward_index_fn=lambda *idx: flatten(idx) % vector,
        )
    return Fragment(
        shape,
        forward_thread_fn=lambda *idx: (flatten(idx) // vector) % threads,
        forward_index_fn=lambda *idx: (
            (flatten(idx) // (vector * threads)) * vector + flatten(idx) % vector
        ),
    )


__all__ = [
    "WARPGROUP_SIZE",
    "WARP_SIZE",
    "ldmatrix_bank_conflicts",
    "ldmatrix_lane_layout",
    "make_ldmatrix_fragment",
    "make_mma_a_atom_fragment",
    "make_mma_a_fragment",
    "make_mma_accumulator_fragment",
    "make_mma_b_atom_fragment",
    "make_mma_b_fragment",
    "make_mma_c_atom_fragment",
    "make_parallel_fragment",
    "make_wgmma_a_fragment",
    "make_wgmma_accumulator_fragment",
    "make_wgmma_atom_fragment",
]
