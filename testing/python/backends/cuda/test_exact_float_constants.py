"""float64 constants reach CUDA source exactly (TIRx prints them with 15 fixed decimals)."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.transform.exact_float_constants import printed_exactly

SM90 = {"kind": "cuda", "arch": "sm_90a"}
SCALES = (1e-20, 1.0 / 3.0, 2.0**-53, -7.25e-300, 0.5)


def scale_kernel(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float64"), C: T.Tensor((n, 5), "float64")):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    C[bx * 64 + i, 0] = A[bx * 64 + i] * T.float64(SCALES[0])
                    C[bx * 64 + i, 1] = A[bx * 64 + i] * T.float64(SCALES[1])
                    C[bx * 64 + i, 2] = A[bx * 64 + i] * T.float64(SCALES[2])
                    C[bx * 64 + i, 3] = A[bx * 64 + i] * T.float64(SCALES[3])
                    C[bx * 64 + i, 4] = A[bx * 64 + i] * T.float64(SCALES[4])

    return main


def _expected(a):
    return np.stack([a * s for s in SCALES], axis=1)


def test_printed_exactly():
    assert printed_exactly(0.5) and printed_exactly(3.0) and printed_exactly(float("inf"))
    assert not printed_exactly(1e-20) and not printed_exactly(1.0 / 3.0)


def test_source_carries_bit_patterns():
    src = tilelang.compile(scale_kernel(100), target=SM90).get_kernel_source()
    assert "0.000000000000000)" not in src.split("main_kernel(")[-1]
    assert src.count("__longlong_as_double(") == 4  # 0.5 prints exactly


def test_emulated_values_are_exact(rng):
    from tilelang.testing.cuda_emulator import emulate

    n = 100
    a = rng.standard_normal(n)
    lowered = cuda_pipeline.lower(scale_kernel(n), SM90)
    _, out = emulate(lowered, a, np.zeros((n, 5)))
    np.testing.assert_array_equal(out, _expected(a))


@pytest.mark.cuda
def test_gpu_values_are_exact():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n = 1000
    a = torch.randn(n, dtype=torch.float64, device="cuda")
    c = torch.zeros(n, 5, dtype=torch.float64, device="cuda")
    tilelang.compile(scale_kernel(n), target="cuda")(a, c)
    np.testing.assert_array_equal(c.cpu().numpy(), _expected(a.cpu().numpy()))
