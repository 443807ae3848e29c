"""``T.annotate_layout`` on global tensors: a permutation of their storage, honoured by
every access of the kernel on the CPU and in the CUDA lowering (emulated, built with nvcc).

The layout is the one upstream's FlashAttention backward gives dQ (rows in groups of 8,
column pairs interleaved) so that its atomic adds coalesce.
"""

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emulate_mod

L, D, BLOCK = 64, 32, 16


def dq_layout(X):
    return T.Layout(X.shape, lambda l, d: [l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])


def storage_of(logical):
    """The storage order ``dq_layout`` gives a logical (L, D) array (numpy reference)."""
    out = np.zeros(L * D, logical.dtype)
    for l in range(L):
        for d in range(D):
            coords = [l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]
            flat = ((coords[0] * (D // 8) + coords[1]) * 2 + coords[2]) * 32 + coords[3]
            out[flat] = logical[l, d]
    return out.reshape(L, D)


def accumulate():
    """Blocks of rows atomically added into the laid-out X (each row block twice)."""

    @T.prim_func
    def main(A: T.Tensor((2 * L, D), "float32"), X: T.Tensor((L, D), "float32")):
        with T.Kernel(2 * L // BLOCK, threads=64) as bx:
            T.annotate_layout({X: dq_layout(X)})
            tile = T.alloc_fragment((BLOCK, D), "float32")
            T.copy(A[bx * BLOCK, 0], tile)
            for i, j in T.Parallel(BLOCK, D):
                T.atomic_add(X[(bx * BLOCK) % L + i, j], tile[i, j])

    return main


def convert():
    """X (laid out) -> Y (row-major, fp16) through a shared tile and a fragment."""

    @T.prim_func
    def main(X: T.Tensor((L, D), "float32"), Y: T.Tensor((L, D), "float16")):
        with T.Kernel(L // BLOCK, threads=64) as bx:
            T.annotate_layout({X: dq_layout(X)})
            s = T.alloc_shared((BLOCK, D), "float32")
            f = T.alloc_fragment((BLOCK, D), "float32")
            for k in T.Pipelined(1, num_stages=2):
                T.copy(X[bx * BLOCK + k * BLOCK, 0], s)
            T.copy(s, f)
            T.copy(f, Y[bx * BLOCK, 0])

    return main


def store():
    """A row-major A copied into the laid-out X from a fragment and from a shared tile."""

    @T.prim_func
    def main(A: T.Tensor((L, D), "float32"), X: T.Tensor((L, D), "float32")):
        with T.Kernel(L // BLOCK, threads=64) as bx:
            T.annotate_layout({X: dq_layout(X)})
            f = T.alloc_fragment((BLOCK // 2, D), "float32")
            s = T.alloc_shared((BLOCK // 2, D), "float32")
            T.copy(A[bx * BLOCK, 0], f)
            T.copy(f, X[bx * BLOCK, 0])
            T.copy(A[bx * BLOCK + BLOCK // 2, 0], s)
            T.copy(s, X[bx * BLOCK + BLOCK // 2, 0])

    return main


@pytest.fixture
def data():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2 * L, D)).astype(np.float32)
    return a, a[:L] + a[L:]


def test_cpu_storage_is_permuted_and_read_back(data):
    a, total = data
    x = torch.zeros(L, D)
    tilelang.compile(accumulate(), target="cpu")(torch.from_numpy(a), x)
    np.testing.assert_allclose(x.numpy(), storage_of(total), rtol=1e-6, atol=1e-6)
    y = tilelang.compile(convert(), out_idx=[1], target="cpu")(x)
    np.testing.assert_allclose(y.float().numpy(), total.astype(np.float16), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_lowering_emulated(arch, data):
    a, total = data
    target = {"kind": "cuda", "arch": arch}
    x = emulate_mod.emulate(pipeline.lower(accumulate(), target), a, np.zeros((L, D), np.float32))[
        1
    ]
    np.testing.assert_allclose(x, storage_of(total), rtol=1e-6, atol=1e-6)
    lowered = pipeline.lower(convert(), target)
    assert "cp_async" not in str(lowered)  # 16-byte pieces of X are not contiguous
    y = emulate_mod.emulate(lowered, x, np.zeros((L, D), np.float16))[1]
    np.testing.assert_allclose(y.astype(np.float32), total.astype(np.float16), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_copies_into_a_laid_out_tensor(arch, data):
    a = data[0][:L]
    x = torch.zeros(L, D)
    tilelang.compile(store(), target="cpu")(torch.from_numpy(a), x)
    np.testing.assert_allclose(x.numpy(), storage_of(a))
    target = {"kind": "cuda", "arch": arch}
    xe = emulate_mod.emulate(pipeline.lower(store(), target), a, np.zeros((L, D), np.float32))[1]
    np.testing.assert_allclose(xe, storage_of(a))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("kernel", [accumulate, convert, store])
def test_cuda_builds(kernel):
    pipeline.build(kernel(), {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"})


def test_a_padded_global_layout_is_refused():
    with pytest.raises(errors.TraceError, match="must permute its storage"):

        @T.prim_func
        def main(X: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_layout({X: T.Layout(X.shape, lambda i, j: [i, j + 8 * (i % 2)])})


def test_a_fragment_layout_on_a_global_is_refused():
    from tilelang.layout import Fragment

    with pytest.raises(errors.TraceError, match="global tensor and needs a Layout"):

        @T.prim_func
        def main(X: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_layout({X: Fragment([32], forward_thread_fn=lambda i: i)})
