"""``T.view(src, shape, dtype, strides=)`` (upstream 0.1.15's signature): strided views of
global and shared tensors, on the CPU backend and the CUDA emulator, and the errors for
strides a view cannot take."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate


def every_other_column(M, N):
    """O = X[:, ::2] through a strided view of the global input (rank kept, stride 2)."""

    @T.prim_func
    def main(X: T.Tensor((M, 2 * N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            xs = T.view(X, (M, N), strides=(2 * N, 2))
            for i, j in T.Parallel(M, N):
                O[i, j] = xs[i, j] * 2.0

    return main


def transposed_through_view(M, N):
    """O = X^T: X (M, N) viewed as (N, M) with strides (1, N)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=64):
            xt = T.view(X, (N, M), strides=(1, N))
            for i, j in T.Parallel(N, M):
                O[i, j] = xt[i, j]

    return main


def shared_diagonal(N):
    """O[i] = tile[i, i] + 1: a rank-changing strided view (stride N + 1) of a shared tile."""

    @T.prim_func
    def main(X: T.Tensor((N, N), "float32"), O: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((N, N), "float32")
            T.copy(X, s)
            diag = T.view(s, (N,), strides=(N + 1,))
            for i in T.Parallel(N):
                O[i] = diag[i] + 1.0

    return main


def _rng():
    return np.random.default_rng()


def test_strided_global_view_cpu():
    M, N = 7, 13
    x = _rng().standard_normal((M, 2 * N)).astype(np.float32)
    kernel = tilelang.compile(every_other_column(M, N), out_idx=[-1], target="cpu")
    got = kernel(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, x.astype(np.float64)[:, ::2] * 2.0, rtol=1e-6)


def test_transposing_view_cpu():
    M, N = 9, 5
    x = _rng().standard_normal((M, N)).astype(np.float32)
    kernel = tilelang.compile(transposed_through_view(M, N), out_idx=[-1], target="cpu")
    np.testing.assert_array_equal(kernel(torch.from_numpy(x)).numpy(), x.T)


def test_shared_diagonal_view_cpu():
    N = 11
    x = _rng().standard_normal((N, N)).astype(np.float32)
    kernel = tilelang.compile(shared_diagonal(N), out_idx=[-1], target="cpu")
    np.testing.assert_allclose(kernel(torch.from_numpy(x)).numpy(), np.diag(x) + 1.0, rtol=1e-6)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_strided_views_emulated(arch):
    target = {"kind": "cuda", "arch": arch}
    M, N = 6, 10
    x = _rng().standard_normal((M, 2 * N)).astype(np.float32)
    out = emulate(pipeline.lower(every_other_column(M, N), target), x, np.zeros((M, N), np.float32))
    np.testing.assert_allclose(out[1], x.astype(np.float64)[:, ::2] * 2.0, rtol=1e-6)
    d = _rng().standard_normal((N, N)).astype(np.float32)
    lowered = pipeline.lower(shared_diagonal(N), target)
    out = emulate(lowered, d, np.zeros(N, np.float32), race_check=True)
    np.testing.assert_allclose(out[1], np.diag(d) + 1.0, rtol=1e-6)


def _trace_error(body):
    with pytest.raises(errors.TileLangError) as info:

        @T.prim_func
        def main(X: T.Tensor((8, 8), "float32"), Y: T.StridedTensor((8, 4), (8, 2), "float32")):
            with T.Kernel(1, threads=32):
                body(X, Y)

    return str(info.value)


def test_view_errors():
    assert "2 strides= for the rank-1 view of X" in _trace_error(
        lambda X, Y: T.view(X, (64,), strides=(8, 1))
    )
    assert "Y is not compact" in _trace_error(lambda X, Y: T.view(Y, (32,)))

    def fragment_view(X, Y):
        f = T.alloc_fragment((8, 8), "float32")
        T.view(f, (8,), strides=(9,))

    assert "strides= apply to global and shared tensors" in _trace_error(fragment_view)
    assert "non-negative" in _trace_error(lambda X, Y: T.view(X, (8,), strides=(-1,)))
