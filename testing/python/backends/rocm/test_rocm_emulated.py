"""The ROCm lowering executed by ``tilelang.testing.rocm_emulator`` (MFMA and 64-lane
shuffles emulated lane by lane), compared with float64 references: no AMD GPU needed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from example_kernels import example_tir
from vendor_kernels import check_matmul, matmul, row_reduce

from tilelang.backends.rocm import pipeline
from tilelang.testing.rocm_emulator import emulate

GFX90A = {"kind": "rocm", "arch": "gfx90a"}
GFX940 = {"kind": "rocm", "arch": "gfx940"}


@pytest.mark.parametrize(
    "m,n,k,trans_a,trans_b,in_dtype,acc,target",
    [
        (100, 72, 70, False, False, "float16", "float32", GFX90A),
        (65, 130, 33, True, False, "float16", "float32", GFX90A),
        (70, 50, 90, False, True, "bfloat16", "float32", GFX90A),
        (40, 90, 100, True, True, "int8", "int32", GFX90A),
        (70, 60, 100, False, True, "int8", "int32", GFX940),
        (70, 50, 100, False, True, "float8_e4m3fnuz", "float32", GFX940),
        (40, 90, 70, True, False, "float8_e5m2fnuz", "float32", GFX940),
    ],
)
def test_mfma_gemm_matches_float64(m, n, k, trans_a, trans_b, in_dtype, acc, target, rng):
    func = matmul.get_tir(m, n, k, trans_A=trans_a, trans_B=trans_b, in_dtype=in_dtype,
                          accum_dtype=acc, out_dtype=acc)  # fmt: skip
    lowered = pipeline.lower(func, target)
    assert "tl::mfma" in lowered.script()

    def run(a, b, c):
        return emulate(lowered, a, b, c, check_races=True)[2]

    check_matmul(run, rng, m, n, k, trans_a, trans_b, in_dtype, acc)


@pytest.mark.parametrize("kind,threads,n", [("sum", 256, 300), ("max", 256, 70), ("min", 64, 129)])
def test_row_reduction_matches_float64(kind, threads, n, rng):
    m = 10
    x = rng.standard_normal((m, n)).astype(np.float32)
    lowered = pipeline.lower(row_reduce.get_tir(m, n, kind, threads=threads), GFX90A)
    out = emulate(lowered, x, np.zeros((m,), np.float32), check_races=True)[1]
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[kind](x.astype(np.float64), axis=1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_example_gemm(rng):
    m, n, k = 129, 257, 33
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    lowered = pipeline.lower(example_tir("gemm/example_gemm.py", "matmul", (m, n, k)), GFX90A)
    c = emulate(lowered, a, b, np.zeros((m, n), np.float16), check_races=True)[2]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


def test_example_softmax(rng):
    x = rng.standard_normal((70, 192)).astype(np.float32)
    lowered = pipeline.lower(
        example_tir("softmax/example_softmax.py", "softmax", (70, 192)), GFX90A
    )
    y = emulate(lowered, x, np.zeros_like(x), check_races=True)[1]
    ref = torch.softmax(torch.from_numpy(x).double(), -1).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_example_flash_attention_forward(rng):
    b, h, s, d = 1, 2, 128, 64
    path = "flash_attention/example_mha_fwd_bshd.py"
    lowered = pipeline.lower(example_tir(path, "flashattn", (b, h, s, d, True)), GFX90A)
    q, k, v = (rng.standard_normal((b, s, h, d)).astype(np.float16) for _ in range(3))
    out = emulate(lowered, q, k, v, np.zeros((b, s, h, d), np.float16), check_races=True)[3]
    qt, kt, vt = (torch.from_numpy(x).double().transpose(1, 2) for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    np.testing.assert_allclose(out.astype(np.float64), ref.transpose(1, 2).numpy(), atol=2e-2)
