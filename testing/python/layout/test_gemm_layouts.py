"""GEMM fragments against the PTX ISA tables, ldmatrix, wgmma and the parallel fragment."""

import itertools

import layout_ptx_reference as ptx
import numpy as np
import pytest

from tilelang.layout import (
    Fragment,
    ldmatrix_bank_conflicts,
    ldmatrix_lane_layout,
    make_full_bank_swizzled_layout,
    make_half_bank_swizzled_layout,
    make_ldmatrix_fragment,
    make_linear_layout,
    make_mma_a_atom_fragment,
    make_mma_a_fragment,
    make_mma_accumulator_fragment,
    make_mma_b_atom_fragment,
    make_mma_b_fragment,
    make_mma_c_atom_fragment,
    make_parallel_fragment,
    make_quarter_bank_swizzled_layout,
    make_wgmma_accumulator_fragment,
    make_wgmma_atom_fragment,
)
from tilelang.layout.proofs import prove_fragment


def slot_map(fragment: Fragment, rep: int = 0) -> dict:
    """(thread, local) -> logical coordinate, for one replica; asserts no slot is reused."""
    threads = fragment.thread_table()[rep]
    local = fragment.forward_table()[..., 0]
    slots = {}
    for coord in itertools.product(*(range(d) for d in fragment.get_input_shape())):
        slot = (int(threads[coord]), int(local[coord]))
        assert slot not in slots, f"slot {slot} used by {slots.get(slot)} and {coord}"
        slots[slot] = coord
    return slots


def reference_slots(table, lanes, registers):
    return {(lane, r): table(lane, r) for lane in range(lanes) for r in range(registers)}


# --------------------------------------------------------------------- explicit table values


def test_mma_a_f16_explicit_values():
    a = make_mma_a_atom_fragment(16)
    assert a.get_input_shape() == [16, 16]
    assert a.get_thread_size() == 32 and a.get_output_shape() == [8]
    # lane 5: groupID 1, threadID_in_group 1
    assert (a.forward_thread_point(1, 2), a.forward_point(1, 2)) == (5, (0,))  # a0
    assert (a.forward_thread_point(9, 3), a.forward_point(9, 3)) == (5, (3,))  # a3
    assert (a.forward_thread_point(1, 10), a.forward_point(1, 10)) == (5, (4,))  # a4
    assert (a.forward_thread_point(9, 11), a.forward_point(9, 11)) == (5, (7,))  # a7
    # lane 31 holds the bottom-right corner in a7
    assert (a.forward_thread_point(15, 15), a.forward_point(15, 15)) == (31, (7,))


def test_mma_b_and_c_explicit_values():
    b = make_mma_b_atom_fragment(16)
    # lane 6: groupID 1, threadID_in_group 2 -> b3 at (k=13, n=1)
    assert (b.forward_thread_point(13, 1), b.forward_point(13, 1)) == (6, (3,))
    assert (b.forward_thread_point(4, 1), b.forward_point(4, 1)) == (6, (0,))
    c = make_mma_c_atom_fragment()
    assert (c.forward_thread_point(8, 0), c.forward_point(8, 0)) == (0, (2,))
    assert (c.forward_thread_point(15, 7), c.forward_point(15, 7)) == (31, (3,))
    assert c.map_forward_thread([3, 5]).value == 14
    assert c.map_forward_index([11, 5])[0].value == 3


def test_mma_s8_explicit_values():
    a = make_mma_a_atom_fragment(8)
    assert a.get_input_shape() == [16, 32] and a.get_output_shape() == [16]
    # lane 7: groupID 1, threadID_in_group 3: a5 at (9, 13), a10 at (1, 30)
    assert (a.forward_thread_point(9, 13), a.forward_point(9, 13)) == (7, (5,))
    assert (a.forward_thread_point(1, 30), a.forward_point(1, 30)) == (7, (10,))
    b = make_mma_b_atom_fragment(8)
    assert b.get_input_shape() == [32, 8]
    assert (b.forward_thread_point(29, 2), b.forward_point(29, 2)) == (11, (5,))


# --------------------------------------------------------------------- full enumeration


@pytest.mark.parametrize(
    "fragment, table, registers",
    [
        (make_mma_a_atom_fragment(16), ptx.mma_a_f16, 8),
        (make_mma_b_atom_fragment(16), ptx.mma_b_f16, 4),
        (make_mma_c_atom_fragment(), ptx.mma_c, 4),
        (make_mma_a_atom_fragment(8), ptx.mma_a_s8, 16),
        (make_mma_b_atom_fragment(8), ptx.mma_b_s8, 8),
    ],
    ids=["A-f16", "B-f16", "C", "A-s8", "B-s8"],
)
def test_mma_atoms_match_ptx_tables(fragment, table, registers):
    slots = slot_map(fragment)
    assert slots == reference_slots(table, 32, registers)
    # a permutation: every element once, every (lane, register) slot once
    assert len(slots) == 32 * registers == int(np.prod(fragment.get_input_shape()))
    assert prove_fragment(fragment, require_full=True)


@pytest.mark.parametrize("bits, table", [(16, ptx.mma_a_f16), (8, ptx.mma_a_s8)])
def test_transposed_a_atom_is_the_same_registers(bits, table):
    fragment = make_mma_a_atom_fragment(bits, transposed=True)
    slots = slot_map(fragment)
    expected = {
        slot: (col, row)
        for slot, (row, col) in reference_slots(table, 32, 4 * (32 // bits)).items()
    }
    assert slots == expected


@pytest.mark.parametrize("bits, table", [(16, ptx.mma_b_f16), (8, ptx.mma_b_s8)])
def test_transposed_b_atom_is_the_same_registers(bits, table):
    fragment = make_mma_b_atom_fragment(bits, transposed=True)
    expected = {
        slot: (n, k) for slot, (k, n) in reference_slots(table, 32, 2 * (32 // bits)).items()
    }
    assert slot_map(fragment) == expected


def test_wgmma_atom_matches_ptx():
    for n in (8, 64, 256):
        fragment = make_wgmma_atom_fragment(n)
        assert fragment.get_thread_size() == 128 and fragment.get_output_shape() == [n // 2]
        assert slot_map(fragment) == reference_slots(ptx.wgmma_d, 128, n // 2)
    with pytest.raises(ValueError, match="multiple of 8"):
        make_wgmma_atom_fragment(12)


# --------------------------------------------------------------------- block-level fragments


@pytest.mark.parametrize(
    "block_m, block_n, warp_m, warp_n",
    [(16, 8, 1, 1), (64, 64, 2, 2), (128, 64, 4, 1), (32, 128, 1, 4)],
)
def test_accumulator_fragment_ownership(block_m, block_n, warp_m, warp_n):
    frag = make_mma_accumulator_fragment(block_m, block_n, warp_m, warp_n)
    tile_m, tile_n = block_m // warp_m, block_n // warp_n
    tiles_n = tile_n // 8
    c_inverse = {v: k for k, v in reference_slots(ptx.mma_c, 32, 4).items()}
    threads, local = frag.thread_table()[0], frag.forward_table()[..., 0]
    for i in range(block_m):
        for j in range(block_n):
            wm, wn = i // tile_m, j // tile_n
            ti, tj = (i % tile_m) // 16, (j % tile_n) // 8
            lane, reg = c_inverse[(i % 16, j % 8)]
            assert threads[i, j] == 32 * (wm + warp_m * wn) + lane
            assert local[i, j] == (ti * tiles_n + tj) * 4 + reg
    assert frag.get_thread_size() == 32 * warp_m * warp_n
    assert prove_fragment(frag, require_full=True)


def test_accumulator_fragment_rejects_bad_tiles():
    with pytest.raises(ValueError, match="block_m"):
        make_mma_accumulator_fragment(24, 64, 1, 1)
    with pytest.raises(ValueError, match="warp_n"):
        make_mma_accumulator_fragment(64, 64, 1, 0)


@pytest.mark.parametrize("bits, transposed", [(16, False), (16, True), (8, False), (8, True)])
def test_a_fragment_registers_and_replication(bits, transposed):
    block_m, block_n, block_k, warp_m, warp_n = 64, 32, 64, 2, 2
    frag = make_mma_a_fragment(block_m, block_n, block_k, warp_m, warp_n, bits, transposed)
    k_atom = 256 // bits
    regs = 128 // bits  # a0..a7 (16-bit) or a0..a15 (8-bit)
    table = ptx.mma_a_f16 if bits == 16 else ptx.mma_a_s8
    inverse = {v: k for k, v in reference_slots(table, 32, regs).items()}
    tiles_k = block_k // k_atom
    assert frag.get_replicate() == warp_n
    for rep in range(warp_n):
        threads = frag.thread_table()[rep]
        local = frag.forward_table()[..., 0]
        for m in range(block_m):
            for k in range(block_k):
                coord = (k, m) if transposed else (m, k)
                lane, reg = inverse[(m % 16, k % k_atom)]
                wm, tm, tk = m // (block_m // warp_m), (m % (block_m // warp_m)) // 16, k // k_atom
                assert threads[coord] == 32 * (wm + warp_m * rep) + lane
                tile = tk * (block_m // warp_m // 16) + tm if transposed else tm * tiles_k + tk
                assert local[coord] == tile * regs + reg
    assert prove_fragment(frag, require_full=True)


@pytest.mark.parametrize("bits, transposed", [(16, False), (16, True), (8, False)])
def test_b_fragment_registers_and_replication(bits, transposed):
    block_m, block_n, block_k, warp_m, warp_n = 32, 64, 64, 2, 2
    frag = make_mma_b_fragment(block_m, block_n, block_k, warp_m, warp_n, bits, transposed)
    k_atom, regs = 256 // bits, 2 * (32 // bits)
    table = ptx.mma_b_f16 if bits == 16 else ptx.mma_b_s8
    inverse = {v: key for key, v in reference_slots(table, 32, regs).items()}
    tile_n = block_n // warp_n
    assert frag.get_replicate() == warp_m
    local = frag.forward_table()[..., 0]
    for rep in range(warp_m):
        threads = frag.thread_table()[rep]
        for k in range(block_k):
            for n in range(block_n):
                coord = (n, k) if transposed else (k, n)
                lane, reg = inverse[(k % k_atom, n % 8)]
                wn, tn, tk = n // tile_n, (n % tile_n) // 8, k // k_atom
                assert threads[coord] == 32 * (rep + warp_m * wn) + lane
                tile = tn * (block_k // k_atom) + tk if transposed else tk * (tile_n // 8) + tn
                assert local[coord] == tile * regs + reg
    assert prove_fragment(frag, require_full=True)


def test_wgmma_accumulator_fragment():
    frag = make_wgmma_accumulator_fragment(256, 128, warpgroup_m=2, warpgroup_n=1)
    assert frag.get_thread_size() == 256 and frag.get_output_shape() == [2 * 64]
    threads, local = frag.thread_table()[0], frag.forward_table()[..., 0]
    inverse = {v: k for k, v in reference_slots(ptx.wgmma_d, 128, 64).items()}
    for i in range(0, 256, 3):
        for j in range(128):
            group, tm = i // 128, (i % 128) // 64
            thread, reg = inverse[(i % 64, j)]
            assert threads[i, j] == 128 * group + thread
            assert local[i, j] == tm * 64 + reg
    assert prove_fragment(frag, require_full=True)
    wide = make_wgmma_accumulator_fragment(64, 512)
    assert wide.get_output_shape() == [256] and prove_fragment(wide, require_full=True)


# --------------------------------------------------------------------- ldmatrix


def simulate_ldmatrix_x4(operand, trans):
    """(thread, register q, half h) -> stored-tile coordinate, from the PTX ldmatrix rules."""
    lanes = ldmatrix_lane_layout(operand, trans)
    result = {}
    for t, q, h in itertools.product(range(32), range(4), range(2)):
        if trans:  # thread t gets column t // 4 of rows 2 * (t % 4) + h
            row, col = lanes.forward_point(8 * q + 2 * (t % 4) + h)
            result[(t, q, h)] = (row, col + t // 4)
        else:  # thread t gets row t // 4, columns 2 * (t % 4) + h
            row, col = lanes.forward_point(8 * q + t // 4)
            result[(t, q, h)] = (row, col + 2 * (t % 4) + h)
    return result


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_x4_feeds_mma_a(trans):
    atom = make_mma_a_atom_fragment(16)
    for (t, q, h), (row, col) in simulate_ldmatrix_x4("A", trans).items():
        m, k = (col, row) if trans else (row, col)
        assert (atom.forward_thread_point(m, k), atom.forward_point(m, k)) == (t, (2 * q + h,))


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_x4_feeds_two_mma_b_tiles(trans):
    atom = make_mma_b_atom_fragment(16)
    for (t, q, h), (row, col) in simulate_ldmatrix_x4("B", trans).items():
        k, n = (row, col) if trans else (col, row)
        assert n // 8 == q // 2
        assert (atom.forward_thread_point(k, n % 8), atom.forward_point(k, n % 8)) == (
            t,
            (2 * (q % 2) + h,),
        )


def test_ldmatrix_fragment_matches_ptx_rule():
    plain, trans = make_ldmatrix_fragment(False), make_ldmatrix_fragment(True)
    for r, c in itertools.product(range(8), range(8)):
        assert (plain.forward_thread_point(r, c), plain.forward_point(r, c)) == (
            4 * r + c // 2,
            (c % 2,),
        )
        assert (trans.forward_thread_point(r, c), trans.forward_point(r, c)) == (
            4 * c + r // 2,
            (r % 2,),
        )
    assert ldmatrix_lane_layout("A", num_matrices=2).get_output_shape() == [16, 1]
    with pytest.raises(ValueError, match="operand"):
        ldmatrix_lane_layout("C")


def test_swizzled_layouts_make_ldmatrix_conflict_free():
    for rows_bytes, make in (
        (128, make_full_bank_swizzled_layout),
        (64, make_half_bank_swizzled_layout),
    ):
        layout = make([64, rows_bytes // 2], "float16")
        for operand, trans in itertools.product("AB", (False, True)):
            for row0, col0 in ((0, 0), (16, 8), (48, 16)):
                if col0 + 16 <= rows_bytes // 2:
                    assert ldmatrix_bank_conflicts(layout, 16, operand, trans, row0, col0) == 0
    assert ldmatrix_bank_conflicts(make_linear_layout(64, 64), 16) == 28
    # 32-byte rows: the quarter swizzle halves the conflicts of the linear layout
    quarter = ldmatrix_bank_conflicts(make_quarter_bank_swizzled_layout([64, 16], "float16"), 16)
    assert quarter < ldmatrix_bank_conflicts(make_linear_layout(64, 16), 16)


# --------------------------------------------------------------------- T.Parallel default


def test_parallel_fragment_vectorised():
    frag = make_parallel_fragment([32, 64], threads=128, vector=4)
    assert frag.get_thread_size() == 128 and frag.get_output_shape() == [16]
    threads, local = frag.thread_table()[0].reshape(-1), frag.forward_table()[..., 0].reshape(-1)
    flat = np.arange(32 * 64)
    assert np.array_equal(threads, (flat // 4) % 128)
    assert np.array_equal(local, (flat // 512) * 4 + flat % 4)
    assert prove_fragment(frag, require_full=True)


def test_parallel_fragment_small_loop_is_replicated():
    frag = make_parallel_fragment([4, 8], threads=128, vector=2)
    assert frag.get_replicate() == 8 and frag.get_thread_size() == 128
    result = prove_fragment(frag, require_full=True)
    assert result and result.stats["used"] == 32 * 8
    uneven = make_parallel_fragment([10, 10], threads=32)
    result = prove_fragment(uneven)
    assert result and result.stats["unused"] == 32 * 4 - 100
    with pytest.raises(ValueError, match="vector"):
        make_parallel_fragment([3, 3], threads=32, vector=2)
