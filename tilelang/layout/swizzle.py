"""Shared-memory layouts: linear, padded and XOR-swizzled.

The swizzles are the CUTLASS/TMA ones, over 16-byte chunks (``vec = 128 / bits``
elements):

* full bank (128B, ``Swizzle<3,4,3>``): rows of 8 chunks, chunk ``c ^ (row % 8)``,
* half bank (64B, ``Swizzle<2,4,3>``): rows of 4 chunks, chunk ``c ^ ((row % 8) // 2)``,
* quarter bank (32B, ``Swizzle<1,4,3>``): rows of 2 chunks, chunk ``c ^ ((row % 8) // 4)``.

A 2-d ``(stride, continuous)`` tile maps to three physical coordinates
``[tile_col, tile_row, offset]``: ``tile_col = col // (vec * chunks)`` selects the
column block (the TMA box), ``tile_row = row // 8`` the 8-row swizzle atom and ``offset``
the element within the atom.  Flattened row-major they give the shared-memory offset.
Extra leading dimensions map identically (``Layout.expand``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import tvm_ffi
from tvm_tirx.ir import prim as P

from . import expr as E
from .layout import Layout


class SwizzleMode(enum.IntEnum):
    """Shared-memory swizzle mode; the value is the CUDA ``CU_TENSOR_MAP_SWIZZLE_*`` ordinal."""

    NONE = 0
    SWIZZLE_32B = 1
    SWIZZLE_64B = 2
    SWIZZLE_128B = 3

    def swizzle_byte_size(self) -> int:
        """Swizzle row width in bytes (1 for NONE, else 32/64/128)."""
        return 1 if self is SwizzleMode.NONE else 16 << int(self)

    def swizzle_atom_size(self) -> int:
        """Swizzle row width in 16-byte chunks (1 for NONE, else 2/4/8)."""
        return 1 if self is SwizzleMode.NONE else self.swizzle_byte_size() // 16

    def wgmma_layout_type(self) -> int:
        """The wgmma matrix-descriptor ``layout_type`` field (none 0, 128B 1, 64B 2, 32B 3)."""
        return 0 if self is SwizzleMode.NONE else 4 - int(self)

    def tcgen05_layout_type(self) -> int:
        """The tcgen05 descriptor swizzle field (none 0, 128B 2, 64B 4, 32B 6)."""
        return 0 if self is SwizzleMode.NONE else 2 * (4 - int(self))

    def smem_alignment(self) -> int:
        """Required shared-memory base alignment in bytes (none 128, else 8 swizzle rows)."""
        return 128 if self is SwizzleMode.NONE else 8 * self.swizzle_byte_size()


_CHUNKS = {SwizzleMode.SWIZZLE_128B: 8, SwizzleMode.SWIZZLE_64B: 4, SwizzleMode.SWIZZLE_32B: 2}


# ---------------------------------------------------------------------------------------
# argument handling
# ---------------------------------------------------------------------------------------


def dtype_bits(dtype) -> int:
    """Element size in bits of a dtype string, ``tvm_ffi.dtype`` or TIRx ``PrimType``."""
    if isinstance(dtype, int):
        return dtype
    bits = getattr(dtype, "bits", None)
    if isinstance(bits, int):
        return bits
    try:
        return int(tvm_ffi.dtype(str(dtype)).bits)
    except Exception as err:  # noqa: BLE001 - report the dtype, not the FFI detail
        raise TypeError(f"dtype {dtype!r} is not a known data type") from err


def buffer_info(buffer) -> tuple[list, int]:
    """``(shape, element_bits)`` of a buffer-like object.

    Accepts anything with ``.shape`` and ``.dtype``, a TIRx tensor ``Var`` (``.ty.shape`` /
    ``.ty.dtype``) or a ``(shape, dtype)`` pair.
    """
    if isinstance(buffer, tuple | list) and len(buffer) == 2 and not E.is_expr(buffer[1]):
        shape, dtype = buffer
        if isinstance(shape, Sequence) and not isinstance(dtype, int):
            return E.normalize_shape(shape), dtype_bits(dtype)
    ty = getattr(buffer, "ty", None)
    source = ty if ty is not None and hasattr(ty, "shape") else buffer
    if not (hasattr(source, "shape") and hasattr(source, "dtype")):
        raise TypeError(
            f"buffer must have .shape and .dtype (or be a (shape, dtype) pair), "
            f"got {type(buffer).__name__}"
        )
    return E.normalize_shape(list(source.shape), "buffer.shape"), dtype_bits(source.dtype)


def _matrix_args(args, what: str) -> tuple[list, int]:
    """Parse ``(buffer)``, ``(shape, dtype)`` or ``(stride, continuous, element_bits)``."""
    if len(args) == 1:
        return buffer_info(args[0])
    if len(args) == 2:
        return buffer_info((args[0], args[1]))
    if len(args) == 3:
        stride, continuous, bits = args
        return E.normalize_shape([stride, continuous]), int(bits)
    raise TypeError(f"{what} takes a buffer, (shape, dtype) or (stride, continuous, bits)")


def _split_matrix(shape, what: str) -> tuple[list, int, int]:
    if len(shape) < 2:
        raise ValueError(f"{what} needs a buffer of rank >= 2, got shape {shape}")
    leading, (stride, continuous) = shape[:-2], shape[-2:]
    if not isinstance(stride, int) or not isinstance(continuous, int):
        raise ValueError(f"{what} needs static last two dimensions, got {shape}")
    return leading, stride, continuous


def _vector(bits: int) -> int:
    if bits <= 0 or 128 % bits:
        raise ValueError(f"element size {bits} bits does not divide a 16-byte vector")
    return 128 // bits


# ---------------------------------------------------------------------------------------
# 2-d builders
# ---------------------------------------------------------------------------------------


def _swizzle_2d(stride: int, continuous: int, bits: int, mode: SwizzleMode) -> Layout:
    vec, chunks = _vector(bits), _CHUNKS[mode]
    if stride % 8:
        raise ValueError(f"{mode.name} swizzle needs rows % 8 == 0, got rows={stride}")
    if continuous % (vec * chunks):
        raise ValueError(
            f"{mode.name} swizzle needs columns % {vec * chunks} == 0 for {bits}-bit elements, "
            f"got columns={continuous}"
        )
    row_shift = 8 // chunks

    def forward(i, j):
        s, chunk = i % 8, j // vec
        swizzled = P.bitwise_xor(chunk % chunks, s // row_shift)
        return [chunk // chunks, i // 8, j % vec + (swizzled + s * chunks) * vec]

    return Layout([stride, continuous], forward)


def _padded_2d(stride: int, continuous: int, bits: int) -> Layout:
    padded = continuous + (128 // bits if (bits * continuous) % 256 == 0 else 0)
    return Layout([stride, continuous], lambda i, j: i * padded + j)


def _f64_2d(stride: int, continuous: int, k_major: bool) -> Layout:
    """fp64 swizzles (``Swizzle<2,0,4>`` K-major, ``Swizzle<2,2,2>`` otherwise) on 4x16 atoms."""

    def forward(i, j):
        s, c = i % 4, j % 16
        if k_major:
            col = (c // 4) * 4 + P.bitwise_xor(c % 4, s)
        else:
            col = c % 4 + P.bitwise_xor(c // 4, s) * 4
        return [j // 16, i // 4, col + s * 16]

    return Layout([stride, continuous], forward)


def _linear(shape) -> Layout:
    def forward(*idx):
        flat = E.as_expr(0)
        for var, extent in zip(idx, shape):
            flat = flat * extent + var
        return flat

    return Layout(shape, forward)


# ---------------------------------------------------------------------------------------
# public constructors
# ---------------------------------------------------------------------------------------


def _bank_swizzle(args, mode: SwizzleMode, what: str) -> Layout:
    shape, bits = _matrix_args(args, what)
    leading, stride, continuous = _split_matrix(shape, what)
    return _swizzle_2d(stride, continuous, bits, mode).expand(leading)


def make_full_bank_swizzled_layout(*args) -> Layout:
    """128-byte swizzle. Args: a buffer, ``(shape, dtype)`` or ``(stride, continuous, bits)``."""
    return _bank_swizzle(args, SwizzleMode.SWIZZLE_128B, "make_full_bank_swizzled_layout")


def make_half_bank_swizzled_layout(*args) -> Layout:
    """64-byte swizzle. Args: a buffer, ``(shape, dtype)`` or ``(stride, continuous, bits)``."""
    return _bank_swizzle(args, SwizzleMode.SWIZZLE_64B, "make_half_bank_swizzled_layout")


def make_quarter_bank_swizzled_layout(*args) -> Layout:
    """32-byte swizzle. Args: a buffer, ``(shape, dtype)`` or ``(stride, continuous, bits)``."""
    return _bank_swizzle(args, SwizzleMode.SWIZZLE_32B, "make_quarter_bank_swizzled_layout")


def make_linear_layout(*args) -> Layout:
    """Row-major layout. Args: a buffer, a shape, ``(shape, dtype)`` or ``(stride, continuous)``."""
    if len(args) == 2 and all(E.as_const_int(a) is not None or E.is_expr(a) for a in args):
        return _linear(E.normalize_shape(list(args)))
    if len(args) == 1 and isinstance(args[0], Sequence) and not isinstance(args[0], str):
        items = list(args[0])
        if items and all(E.as_const_int(a) is not None or E.is_expr(a) for a in items):
            return _linear(E.normalize_shape(items))
    if len(args) in (1, 2):
        shape, _ = buffer_info(args[0] if len(args) == 1 else (args[0], args[1]))
        return _linear(shape)
    raise TypeError("make_linear_layout takes a buffer, a shape or (stride, continuous)")


def make_padded_layout(*args) -> Layout:
    """Row-major with rows padded by 16 bytes when a row is a multiple of 32 bytes."""
    shape, bits = _matrix_args(args, "make_padded_layout")
    leading, stride, continuous = _split_matrix(shape, "make_padded_layout")
    return _padded_2d(stride, continuous, bits).expand(leading)


def make_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    """The default shared-memory layout for a GEMM operand tile (upstream semantics).

    ``buffer`` is buffer-like or a ``(shape, dtype)`` pair; the last two dimensions are the
    ``(rows, row_width)`` matrix.  Rows of ``8 x 16`` bytes (or a multiple) get the 128B
    swizzle, ``4 x 16`` bytes the 64B swizzle.  Otherwise, with ``allow_pad`` the rows are
    padded by 16 bytes; without it (TMA/wgmma-compatible) the 32B swizzle or the linear
    layout is used.  fp64 uses its own 4x16 swizzles; int8 tiles that are not K-major
    are padded.
    """
    shape, bits = buffer_info(buffer)
    leading, stride, continuous = _split_matrix(shape, "make_swizzled_layout")
    if not allow_pad:
        return _wgmma_2d(stride, continuous, bits, k_major).expand(leading)
    if bits == 64:
        if continuous % 16 == 0 and stride % 4 == 0:
            return _f64_2d(stride, continuous, k_major).expand(leading)
        return _padded_2d(stride, continuous, bits).expand(leading)
    vec = _vector(bits)
    if bits == 8 and not k_major:
        base = _padded_2d(stride, continuous, bits)
    elif stride % 8 == 0 and continuous % (vec * 8) == 0:
        base = _swizzle_2d(stride, continuous, bits, SwizzleMode.SWIZZLE_128B)
    elif stride % 8 == 0 and continuous % (vec * 4) == 0:
        base = _swizzle_2d(stride, continuous, bits, SwizzleMode.SWIZZLE_64B)
    else:
        base = _padded_2d(stride, continuous, bits)
    return base.expand(leading)


def _wgmma_2d(stride: int, continuous: int, bits: int, k_major: bool) -> Layout:
    if bits == 64:
        if continuous % 16 == 0 and stride % 4 == 0:
            return _f64_2d(stride, continuous, k_major)
        if stride % 8:
            return _linear([stride, continuous])
        return _swizzle_2d(stride, continuous, bits, SwizzleMode.SWIZZLE_32B)
    mode = wgmma_swizzle_mode(stride, continuous, bits)
    if mode is not SwizzleMode.NONE:
        return _swizzle_2d(stride, continuous, bits, mode)
    if continuous % _vector(bits):
        raise ValueError(
            f"no wgmma-compatible layout for rows={stride}, columns={continuous}, {bits}-bit "
            "elements: rows must be whole 16-byte vectors"
        )
    return _linear([stride, continuous])


def wgmma_swizzle_mode(rows: int, columns: int, element_bits: int) -> SwizzleMode:
    """The widest swizzle a ``rows x columns`` tile of ``element_bits`` elements supports."""
    vec = _vector(element_bits)
    if rows % 8 == 0:
        for mode in (SwizzleMode.SWIZZLE_128B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_32B):
            if columns % (vec * _CHUNKS[mode]) == 0:
                return mode
    return SwizzleMode.NONE


def make_wgmma_swizzled_layout(buffer, continuity: int | None = None, k_major: bool = True):
    """Shared layout whose swizzle a wgmma/TMA descriptor can express (128B/64B/32B/none).

    ``continuity`` is accepted for upstream compatibility; the mode is chosen from the
    row width (last dimension) as upstream does.
    """
    shape, bits = buffer_info(buffer)
    leading, stride, continuous = _split_matrix(shape, "make_wgmma_swizzled_layout")
    if continuity is not None and (not isinstance(continuity, int) or continuity <= 0):
        raise ValueError(f"continuity must be a positive int, got {continuity!r}")
    return _wgmma_2d(stride, continuous, bits, k_major).expand(leading)


def make_swizzle_layout_for_mode(buffer, mode: SwizzleMode) -> Layout:
    """The shared layout of an explicit :class:`SwizzleMode` (NONE gives row-major)."""
    shape, bits = buffer_info(buffer)
    leading, stride, continuous = _split_matrix(shape, "make_swizzle_layout_for_mode")
    mode = SwizzleMode(mode)
    if mode is SwizzleMode.NONE:
        return _linear([stride, continuous]).expand(leading)
    return _swizzle_2d(stride, continuous, bits, mode).expand(leading)


def detect_swizzle_mode(layout: Layout, buffer) -> SwizzleMode:
    """Which bank swizzle ``layout`` is for ``buffer`` (NONE if it is none of them)."""
    shape, bits = buffer_info(buffer)
    leading, stride, continuous = _split_matrix(shape, "detect_swizzle_mode")
    for mode in (SwizzleMode.SWIZZLE_32B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_128B):
        try:
            candidate = _swizzle_2d(stride, continuous, bits, mode).expand(leading)
        except ValueError:
            continue
        if layout.input_dim == candidate.input_dim and layout.is_equal(candidate):
            return mode
    return SwizzleMode.NONE


__all__ = [
    "SwizzleMode",
    "buffer_info",
    "detect_swizzle_mode",
    "dtype_bits",
    "make_full_bank_swizzled_layout",
    "make_half_bank_swizzled_layout",
    "make_linear_layout",
    "make_padded_layout",
    "make_quarter_bank_swizzled_layout",
    "make_swizzle_layout_for_mode",
    "make_swizzled_layout",
    "make_wgmma_swizzled_layout",
    "wgmma_swizzle_mode",
]
