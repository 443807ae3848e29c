"""Z3 proofs, cross-checked by enumeration, on random layouts (hypothesis)."""

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm_tirx.ir import prim as P

from tilelang.layout import (
    Fragment,
    Layout,
    make_full_bank_swizzled_layout,
    make_half_bank_swizzled_layout,
    make_ldmatrix_fragment,
    make_mma_a_atom_fragment,
    make_mma_c_atom_fragment,
    make_parallel_fragment,
    make_quarter_bank_swizzled_layout,
)
from tilelang.layout.proofs import (
    ProofResult,
    prove_bijective,
    prove_fragment,
    prove_injective,
    prove_inverse,
)

SETTINGS = settings(
    deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)

dims = st.lists(st.integers(1, 6), min_size=1, max_size=3)


def permuted_row_major(shape, order):
    """Row-major over the dimensions taken in ``order``."""

    def forward(*idx):
        flat = 0
        for axis in order:
            flat = flat * shape[axis] + idx[axis]
        return flat

    return Layout(shape, forward)


@st.composite
def affine_layouts(draw):
    shape = draw(dims)
    order = draw(st.permutations(range(len(shape))))
    kind = draw(st.sampled_from(["flat", "tiled"]))
    if kind == "flat":
        return permuted_row_major(shape, order)
    # tile the first dimension: [i // t, (i % t) * rest + flat(rest)]
    tile = draw(st.sampled_from([d for d in range(1, shape[0] + 1) if shape[0] % d == 0]))

    def forward(*idx):
        rest = 0
        for axis in order:
            if axis:
                rest = rest * shape[axis] + idx[axis]
        inner = int(np.prod(shape[1:]))
        return [idx[0] // tile, (idx[0] % tile) * inner + rest]

    return Layout(shape, forward)


@st.composite
def swizzled_layouts(draw):
    maker, chunks = draw(
        st.sampled_from(
            [
                (make_full_bank_swizzled_layout, 8),
                (make_half_bank_swizzled_layout, 4),
                (make_quarter_bank_swizzled_layout, 2),
            ]
        )
    )
    bits = draw(st.sampled_from([8, 16, 32]))
    rows = 8 * draw(st.integers(1, 3))
    cols = (128 // bits) * chunks * draw(st.integers(1, 2))
    return maker(rows, cols, bits)


def same_verdict(layout):
    z3_result = prove_bijective(layout)
    enum_result = prove_bijective(layout, method="enumerate")
    assert isinstance(z3_result, ProofResult)
    assert z3_result.holds == enum_result.holds, (str(z3_result), str(enum_result))
    return z3_result


@SETTINGS
@given(affine_layouts())
def test_random_affine_layouts_are_bijective(layout):
    assert same_verdict(layout), layout
    inverse = layout.inverse()
    assert prove_inverse(layout, inverse)
    assert prove_inverse(layout, inverse, method="enumerate")
    # explicit enumeration of inverse(forward(x)) == x
    table = layout.forward_table()
    for index in itertools.product(*(range(d) for d in layout.get_input_shape())):
        assert inverse.forward_point(*table[index]) == index


@SETTINGS
@given(swizzled_layouts())
def test_random_swizzled_layouts_are_bijective(layout):
    assert same_verdict(layout), layout
    assert prove_inverse(layout)
    inverse = layout.inverse()
    points = np.stack(np.indices(layout.get_input_shape()), axis=-1).reshape(-1, 2)
    table = layout.forward_table().reshape(-1, 3)
    for point, image in zip(points[::7], table[::7]):
        assert inverse.forward_point(*image) == tuple(point)


@SETTINGS
@given(st.integers(2, 8), st.integers(1, 8), st.data())
def test_folding_layouts_are_reported_non_injective(rows, cols, data):
    fold = data.draw(st.integers(1, rows - 1))
    layout = Layout([rows, cols], lambda i, j: (i % fold) * cols + j)
    for method in ("z3", "enumerate"):
        result = prove_injective(layout, method=method)
        assert result.holds is False and not result
        first, second = result.counterexample["inputs"]
        assert first != second
        assert layout.forward_point(*first) == layout.forward_point(*second)
        assert layout.forward_point(*first) == result.counterexample["output"]
        assert "both map to" in result.message
    assert prove_bijective(layout).holds is False


atoms = st.sampled_from(
    [
        make_mma_c_atom_fragment,
        lambda: make_mma_a_atom_fragment(16),
        lambda: make_mma_a_atom_fragment(8, transposed=True),
        lambda: make_ldmatrix_fragment(True),
        lambda: make_parallel_fragment([4, 8], threads=8, vector=2),
        lambda: Fragment([4, 4], forward_thread_fn=lambda i, j: i),
    ]
)


@st.composite
def fragment_programs(draw):
    fragment = draw(atoms)()
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["repeat", "replicate"]))
        if op == "replicate":
            fragment = fragment.replicate(draw(st.integers(1, 3)))
        else:
            repeats = [draw(st.integers(1, 2)) for _ in range(fragment.input_dim)]
            fragment = fragment.repeat(repeats, draw(st.booleans()), draw(st.booleans()))
    return fragment


@SETTINGS
@given(fragment_programs())
def test_repeat_and_replicate_preserve_slot_uniqueness(fragment):
    result = prove_fragment(fragment)
    assert result, (str(result), fragment)
    assert result.holds == prove_fragment(fragment, method="enumerate").holds
    elements = int(np.prod(fragment.get_input_shape()))
    assert result.stats["used"] == elements * fragment.get_replicate()
    assert result.stats["unused"] == result.stats["slots"] - result.stats["used"] >= 0
    assert prove_fragment(fragment.condense_rep_var())


@SETTINGS
@given(st.integers(2, 6), st.integers(2, 6), st.integers(1, 3))
def test_colliding_fragment_has_a_readable_counterexample(rows, cols, replicate):
    # every column of a row lands in the same register of the same thread
    frag = Fragment(
        [rows, cols],
        forward_thread_fn=lambda i, j, *rep: i + rows * (rep[0] if rep else 0),
        forward_index_fn=lambda i, j: j // cols,
        replicate=replicate,
    )
    result = prove_fragment(frag)
    assert result.holds is False
    (a, b), slot = result.counterexample["elements"], result.counterexample["slot"]
    assert a != b
    for element in (a, b):
        assert frag.forward_thread_point(*element[:-1], rep=element[-1]) == slot["thread"]
        assert frag.forward_point(*element[:-1]) == slot["local"]
    assert "share thread" in result.message


def test_unused_slots_are_counted():
    sparse = Fragment([8, 4], forward_thread_fn=lambda i, j: 2 * i, forward_index_fn=lambda i, j: j)
    result = prove_fragment(sparse)
    assert result and result.stats == {
        "thread_size": 15,
        "local_size": 4,
        "replicate": 1,
        "slots": 60,
        "used": 32,
        "unused": 28,
    }
    assert prove_fragment(sparse, require_full=True).holds is False


def test_bijective_reports_out_of_box_and_unreached_slots():
    padded = Layout([4, 4], lambda i, j: i * 5 + j)
    result = prove_bijective(padded)
    assert result.holds is False and result.stats["unused"] == 3
    assert result.counterexample["unreached"] == (4,)
    assert "not surjective" in str(result)


def test_wrong_inverse_is_refuted():
    layout = Layout([4, 8], lambda i, j: i * 8 + j)
    wrong = Layout([32], lambda k: [k % 4, k // 4])
    for method in ("z3", "enumerate"):
        result = prove_inverse(layout, wrong, method=method)
        assert result.holds is False
        point, image, back = (result.counterexample[k] for k in ("input", "image", "round_trip"))
        assert (
            layout.forward_point(*point) == image and wrong.forward_point(*image) == back != point
        )


def test_argument_checks():
    layout = Layout([4], lambda i: i)
    with pytest.raises(ValueError, match="method"):
        prove_injective(layout, method="guess")
    with pytest.raises(TypeError, match="Fragment"):
        prove_fragment(layout)


@pytest.mark.parametrize(
    "forward",
    [
        lambda i, j: ((i - 4) % 8) * 8 + j,  # floor modulo of negative values
        lambda i, j: ((i - 5) // 2) * 8 + j,  # floor division of negative values
        lambda i, j: P.truncdiv(i - 4, 3) * 8 + P.truncmod(j - 3, 5),
        lambda i, j: P.shift_left(i, 3) + P.bitwise_and(j, 7),
        lambda i, j: P.shift_right(i * 8 + j, 1),
        lambda i, j: P.max(i, j) * 8 + P.min(i, j),
        lambda i, j: P.if_then_else(i < 4, i * 8 + j, 95 - i * 8 - j),
        lambda i, j: P.bitwise_or(i * 8, j) + P.bitwise_xor(i, j) * 0,
    ],
)
def test_z3_translation_agrees_with_enumeration(forward):
    layout = Layout([8, 8], forward)
    z3_result = prove_injective(layout)
    enum_result = prove_injective(layout, method="enumerate")
    assert z3_result.holds == enum_result.holds, (str(z3_result), str(enum_result))
    if not z3_result:
        first, second = z3_result.counterexample["inputs"]
        assert layout.forward_point(*first) == layout.forward_point(*second)
