"""Program variants of MLA decode (``example_mla_decode.flashattn``, issue 13):

* ``q_reg_cols``: part of the queries in registers; the score gemm of those latent columns
  reads its A operand from registers (wgmma's RS form on sm_90a), so per key tile only the
  key columns come from shared memory for it, instead of both warpgroups reading all of
  ``Q_shared``;
* ``defer_rowsum``: the softmax row sums accumulated elementwise in a score-shaped fragment
  and reduced once after the loop (one cross-warpgroup exchange per tile fewer);
* ``block_N`` 32 with ``num_stages`` 4-5: more key tiles in flight (the shared memory that
  ``q_reg_cols`` frees makes room for the fifth).

CPU: the example matches float64 with tails and KV splits. sm_90a without a GPU: the loop's
three score gemms (latent SS over a K slice of ``KV_shared``, rope SS, latent RS) are issued
back to back with one ``wait_group 0``; the kernel matches float64 in the emulator
(asynchronous wgmma, late register reads, race check), at dims 128 + 64 and at the full 512
+ 64; nvcc: the full-size kernel's consumers do not spill and ptxas does not serialize the
wgmmas (``q_reg_cols`` 128 and 256; 288 and more do). ``cuda``: the benchmark shape on a GPU.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline
from tilelang.lowering.kernels import workspace_specs

DENSE = "deepseek_mla/example_mla_decode.py"
SM90A = {"kind": "cuda", "arch": "sm_90a"}
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "testing" / "python" / "backends" / "cuda"))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402


@pytest.mark.parametrize("kv_ctx,num_split,cols", [(300, 1, 32), (300, 3, 16), (5, 4, 48)])
def test_dense_q_regs_cpu(kv_ctx, num_split, cols):
    _load(DENSE).main(2, 16, 1, kv_ctx, 64, 32, num_split, device="cpu", q_reg_cols=cols)


@pytest.mark.parametrize("kv_ctx,num_split,cols", [(300, 1, 0), (300, 3, 16), (5, 4, 0)])
def test_dense_defer_rowsum_cpu(kv_ctx, num_split, cols):
    _load(DENSE).main(2, 16, 1, kv_ctx, 64, 32, num_split, device="cpu", q_reg_cols=cols,
                      defer_rowsum=True)  # fmt: skip


@pytest.mark.parametrize("cols", [-16, 8, 64, 80])
def test_bad_q_reg_cols_named(cols):
    with pytest.raises(ValueError, match=f"q_reg_cols={cols}"):
        _load(DENSE).flashattn.get_tir(1, 16, 1, 64, 64, 32, 64, 16, 1, q_reg_cols=cols)


def _lower(kv, dim, num_split, cols, rowsum=False, block_n=64, stages=2):
    func = _load(DENSE).flashattn.get_tir(1, 64, 1, kv, dim, 64, block_n, 64, num_split,
                                          q_reg_cols=cols, defer_rowsum=rowsum,
                                          num_stages=stages)  # fmt: skip
    return func, pipeline.lower(func, SM90A)


def _loop(text):
    """The consumer loop's body: from ``for k in`` to its stage release."""
    start = text.index("for k in")
    return text[start : text.index("tl::mbarrier_arrive", start)]


def test_deferred_rowsum_drops_one_exchange_per_tile():
    """Per tile: the row-max exchange and the ``S_shared`` barrier remain; the row-sum
    exchange moves after the loop."""
    for rowsum, barriers in ((False, 3), (True, 2)):
        _, lowered = _lower(300, 128, 1, 0, rowsum)
        loop = _loop(lowered.script())
        assert loop.count("tl::named_barrier_sync") == barriers, rowsum


def test_score_gemms_issue_back_to_back():
    _, lowered = _lower(100, 128, 1, 64)
    text = lowered.script()
    loop = _loop(text)
    first_wait = loop.index("tl::wgmma_wait<")
    issued = re.findall(r'"tl::wgmma_(m64n\w+)<', loop[:first_wait])
    assert issued[0] == issued[-5] == "m64n32k16_ss" and set(issued[-4:]) == {"m64n32k16_rs"}
    assert loop[:first_wait].count("tl::wgmma_commit") == 3
    assert loop[first_wait:].startswith("tl::wgmma_wait<0>")
    assert "mma_m16n8k16" not in text


@pytest.mark.parametrize(
    "kv,dim,num_split,cols,rowsum,tiles,mode",
    [
        (100, 128, 1, 64, False, (64, 2), "late_reads"),
        (130, 128, 3, 48, False, (64, 2), "late_writes"),
        (150, 512, 1, 256, False, (64, 2), "late_reads"),
        (200, 128, 1, 0, True, (64, 2), "late_writes"),
        (130, 128, 3, 64, True, (64, 2), "late_reads"),
        (150, 512, 1, 256, True, (64, 2), "late_writes"),
        (230, 128, 1, 64, True, (32, 4), "late_reads"),
        (200, 512, 1, 256, True, (32, 5), "late_writes"),
    ],
    ids=[
        "tail",
        "split",
        "full_dim",
        "rowsum",
        "rowsum_split",
        "rowsum_full_dim",
        "n32s4",
        "n32s5_full_dim",
    ],  # fmt: skip
)
def test_variants_emulated(kv, dim, num_split, cols, rowsum, tiles, mode):
    module = _load(DENSE)
    func, lowered = _lower(kv, dim, num_split, cols, rowsum, *tiles)
    inputs = [x.numpy() for x in module.make_inputs(1, 64, kv, dim, 64, "cpu")]
    ref = module.ref_program(*(torch.from_numpy(x) for x in inputs)).numpy()
    ws = [np.full(s.shape, np.nan, s.dtype) for s in workspace_specs(func)]
    arrays, _ = emulate_rs(lowered, *inputs, np.zeros(ref.shape, np.float16), *ws, mode=mode,
                           race=True)  # fmt: skip
    np.testing.assert_allclose(arrays[len(inputs)].astype(np.float64), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", ["mla_qregs128", "mla_qregs256", "mla_rowsum",
                                  "mla_qregs256_rowsum", "mla_n32s5_qregs256_rowsum"])  # fmt: skip
def test_full_size_compiles_without_consumer_spills(name):
    """The benchmark's kernel (batch 64, 128 heads, 8192 keys): the consumers hold acc_o
    (128 registers), the score tile and ``cols / 4`` registers of Q under ``setmaxnreg
    240``; ptxas reports only the producer's spills (the same as without Q in registers)
    and no serialized wgmma."""
    sys.path.insert(0, str(ROOT / "benchmark"))
    import sass_audit

    base = sass_audit.audit("mla", {})
    info = sass_audit.audit(name, {})
    assert not info["ptxas_warnings"], info["ptxas_warnings"]
    assert info["spill_stores"] <= base["spill_stores"]
    assert info["spill_loads"] <= base["spill_loads"]
    if "loop" in info:
        loop = info["loop"]
        assert loop.get("LDL", 0) == 0 and loop.get("STL", 0) == 0
        assert loop["WARPGROUP.DEPBAR"] == base["loop"]["WARPGROUP.DEPBAR"]
        if "_n32" not in name:
            assert loop["shapes"] == base["loop"]["shapes"]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "cols,rowsum,tiles",
    [
        (128, False, (64, 2)),
        (256, False, (64, 2)),
        (0, True, (64, 2)),
        (256, True, (64, 2)),
        (0, False, (32, 4)),
        (256, True, (32, 5)),
    ],  # fmt: skip
)
def test_benchmark_shape_gpu(cols, rowsum, tiles):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    module = _load(DENSE)
    kernel = module.flashattn(64, 128, 1, 8192, 512, 64, tiles[0], 64, 1, q_reg_cols=cols,
                              defer_rowsum=rowsum, num_stages=tiles[1])  # fmt: skip
    inputs = module.make_inputs(64, 128, 8192, 512, 64, "cuda")
    out = kernel(*inputs)
    torch.testing.assert_close(out.double(), module.ref_program(*inputs), rtol=1e-2, atol=1e-2)
