"""Layout: construction, mapping, output shape, inverse and the algebra helpers."""

import numpy as np
import pytest
from tvm_tirx import ir
from tvm_tirx.ir import prim as P

from tilelang.layout import Layout, make_full_bank_swizzled_layout
from tilelang.layout.proofs import prove_inverse


def test_row_major_basics():
    layout = Layout([4, 8], lambda i, j: i * 8 + j)
    assert layout.get_input_shape() == [4, 8]
    assert layout.get_output_shape() == [32]
    assert [v.name for v in layout.get_forward_vars()] == ["i", "j"]
    assert all(str(v.ty) == "int32" for v in layout.get_forward_vars())
    assert len(layout.get_forward_index()) == 1 and layout.index[0].same_as(layout.forward_index[0])
    assert layout.map_forward_index([1, 2])[0].value == 10
    assert layout(3, 7)[0].value == 31
    assert layout.forward_point(2, 5) == (21,)
    assert layout.forward_table().reshape(-1).tolist() == list(range(32))
    assert "Layout([4, 8] -> [32]" in repr(layout)


def test_map_forward_index_with_expressions_and_passthrough():
    layout = Layout([16, 16], lambda i, j: [i // 8, j, i % 8])
    x, y = ir.Var("x", "int32"), ir.Var("y", "int32")
    out = layout.map_forward_index([x, y])
    assert str(out[0]) == "x // 8" and out[1].same_as(y)
    # extra leading indices pass through unchanged (upstream behaviour)
    batch = ir.Var("b", "int32")
    out = layout.map_forward_index([batch, 3, 4])
    assert out[0].same_as(batch) and [e.value for e in out[1:]] == [0, 4, 3]
    with pytest.raises(ValueError, match="indices has 1 entries"):
        layout.map_forward_index([1])


def test_map_forward_offset_flattens_the_output_box():
    layout = make_full_bank_swizzled_layout([16, 128], "float16")  # box [2, 2, 512]
    assert (
        layout.map_forward_offset([9, 70]).value == 1 * 2 * 512 + 1 * 512 + 1 * 64 + (0 ^ 1) * 8 + 6
    )
    x = ir.Var("x", "int32")
    assert "x" in str(layout.map_forward_offset([x, 0]))
    with pytest.raises(ValueError, match="2 entries"):
        layout.map_forward_offset([1])


def test_output_shape_uses_bound_analysis():
    layout = Layout([64, 64], lambda i, j: [i // 8, (i % 8) * 64 + j])
    assert layout.get_output_shape() == [8, 512]
    swizzle = Layout([8, 64], lambda i, j: i * 64 + P.bitwise_xor(j // 8, i % 8) * 8 + j % 8)
    assert swizzle.get_output_shape() == [512]
    padded = Layout([4, 8], lambda i, j: i * 9 + j)
    assert padded.get_output_shape() == [35]


def test_symbolic_shape():
    n = ir.Var("n", "int32")
    layout = Layout([n, 8], lambda i, j: i * 8 + j)
    assert not layout.is_static()
    (extent,) = layout.get_output_shape()
    assert str(extent) == "n * 8"
    inverse = layout.inverse()
    assert [str(e) for e in inverse.get_forward_index()] == ["i // 8", "i % 8"]
    with pytest.raises(ValueError, match="static"):
        layout.forward_table()


def test_affine_inverse_round_trip():
    layout = Layout([8, 4, 2], lambda i, j, k: [j, k * 8 + i])
    inverse = layout.inverse()
    assert inverse.get_input_shape() == [4, 16]
    assert inverse.get_output_shape() == [8, 4, 2]
    table = layout.forward_table()
    for i, j, k in np.ndindex(8, 4, 2):
        assert inverse.forward_point(*table[i, j, k]) == (i, j, k)
    assert prove_inverse(layout)


def test_swizzle_inverse_and_validation():
    layout = make_full_bank_swizzled_layout([32, 128], "float16")
    inverse = layout.inverse()
    assert inverse.get_output_shape() == [32, 128]
    assert prove_inverse(layout, inverse)
    assert prove_inverse(layout, inverse, method="enumerate")


def test_inverse_rejects_non_bijective_layouts():
    with pytest.raises(ValueError, match="not invertible"):
        Layout([8, 8], lambda i, j: (i % 4) * 8 + j).inverse()
    with pytest.raises(ValueError, match="not invertible"):
        Layout([4, 8], lambda i, j: i * 9 + j).inverse()
    # XOR whose "field" is not a complete power-of-two field of one input
    with pytest.raises(ValueError, match="not invertible"):
        Layout([6, 6], lambda i, j: i * 6 + P.bitwise_xor(j, i % 2)).inverse()


def test_is_equal():
    a = Layout([4, 8], lambda i, j: i * 8 + j)
    assert a.is_equal(Layout([4, 8], lambda x, y: y + x * 8))
    assert a.is_equal(Layout([4, 8], lambda x, y: (x * 16 + y * 2) // 2))
    assert not a.is_equal(Layout([4, 8], lambda x, y: y * 4 + x))
    assert not a.is_equal(Layout([8, 4], lambda x, y: x * 4 + y))
    assert not a.is_equal(Layout([4, 8], lambda x, y: [x, y]))
    with pytest.raises(TypeError, match="other"):
        a.is_equal("row-major")


def test_repeat_expand_reshape():
    base = Layout([2, 4], lambda i, j: j * 2 + i)
    repeated = base.repeat(0, 3)
    assert repeated.get_input_shape() == [6, 4]
    assert repeated.forward_point(5, 3) == (2, 7)
    assert base.repeat(-1, 1) is base
    with pytest.raises(ValueError, match="dim out of range"):
        base.repeat(2, 2)
    with pytest.raises(ValueError, match="factor"):
        base.repeat(0, 0)

    expanded = base.expand([5])
    assert expanded.get_input_shape() == [5, 2, 4]
    assert expanded.forward_point(4, 1, 2) == (4, 5)
    assert base.expand([]) is base

    flat = base.reshape([8])
    assert [flat.forward_point(k)[0] for k in range(8)] == [0, 2, 4, 6, 1, 3, 5, 7]
    with pytest.raises(ValueError, match="element counts"):
        base.reshape([3, 3])


def test_to_index_map_and_print(capsys):
    layout = Layout([4, 4], lambda i, j: [j, i])
    index_map = layout.to_index_map()
    assert len(index_map.final_indices) == 2
    layout.print()
    assert "Layout([4, 4] -> [4, 4]" in capsys.readouterr().out


def test_argument_errors():
    with pytest.raises(TypeError, match="forward_fn"):
        Layout([4], "not callable")
    with pytest.raises(ValueError, match=r"shape\[1\] must be positive"):
        Layout([4, 0], lambda i, j: i)
    with pytest.raises(TypeError, match="shape"):
        Layout([4, 2.5], lambda i, j: i)
    with pytest.raises(ValueError, match="returned no index"):
        Layout([4], lambda i: [])
    stray = ir.Var("stray", "int32")
    with pytest.raises(ValueError, match="stray"):
        Layout([4], lambda i: i + stray)
    with pytest.raises(TypeError, match="forward_fn"):
        Layout([4], lambda i: "index")
