"""``tl.wgmma_wait_paired_barriers`` (``passes/wgmma_wait_sinking.py``): a wgmma wait passes
a named barrier only when the same barrier follows with no write of the gemm's shared
operands between; synthetic statement sequences (one SS gemm reading ``S_tile``), the rule
off and on. The MLA loop it was made for: ``testing/python/examples/test_mla_decode.py``."""

import pytest
from tvm_tirx import ir, tirx

from tilelang.backends.cuda.passes.wgmma_wait_sinking import _sink_seq
from tilelang.lowering.thread_utils import extern_name, new_tensor
from tilelang.lowering.thread_utils import extern_stmt as call

S = new_tensor("S_tile", [64, 64], "float16", "shared.dyn")
C = new_tensor("acc", [32], "float32", "local")
X = new_tensor("x", [4], "float32", "local")
Z = ir.const(0, "int32")


def _gemm():
    desc = tirx.call_extern("tl::wgmma_desc<1, 16, 1024>", tirx.address_of(S[Z, Z]), ty="uint64")
    return [
        call("tl::wgmma_arrive"),
        call("tl::wgmma_m64n64k16_ss<false, 0, 0>", desc, desc, tirx.address_of(C[Z]), 1),
        call("tl::wgmma_commit"),
        call("tl::wgmma_wait<0>"),
        call("tl::wgmma_fence_operand<32>", tirx.address_of(C[Z])),
    ]


def _bar(bid=1):
    return call("tl::named_barrier_sync", ir.const(bid, "uint32"), ir.const(256, "uint32"))


def _work():  # a register store the gemm does not depend on
    return ir.TensorStore(X, [Z], ir.const(1.0, "float32"))


def _write_s():
    return ir.TensorStore(S, [Z, Z], ir.const(1.0, "float16"))


def _wait_after(rest, past):
    """How many of ``rest``'s statements run before the wait, and their names."""
    out = _sink_seq(_gemm() + rest, set(), None, past)
    names = [extern_name(s) or f"store {s.dest.name}" for s in out]
    return names.index("tl::wgmma_wait<0>") - 3, names


@pytest.mark.parametrize(
    "rest,off,on",
    [
        ([_work(), _bar(), _work(), _bar(), _write_s()], 1, 3),  # paired: up to the 2nd
        ([_work(), _bar(), _write_s(), _bar(), _work()], 1, 1),  # S written between
        ([_work(), _bar(), _work(), _bar(3), _work()], 1, 1),  # another barrier follows
        ([_work(), _bar(), _work(), _work()], 1, 1),  # no second barrier: stays
        ([_work(), _bar(), _work(), _bar(), _work(), _bar()], 1, 5),  # passes two pairs
    ],
    ids=["paired", "write_between", "other_id", "unpaired", "chain"],
)
def test_wait_passes_paired_barriers_only(rest, off, on):
    got_off, names_off = _wait_after(rest, False)
    got_on, names_on = _wait_after(rest, True)
    assert (got_off, got_on) == (off, on), (names_off, names_on)
    assert sorted(names_on) == sorted(names_off)  # only the wait moved
