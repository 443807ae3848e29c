"""Addresses of elements of shared tiles, through the tile's layout (swizzles, padding).

Used by every rule that hands shared memory to an instruction by address (cp.async,
ldmatrix, wgmma descriptors).
"""

from __future__ import annotations

from tvm_tirx import ir, tirx

from ..layout.swizzle import dtype_bits
from .region import _const


def _flat(coords, out_shape):
    """Row-major flat offset of ``coords`` in ``out_shape``."""
    flat = ir.const(0, "int32") if not coords else None
    for coord, extent in zip(coords, out_shape):
        flat = coord if flat is None else flat * int(extent) + coord
    return flat


def shared_offset(view, layout, rel_row, rel_col):
    """Element offset of ``view[.., row, col]`` (tile-relative) in the tensor's storage."""
    rank = len(view.extents)
    idx = view.index({rank - 2: rel_row, rank - 1: rel_col})
    if layout is None:
        coords, shape = idx, [int(_const(s)) for s in view.shape]
    else:
        coords, shape = layout.map_forward_index(idx), layout.get_output_shape()
    return _flat(coords, shape)


def shared_ptr(view, layout, rel_row, rel_col):
    """A typed pointer to ``view[.., row, col]`` in shared memory."""
    dtype = view.dtype
    nbytes = dtype_bits(dtype) // 8
    off = shared_offset(view, layout, rel_row, rel_col)
    ptr_ty = ir.PtrType(ir.PrimType(dtype), view.scope)
    return tirx.ptr_byte_offset(tirx.address_of(view.tensor), off * nbytes, ty=ptr_ty)
