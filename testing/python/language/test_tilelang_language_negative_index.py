"""Python-style negative indices (upstream's LegalizeNegativeIndex): ``A[-1]`` is ``A[n - 1]``.

With a dynamic shape, ``A[-1]`` used to read before the tensor (garbage, silently); with a
static one it was a compile-time out-of-bounds error where upstream reads the last element.
"""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate


@tilelang.jit(out_idx=-1, target="cpu")
def last_elements_dynamic():
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((3,), "float32")):
        with T.Kernel(1, threads=1):
            B[0] = A[-1]
            B[1] = A[-2]
            B[2] = A[1]

    return main


@pytest.mark.parametrize("n", [2, 9, 40])
def test_negative_constant_index_dynamic_shape(n):
    a = torch.randn(n)
    out = last_elements_dynamic()(a)
    torch.testing.assert_close(out.double(), a.double()[[-1, -2, 1]])


def reversed_tail(N, M):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.serial(M):
                B[i] = A[-i - 1]
            s = T.alloc_shared((N,), "float32")
            T.copy(A, s)
            for i in T.Parallel(M):
                B[i] = B[i] + s[i - M] * 0.5  # always negative: s[N - M + i]

    return main


def _reversed_tail_ref(a, m):
    a = a.astype(np.float64)
    return a[::-1][:m] + 0.5 * a[len(a) - m :]


def test_negative_affine_index_cpu():
    a = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    kernel = tilelang.compile(reversed_tail(37, 5), out_idx=-1, target="cpu")
    out = kernel(torch.from_numpy(a))
    np.testing.assert_allclose(out.numpy(), _reversed_tail_ref(a, 5), rtol=1e-6)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_negative_affine_index_cuda_emulated(arch):
    a = np.random.default_rng(1).standard_normal(37).astype(np.float32)
    lowered = pipeline.lower(reversed_tail(37, 5), {"kind": "cuda", "arch": arch})
    out = emulate(lowered, a, np.zeros(5, np.float32))[1]
    np.testing.assert_allclose(out, _reversed_tail_ref(a, 5), rtol=1e-6)


def test_sometimes_negative_index_is_still_an_error():
    """i - 2 over i in 0..3 is negative only for some i: a bounds error, not wrapped."""
    with pytest.raises(errors.CompileError, match="out-of-bounds access"):

        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = A[i - 2]
