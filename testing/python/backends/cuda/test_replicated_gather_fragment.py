"""A small fragment a ``T.Parallel`` nest only reads, indexed by a nest variable and an inner
``T.serial`` loop's variable with another nest axis left out (upstream's mHC post:
``x[i, j] += a[k, i] * b[k, j]``): every thread running the nest holds all of it (was: a
layout spreading it over threads, then "reads a_local[...] on threads that do not hold it").
Emulated on sm_80/sm_90a (race checked) against float64 numpy; built with nvcc."""

import shutil

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]


def mix_streams(n, hc, h, threads=128):
    """``X[t, o, j] = C[t, o] * D[t, j] + sum_k A[t, k, o] * B[t, k, j]`` (one token a block)."""

    @T.prim_func
    def main(
        A: T.Tensor((n, hc, hc), T.float32),
        B: T.Tensor((n, hc, h), T.float32),
        C: T.Tensor((n, hc), T.float32),
        D: T.Tensor((n, h), T.float32),
        X: T.Tensor((n, hc, h), T.float32),
    ):
        with T.Kernel(n, threads=threads) as t:
            a_local = T.alloc_fragment((hc, hc), T.float32)
            c_local = T.alloc_fragment((hc,), T.float32)
            b_local = T.alloc_fragment((hc, h), T.float32)
            d_local = T.alloc_fragment((h,), T.float32)
            x_local = T.alloc_fragment((hc, h), T.float32)
            T.copy(A[t, 0, 0], a_local)
            T.copy(C[t, 0], c_local)
            T.copy(B[t, 0, 0], b_local)
            T.copy(D[t, 0], d_local)
            for o, j in T.Parallel(hc, h):
                x_local[o, j] = c_local[o] * d_local[j]
                for k in T.serial(hc):
                    x_local[o, j] += a_local[k, o] * b_local[k, j]
            T.copy(x_local, X[t, 0, 0])

    return main


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("n,hc,h", [(3, 4, 64), (2, 4, 96)])
def test_read_only_table_is_replicated(target, n, hc, h):
    rng = np.random.default_rng(n * h)
    a, b = rng.standard_normal((n, hc, hc)), rng.standard_normal((n, hc, h))
    c, d = rng.standard_normal((n, hc)), rng.standard_normal((n, h))
    arrays = [x.astype(np.float32) for x in (a, b, c, d)] + [np.zeros((n, hc, h), np.float32)]
    got = emulate(pipeline.lower(mix_streams(n, hc, h), target), *arrays, race_check=True)[-1]
    want = c[:, :, None] * d[:, None, :] + np.einsum("tko,tkj->toj", a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_read_only_table_builds_sm90a():
    artifact = pipeline.build(
        mix_streams(8, 4, 256), {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"}
    )
    assert artifact.meta["kernel_names"]
