"""Fragment: construction, index inference, repeat/replicate/condense, threads and printing."""

import numpy as np
import pytest
from tvm_tirx import ir

from tilelang.layout import Fragment, Layout, make_mma_c_atom_fragment
from tilelang.layout.proofs import prove_fragment, prove_inverse


def base_8x8():
    return Fragment([8, 8], forward_thread_fn=lambda i, j: j // 2 + 4 * i)


def test_inferred_local_index():
    frag = base_8x8()
    assert str(frag.get_forward_index()[0]) == "j % 2"
    assert frag.get_thread_size() == 32 and frag.get_output_shape() == [2]
    row_thread = Fragment([8, 4], forward_thread_fn=lambda i, j: i)
    assert str(row_thread.get_forward_index()[0]) == "j"
    mixed = Fragment(
        [32, 16], forward_thread_fn=lambda i, j: (j % 8) // 2 + 4 * (i % 8) + 32 * (i // 16)
    )
    assert mixed.get_output_shape() == [8] and mixed.get_thread_size() == 64
    assert prove_fragment(mixed, require_full=True)


def test_forward_fn_and_explicit_index():
    frag = Fragment([16, 8], forward_fn=lambda i, j: ((i % 8) * 4 + j // 2, [(i // 8) * 2 + j % 2]))
    assert frag.is_equal(make_mma_c_atom_fragment())
    rep = Fragment([4, 4], forward_fn=lambda i, j, r: (i + 4 * r, j), replicate=3)
    assert rep.get_replicate() == 3 and rep.get_thread_size() == 12
    assert rep.get_replicate_var().name == "rep"


def test_thread_and_index_mapping():
    frag = base_8x8().replicate(2)
    assert [v.name for v in frag.get_forward_vars()] == ["rep", "i", "j"]
    assert frag.map_forward_thread([3, 4]).value == 14
    assert frag.map_forward_thread([3, 4], rep=1).value == 46
    assert frag.map_forward_index([3, 5])[0].value == 1
    assert frag.map_forward_index([1, 3, 5])[0].value == 1  # leading replica index dropped
    x = ir.Var("x", "int32")
    assert str(frag.map_forward_thread([x, 0])) == "x * 4"
    assert frag.forward_thread_point(7, 7, rep=1) == 63
    assert frag.thread_table().shape == (2, 8, 8)


def test_repeat_local_and_thread():
    base = base_8x8()
    local = base.repeat([2, 1], repeat_on_thread=False)
    assert local.get_input_shape() == [16, 8] and local.get_output_shape() == [4]
    assert local.get_thread_size() == 32
    on_thread = base.repeat([2, 3], repeat_on_thread=True)
    assert on_thread.get_thread_size() == 32 * 6
    # lower_dim_first: the last dimension's tile index is the fastest
    assert on_thread.forward_thread_point(0, 8) == 32
    assert on_thread.forward_thread_point(8, 0) == 96
    other = base.repeat([2, 3], repeat_on_thread=True, lower_dim_first=False)
    assert other.forward_thread_point(8, 0) == 32 and other.forward_thread_point(0, 8) == 64
    for frag in (local, on_thread, other):
        assert prove_fragment(frag, require_full=True)
    with pytest.raises(ValueError, match="repeats has 1"):
        base.repeat([2])
    with pytest.raises(ValueError, match="positive"):
        base.repeat([0, 1])
    two_d_local = Fragment(
        [4, 4], forward_thread_fn=lambda i, j: 0, forward_index_fn=lambda i, j: [i, j]
    )
    with pytest.raises(ValueError, match="1-d local index"):
        two_d_local.repeat([2, 1])


def test_replicate_and_condense():
    base = base_8x8()
    rep = base.replicate(4)
    assert rep.get_replicate() == 4 and rep.get_thread_size() == 128
    assert rep.replicate(2).get_replicate() == 8
    assert prove_fragment(rep.replicate(2), require_full=True)
    sparse = Fragment([8, 4], forward_thread_fn=lambda i, j, r: i + 8 * (r // 2), replicate=4)
    result = prove_fragment(sparse)
    assert (
        not result
        and result.counterexample["elements"][0][:2] == result.counterexample["elements"][1][:2]
    )
    condensed = sparse.condense_rep_var()
    assert condensed.get_replicate() == 2 and str(condensed.thread) == "rep * 8 + i"
    assert prove_fragment(condensed, require_full=True)
    assert base.condense_rep_var() is base
    full = Fragment([4], forward_thread_fn=lambda i, r: r, replicate=32)
    assert full.is_completed_replicated() and not base.is_completed_replicated()


def test_bind_thread_range():
    frag = base_8x8()
    assert frag.get_thread_range() is None
    bound = frag.bind_thread_range(64, 32)
    assert bound.thread_range == (64, 32) and bound.get_thread_size() == 32
    assert frag.bind_thread_range((0, 32)).get_thread_range() == (0, 32)
    assert frag.make_thread_range(ir.Range(32, 64)).get_thread_range() == (32, 32)
    assert "thread_range: (64, 32)" in repr(bound)
    assert bound.is_equal(frag) and not bound.is_equal(frag.bind_thread_range(0, 32))
    with pytest.raises(ValueError, match="begin, extent"):
        frag.bind_thread_range(3)


def test_inverse_of_fragment():
    frag = make_mma_c_atom_fragment()
    inverse = frag.inverse()
    assert inverse.get_input_shape() == [4, 32]
    assert inverse.forward_point(3, 31) == (15, 7, 0)
    assert prove_inverse(frag.as_layout(), inverse)


def test_is_equal_and_reshape():
    a = base_8x8()
    assert a.is_equal(Fragment([8, 8], forward_thread_fn=lambda x, y: 4 * x + y // 2))
    assert not a.is_equal(Fragment([8, 8], forward_thread_fn=lambda x, y: 4 * y + x // 2))
    assert not a.is_equal(a.replicate(2))
    assert not a.is_equal(Layout([8, 8], lambda i, j: i))
    swapped_index = Fragment(
        [8, 8],
        forward_thread_fn=lambda x, y: 4 * x + y // 2,
        forward_index_fn=lambda x, y: 1 - y % 2,
    )
    assert not a.is_equal(swapped_index) and a.is_equal(swapped_index, skip_index=True)
    flat = a.reshape([64])
    assert flat.get_input_shape() == [64]
    threads = flat.thread_table()[0]
    assert np.array_equal(threads, a.thread_table()[0].reshape(-1))
    assert a.reshape([8, 8]) is a


def test_format_table_and_print(capsys):
    table = make_mma_c_atom_fragment().format_table()
    lines = table.splitlines()
    assert len(lines) == 16 and lines[0].split()[:3] == ["T0:0", "T0:1", "T1:0"]
    assert lines[8].split()[0] == "T0:2"
    base_8x8().print(table=True)
    out = capsys.readouterr().out
    assert out.startswith("Fragment([8, 8] -> [2], replicate: 1, thread: 32")


def test_argument_errors():
    with pytest.raises(ValueError, match="forward_thread_fn"):
        Fragment([4, 4])
    with pytest.raises(ValueError, match="either forward_fn"):
        Fragment([4], forward_fn=lambda i: (i, 0), forward_thread_fn=lambda i: i)
    with pytest.raises(ValueError, match=r"\(thread, index\) pair"):
        Fragment([4], forward_fn=lambda i: i)
    with pytest.raises(ValueError, match="replicate must be >= 1"):
        Fragment([4], forward_thread_fn=lambda i: i, replicate=0)
    with pytest.raises(ValueError, match="replica variable"):
        Fragment([4], forward_fn=lambda i, r: (i, r), replicate=2)
    with pytest.raises(ValueError, match="static"):
        Fragment([ir.Var("n", "int32")], forward_thread_fn=lambda i: i)
    with pytest.raises(ValueError, match="affine iterator"):
        Fragment([8], forward_thread_fn=lambda i: (i * i) % 8)
    with pytest.raises(NotImplementedError):
        base_8x8().expand([2])
