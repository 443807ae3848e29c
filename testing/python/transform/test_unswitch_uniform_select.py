"""Uniform-select unswitching (``tilelang/transform/unswitch_uniform_select.py``): the box
conditions are exact (checked against brute force), the branch appears for affine
conditions and not for others, and kernels compute the same with the pass on and off
(CPU backend, float64 torch references, sizes that are not tile multiples)."""

import itertools

import numpy as np
import pytest
import torch
from example_loader import load_example
from tvm_tirx import ir
from tvm_tirx.ir import prim as P

import tilelang
import tilelang.language as T
from tilelang.layout import expr as E
from tilelang.transform.unswitch_uniform_select import ATTR, box_conditions

OFF = {"tl.unswitch_uniform_select": False}
CPU = "cpu"


# ------------------------------------------------------------------ box conditions
def _const(expr, b, value):
    """``expr`` with the outer variable ``b`` set to ``value``, folded to a Python bool."""
    folded = E.simplify(E.substitute(expr, {E.key(b): ir.const(value, "int32")}))
    out = E.as_const_int(folded)
    assert out is not None, f"{expr} did not fold: {folded}"
    return bool(out)


def _random_cond(rng, i, j, b):
    """A random comparison (or and/or/not of two) affine in ``i``, ``j`` and ``b``."""

    def side():
        ci, cj, cb = (int(x) for x in rng.integers(-3, 4, 3))
        return i * ci + j * cj + b * cb + int(rng.integers(-6, 7))

    def cmp():
        op = [P.LT, P.LE, P.GT, P.GE, P.EQ, P.NE][int(rng.integers(6))]
        return op(side(), side())

    kind = int(rng.integers(4))
    if kind == 0:
        return cmp()
    if kind == 1:
        return P.And(cmp(), cmp())
    if kind == 2:
        return P.Or(cmp(), cmp())
    return P.Not(P.And(cmp(), P.Not(cmp())))


def test_box_conditions_match_brute_force(rng):
    """``all`` implies the condition at every point and ``none`` at no point; for a single
    ordering comparison both are exact (iff)."""
    i, j, b = ir.Var("i", "int32"), ir.Var("j", "int32"), ir.Var("b", "int32")
    checked = 0
    for _ in range(60):
        ei, ej = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        cond = _random_cond(rng, i, j, b)
        loop = {E.key(i): i, E.key(j): j}
        box = {E.key(i): (0, ei - 1), E.key(j): (0, ej - 1)}
        all_, none = box_conditions(cond, loop, box)
        exact = isinstance(cond, P.LT | P.LE | P.GT | P.GE)
        if exact:
            assert all_ is not None and none is not None
        for bv in range(-4, 5):
            point = [
                _const(
                    E.substitute(
                        cond, {E.key(i): ir.const(x, "int32"), E.key(j): ir.const(y, "int32")}
                    ),
                    b,
                    bv,
                )  # fmt: skip
                for x, y in itertools.product(range(ei), range(ej))
            ]
            if all_ is not None:
                got = _const(all_, b, bv)
                assert got <= all(point), (cond, bv)
                if exact:
                    assert got == all(point), (cond, bv)
            if none is not None:
                got = _const(none, b, bv)
                assert got <= (not any(point)), (cond, bv)
                if exact:
                    assert got == (not any(point)), (cond, bv)
            checked += 1
    assert checked == 60 * 9


def test_box_conditions_refuse_non_affine():
    i, j, b = ir.Var("i", "int32"), ir.Var("j", "int32"), ir.Var("b", "int32")
    loop = {E.key(i): i, E.key(j): j}
    box = {E.key(i): (0, 3), E.key(j): (0, 3)}
    for cond in (i * j >= b, i * b < 4, P.FloorMod(i, 2) == 0, P.FloorDiv(j + b, 4) > 1):
        assert box_conditions(cond, loop, box) == (None, None), cond


# ------------------------------------------------------------------ kernels
def masked_copy(M, N, bM, bN, mode):
    """``B = where(mask, A, fill)`` tile by tile; ``mode`` picks the mask."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            tile = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], tile)
            for i, j in T.Parallel(bM, bN):
                if mode == "lower_tail":  # lower triangle of the valid columns, conjunction
                    tile[i, j] = T.if_then_else(
                        (by * bM + i >= bx * bN + j) & (bx * bN + j < N - 3), tile[i, j], -1.0
                    )
                elif mode == "band_or":  # outside a band, a disjunction under a not
                    tile[i, j] = T.if_then_else(
                        P.Not((by * bM + i - bx * bN - j > 4) | (bx * bN + j - by * bM - i > 4)),
                        tile[i, j] * 2.0,
                        0.5,
                    )
                elif mode == "thread":  # differs between the threads: not block-uniform
                    tile[i, j] = T.if_then_else(T.get_thread_binding() < 32, tile[i, j], 3.0)
                elif mode == "non_affine":
                    tile[i, j] = T.if_then_else((i * j) % 3 == 0, tile[i, j], 7.0)
                else:  # "data": depends on the values, never unswitched
                    tile[i, j] = T.if_then_else(tile[i, j] > 0.0, tile[i, j], 0.0)
            T.copy(tile, B[by * bM, bx * bN])

    return main


def _masked_ref(a, mode):
    r = torch.arange(a.shape[0])[:, None]
    c = torch.arange(a.shape[1])[None, :]
    if mode == "lower_tail":
        return torch.where((r >= c) & (c < a.shape[1] - 3), a, -1.0)
    if mode == "band_or":
        return torch.where((r - c).abs() <= 4, a * 2.0, 0.5)
    if mode == "non_affine":
        return torch.where(((r % 32) * (c % 16)) % 3 == 0, a, 7.0)  # tile-local i, j
    return torch.where(a > 0, a, 0.0)


def _trace_stage(func, configs=None):
    return tilelang.lower(func, target=CPU, pass_configs=configs)


@pytest.mark.parametrize("mode", ["lower_tail", "band_or", "non_affine", "data"])
@pytest.mark.parametrize("configs", [None, OFF], ids=["on", "off"])
def test_masked_copy_cpu(mode, configs, rng):
    M, N = 150, 97  # not multiples of the 32 x 16 tiles
    func = masked_copy(M, N, 32, 16, mode)
    kernel = tilelang.compile(func, out_idx=[1], target=CPU, pass_configs=configs)
    a = torch.from_numpy(rng.standard_normal((M, N)).astype(np.float32))
    out = kernel(a)
    torch.testing.assert_close(out.double(), _masked_ref(a.double(), mode), rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["lower_tail", "band_or"])
def test_branch_appears_for_affine_conditions(mode):
    lowered = _trace_stage(masked_copy(150, 97, 32, 16, mode))
    names = lowered.names()
    assert names.index("unswitch_uniform_select") < names.index("lower_threads")
    before, after = lowered["trace"], lowered["unswitch_uniform_select"]
    func = lowered.ir("unswitch_uniform_select")
    notes = [str(n) for n in func.attrs[ATTR]]
    assert len(notes) == 1 and "all if" in notes[0], notes
    assert "none if" in notes[0]
    assert after.count("T.if_then_else") == before.count("T.if_then_else") == 1
    added = after.count('"tl.parallel"') - before.count('"tl.parallel"')
    if mode == "lower_tail":
        # the true arm only copies elements onto themselves: an empty statement; the
        # false arm is the constant fill
        assert added == 2 and "pass" in after
        assert "tile[i, j] = T.float32(-1.0)" in after
    else:  # both arms are loops: the doubled elements and the constant fill
        assert added == 4
        assert "tile[i, j] = tile[i, j] * T.float32(2.0)" in after
        assert "tile[i_1, j_1] = T.float32(0.5)" in after


@pytest.mark.parametrize("mode", ["non_affine", "data", "thread"])
def test_no_branch_for_other_conditions(mode):
    lowered = _trace_stage(masked_copy(150, 97, 32, 16, mode))
    func = lowered.ir("unswitch_uniform_select")
    assert func.attrs is None or ATTR not in func.attrs
    assert lowered["unswitch_uniform_select"] == lowered["trace"]


def test_pass_config_off_skips_the_stage():
    lowered = _trace_stage(masked_copy(150, 97, 32, 16, "lower_tail"), OFF)
    assert "unswitch_uniform_select" not in lowered.names()


# ------------------------------------------------------------------ FlashAttention (CPU)
FWD_BSHD = "flash_attention/example_mha_fwd_bshd.py"
FWD_BHSD = "flash_attention/example_mha_fwd_bhsd.py"


@pytest.mark.parametrize("configs", [None, OFF], ids=["on", "off"])
@pytest.mark.parametrize(
    "seq,causal,bm,bn", [(150, True, 64, 32), (150, True, 32, 64), (100, False, 64, 64)]
)
def test_fa_fwd_bshd_cpu(seq, causal, bm, bn, configs, rng):
    fa = load_example(FWD_BSHD)
    func = fa.flashattn.get_tir(1, 2, seq, 32, causal, block_M=bm, block_N=bn)
    kernel = tilelang.compile(func, out_idx=[3], target=CPU, pass_configs=configs)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, seq, 2, 32)).astype(np.float16)) for _ in range(3))  # fmt: skip
    out = kernel(q, k, v)
    torch.testing.assert_close(out.double(), fa.ref_program(q, k, v, causal), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("configs", [None, OFF], ids=["on", "off"])
@pytest.mark.parametrize("seq_q,seq_kv,bm,bn", [(70, 150, 64, 32), (130, 130, 32, 64)])
def test_fa_fwd_bhsd_causal_cpu(seq_q, seq_kv, bm, bn, configs, rng):
    fa = load_example(FWD_BHSD)
    func = fa.flashattn.get_tir(1, 2, seq_q, seq_kv, 32, True, block_M=bm, block_N=bn)
    kernel = tilelang.compile(func, out_idx=[3], target=CPU, pass_configs=configs)
    q = torch.from_numpy(rng.standard_normal((1, 2, seq_q, 32)).astype(np.float16))
    k, v = (torch.from_numpy(rng.standard_normal((1, 2, seq_kv, 32)).astype(np.float16)) for _ in range(2))  # fmt: skip
    out = kernel(q, k, v)
    torch.testing.assert_close(out.double(), fa.ref_program(q, k, v, True), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("bm,bn", [(64, 32), (32, 64)])
def test_fa_mask_is_unswitched_on_cpu(bm, bn):
    """The all-unmasked arm is taken below the diagonal; the all-masked arm would be taken
    only above it, where the causal loop range never goes: proven dead, not emitted."""
    fa = load_example(FWD_BSHD)
    func = fa.flashattn.get_tir(1, 2, 150, 32, True, block_M=bm, block_N=bn)
    lowered = tilelang.lower(func, target=CPU)
    notes = [str(n) for n in lowered.ir("unswitch_uniform_select").attrs[ATTR]]
    mask = [n for n in notes if f"bx * {bm} + i >= k * {bn} + j" in n]
    assert len(mask) == 1 and f"all if k * {bn} + {bn - 1} < bx * {bm}" in mask[0], notes
    assert "none" not in mask[0]
    text = lowered["unswitch_uniform_select"]
    assert text.count("T.if_then_else(bx *") == 1 and "acc_s[i, j] = T.float32(0.0)" in text


# ------------------------------------------------------------------ ROCm / Metal (emulated)
@pytest.mark.parametrize("backend", ["rocm", "metal"])
@pytest.mark.parametrize("configs", [None, OFF], ids=["on", "off"])
def test_fa_causal_vendor_emulated(backend, configs, rng):
    """The vendor pipelines share the stage (before layout inference): causal FA with a
    sequence that is not a tile multiple, against float64."""
    if backend == "rocm":
        from tilelang.backends.rocm import pipeline
        from tilelang.testing.rocm_emulator import emulate

        target = {"kind": "rocm", "arch": "gfx90a"}
    else:
        from tilelang.backends.metal import pipeline
        from tilelang.testing.metal_emulator import emulate

        target = {"kind": "metal"}
    b, h, s, d = 1, 1, 150, 32
    fa = load_example(FWD_BSHD)
    func = fa.flashattn.get_tir(b, h, s, d, True, block_M=64, block_N=32)
    lowered = pipeline.lower(func, target, configs)
    assert (ATTR in (lowered.attrs or {})) == (configs is None)
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float16) for _ in range(3))
    out = emulate(lowered, q, k, v, np.zeros((b, s, h, d), np.float16), check_races=True)[3]
    ref = fa.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), True)
    np.testing.assert_allclose(out.astype(np.float64), ref.numpy(), atol=2e-2)
