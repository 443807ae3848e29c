"""The MFMA (ROCm) and simdgroup_matrix (Metal) register layouts: Z3 proofs that each is
injective and uses every register slot, and the lane tables of the vendors' documentation."""

from __future__ import annotations

import numpy as np
import pytest

from tilelang.layout.mfma_layouts import (
    make_mfma_a_atom_fragment,
    make_mfma_accumulator_fragment,
    make_mfma_b_atom_fragment,
    make_mfma_c_atom_fragment,
    wave_partition,
)
from tilelang.layout.proofs import prove_fragment
from tilelang.layout.simdgroup_layouts import (
    group_partition,
    make_simdgroup_accumulator_fragment,
    make_simdgroup_c_atom_fragment,
)

FRAGMENTS = [
    ("mfma C atom", make_mfma_c_atom_fragment()),
    ("mfma A k4", make_mfma_a_atom_fragment(4)),
    ("mfma A k8 transposed", make_mfma_a_atom_fragment(8, transposed=True)),
    ("mfma B k4", make_mfma_b_atom_fragment(4)),
    ("mfma B k8 transposed", make_mfma_b_atom_fragment(8, transposed=True)),
    ("mfma C 128x64 on 2x2 waves", make_mfma_accumulator_fragment(128, 64, 2, 2)),
    ("mfma C 64x96 on 4x1 waves", make_mfma_accumulator_fragment(64, 96, 4, 1)),
    ("simdgroup C atom", make_simdgroup_c_atom_fragment()),
    ("simdgroup C 64x32 on 2x2 groups", make_simdgroup_accumulator_fragment(64, 32, 2, 2)),
]


@pytest.mark.parametrize("name,fragment", FRAGMENTS, ids=[f[0] for f in FRAGMENTS])
def test_fragment_is_a_bijection(name, fragment):
    result = prove_fragment(fragment, require_full=True)
    assert result, str(result)


def test_mfma_lane_tables():
    c = make_mfma_c_atom_fragment().thread_table()[0]
    a = make_mfma_a_atom_fragment(4).thread_table()[0]
    b = make_mfma_b_atom_fragment(4).thread_table()[0]
    for lane in range(64):
        rows = [4 * (lane // 16) + r for r in range(4)]
        assert all(c[i, lane % 16] == lane for i in rows)
        ks = [4 * (lane // 16) + v for v in range(4)]
        assert all(a[lane % 16, k] == lane for k in ks)
        assert all(b[k, lane % 16] == lane for k in ks)
    idx = make_mfma_c_atom_fragment()
    assert [int(idx.map_forward_index([i, 3])[0]) for i in range(8)] == [0, 1, 2, 3] * 2


def test_mfma_accumulator_waves_are_row_major():
    frag = make_mfma_accumulator_fragment(64, 64, 2, 2)
    table = frag.thread_table()[0]
    assert table[0, 0] // 64 == 0 and table[0, 32] // 64 == 1
    assert table[32, 0] // 64 == 2 and table[32, 32] // 64 == 3


def test_simdgroup_lane_table():
    table = make_simdgroup_c_atom_fragment().thread_table()[0]
    for lane in range(32):
        q = lane // 4
        row, col = (q & 4) + (lane // 2) % 4, (q & 2) * 2 + (lane % 2) * 2
        assert table[row, col] == lane and table[row, col + 1] == lane
    assert np.unique(table).size == 32


def test_partitions_and_bad_sizes():
    assert wave_partition(128, 128, 4) == (2, 2)
    assert wave_partition(64, 256, 4, policy=2) == (1, 4)
    assert wave_partition(16, 16, 4) is None
    assert group_partition(64, 64, 4) == (2, 2)
    with pytest.raises(ValueError, match="block_m"):
        make_mfma_accumulator_fragment(40, 64, 2, 2)
    with pytest.raises(ValueError, match="does not split"):
        make_simdgroup_accumulator_fragment(36, 64, 2, 2)
