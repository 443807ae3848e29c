"""Shared-memory layouts: swizzles against CUTLASS Swizzle<B,4,3>, selection and inputs."""

import itertools
from types import SimpleNamespace

import layout_ptx_reference as ref
import pytest
from tvm_tirx import ir
from tvm_tirx.script import tirx as T

from tilelang.layout import (
    Layout,
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
from tilelang.layout.proofs import prove_bijective, prove_inverse

MAKERS = {
    3: make_full_bank_swizzled_layout,  # Swizzle<3,4,3>: 128-byte rows
    2: make_half_bank_swizzled_layout,  # Swizzle<2,4,3>: 64-byte rows
    1: make_quarter_bank_swizzled_layout,  # Swizzle<1,4,3>: 32-byte rows
}
DTYPES = {8: "int8", 16: "float16", 32: "float32"}


def flat_offsets(layout: Layout):
    """Row-major flattened physical offset of every logical element."""
    table, box = layout.forward_table(), layout.get_output_shape()
    flat = table[..., 0] * 0
    for axis, extent in enumerate(box):
        flat = flat * extent + table[..., axis]
    return flat


@pytest.mark.parametrize("bits, elem_bits", itertools.product((3, 2, 1), (8, 16, 32)))
def test_swizzle_matches_cutlass_byte_swizzle(bits, elem_bits):
    width_bytes = 16 << bits
    elem_bytes = elem_bits // 8
    cols = width_bytes // elem_bytes
    rows, boxes = 16, 2
    layout = MAKERS[bits]([rows, cols * boxes], DTYPES[elem_bits])
    offsets = flat_offsets(layout)
    for r, c in itertools.product(range(rows), range(cols * boxes)):
        box, col = divmod(c, cols)
        expected = box * rows * width_bytes + ref.swizzle(r * width_bytes + col * elem_bytes, bits)
        assert offsets[r, c] * elem_bytes == expected, (r, c)


@pytest.mark.parametrize("bits", [3, 2, 1])
def test_swizzles_are_bijections_with_inverses(bits):
    layout = MAKERS[bits]([3, 16, 128], "float16")  # leading batch dim
    assert layout.get_input_shape() == [3, 16, 128]
    assert prove_bijective(layout)
    assert prove_inverse(layout)
    assert detect_swizzle_mode(layout, ([3, 16, 128], "float16")) == SwizzleMode(bits)


def test_swizzle_argument_forms():
    by_tuple = make_full_bank_swizzled_layout(([64, 64], "float16"))
    by_pair = make_full_bank_swizzled_layout([64, 64], "float16")
    by_three = make_full_bank_swizzled_layout(64, 64, 16)
    by_object = make_full_bank_swizzled_layout(SimpleNamespace(shape=(64, 64), dtype="float16"))
    tensor_var = ir.Var("A", T.Tensor((64, 64), "float16"))
    by_var = make_full_bank_swizzled_layout(tensor_var)
    for other in (by_pair, by_three, by_object, by_var):
        assert by_tuple.is_equal(other)
    with pytest.raises(TypeError, match=r"\.shape and \.dtype"):
        make_full_bank_swizzled_layout(42)
    with pytest.raises(ValueError, match="rows % 8"):
        make_full_bank_swizzled_layout([12, 64], "float16")
    with pytest.raises(ValueError, match="columns % 64"):
        make_full_bank_swizzled_layout([16, 32], "float16")
    with pytest.raises(ValueError, match="rank >= 2"):
        make_swizzled_layout(([64], "float16"))
    with pytest.raises(TypeError, match="dtype"):
        make_swizzled_layout(([64, 64], "not_a_dtype"))


def test_make_swizzled_layout_selection():
    def mode(shape, dtype, **kw):
        return detect_swizzle_mode(make_swizzled_layout((shape, dtype), **kw), (shape, dtype))

    assert mode([128, 64], "float16") is SwizzleMode.SWIZZLE_128B
    assert mode([128, 32], "bfloat16") is SwizzleMode.SWIZZLE_64B
    assert mode([64, 128], "int8") is SwizzleMode.SWIZZLE_128B
    assert mode([64, 32], "float32") is SwizzleMode.SWIZZLE_128B
    # 32-byte rows: padded with allow_pad, quarter swizzle without
    padded = make_swizzled_layout(([64, 16], "float16"))
    assert (
        padded.get_output_shape() == [63 * 24 + 16]
        and mode([64, 16], "float16") is SwizzleMode.NONE
    )
    assert mode([64, 16], "float16", allow_pad=False) is SwizzleMode.SWIZZLE_32B
    # int8 tiles that are not K-major are padded
    assert mode([64, 128], "int8", k_major=False) is SwizzleMode.NONE
    # rows not a multiple of 8 cannot swizzle
    odd = make_swizzled_layout(([12, 64], "float16"), allow_pad=False)
    assert odd.is_equal(make_linear_layout(12, 64))


def test_float64_swizzles():
    for k_major in (True, False):
        layout = make_swizzled_layout(([32, 32], "float64"), k_major=k_major)
        assert layout.get_output_shape() == [2, 8, 64]
        assert prove_bijective(layout) and prove_inverse(layout)
    assert make_wgmma_swizzled_layout(([16, 8], "float64")).is_equal(
        make_quarter_bank_swizzled_layout([16, 8], "float64")
    )


def test_wgmma_swizzled_layout_and_modes():
    assert wgmma_swizzle_mode(64, 64, 16) is SwizzleMode.SWIZZLE_128B
    assert wgmma_swizzle_mode(64, 32, 16) is SwizzleMode.SWIZZLE_64B
    assert wgmma_swizzle_mode(64, 16, 16) is SwizzleMode.SWIZZLE_32B
    assert wgmma_swizzle_mode(60, 64, 16) is SwizzleMode.NONE
    for cols, maker in ((64, make_full_bank_swizzled_layout), (32, make_half_bank_swizzled_layout)):
        assert make_wgmma_swizzled_layout(([64, cols], "float16")).is_equal(
            maker([64, cols], "float16")
        )
    assert make_wgmma_swizzled_layout(([64, 8], "float16")).is_equal(make_linear_layout(64, 8))
    with pytest.raises(ValueError, match="16-byte vectors"):
        make_wgmma_swizzled_layout(([64, 4], "float16"))
    with pytest.raises(ValueError, match="continuity"):
        make_wgmma_swizzled_layout(([64, 64], "float16"), continuity=0)


def test_swizzle_mode_descriptor_fields():
    assert [m.swizzle_byte_size() for m in SwizzleMode] == [1, 32, 64, 128]
    assert [m.swizzle_atom_size() for m in SwizzleMode] == [1, 2, 4, 8]
    assert [m.wgmma_layout_type() for m in SwizzleMode] == [0, 3, 2, 1]
    assert [m.tcgen05_layout_type() for m in SwizzleMode] == [0, 6, 4, 2]
    assert [m.smem_alignment() for m in SwizzleMode] == [128, 256, 512, 1024]
    explicit = make_swizzle_layout_for_mode(([16, 64], "float16"), SwizzleMode.SWIZZLE_64B)
    assert detect_swizzle_mode(explicit, ([16, 64], "float16")) is SwizzleMode.SWIZZLE_64B
    plain = make_swizzle_layout_for_mode(([16, 64], "float16"), SwizzleMode.NONE)
    assert detect_swizzle_mode(plain, ([16, 64], "float16")) is SwizzleMode.NONE


def test_linear_and_padded_layouts():
    assert make_linear_layout([2, 3, 4]).forward_point(1, 2, 3) == (23,)
    assert make_linear_layout(4, 8).get_output_shape() == [32]
    assert make_linear_layout(([4, 8], "float16")).get_output_shape() == [32]
    assert make_linear_layout(SimpleNamespace(shape=(4, 8), dtype="float16")).get_input_shape() == [
        4,
        8,
    ]
    padded = make_padded_layout([8, 64], "float16")
    assert padded.forward_point(1, 0) == (72,)
    assert make_padded_layout([8, 12], "float16").forward_point(1, 0) == (12,)
    assert prove_bijective(padded).holds is False
