"""``T.reduce_*`` whose source is a shared tile: shared -> fragment and shared -> shared.

Upstream TileLang supports both; here they were a CompileError ("needs fragment src and
dst"). Checked against float64 numpy on the CPU backend, in the CUDA emulator (sm_80 and
sm_90a, with the shared-memory race check: the barriers around the shared reads), with
nvcc, and on the GPU.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGETS = [{"kind": "cuda", "arch": "sm_80"}, {"kind": "cuda", "arch": "sm_90a"}]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FNS = {
    "sum": T.reduce_sum,
    "max": T.reduce_max,
    "min": T.reduce_min,
    "abssum": T.reduce_abssum,
    "absmax": T.reduce_absmax,
}


def shared_reduce(M, N, bM, kind, dim, clear, dst_scope, threads=128):
    """Blocks of ``bM`` rows of A staged in shared memory, reduced over ``dim`` into a
    fragment or a shared tile that starts at 0.5 (so ``clear=False`` is visible)."""
    fn = FNS[kind]
    out_len = bM if dim == 1 else N
    out_shape = (T.ceildiv(M, bM) * bM,) if dim == 1 else (T.ceildiv(M, bM), N)

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor(out_shape, "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=threads) as bx:
            s = T.alloc_shared((bM, N), "float32")
            if dst_scope == "shared":
                r = T.alloc_shared((out_len,), "float32")
            else:
                r = T.alloc_fragment((out_len,), "float32")
            T.copy(A[bx * bM, 0], s)
            T.fill(r, 0.5)
            fn(s, r, dim=dim, clear=clear)
            if dim == 1:
                T.copy(r, O[bx * bM : bx * bM + bM])
            else:
                T.copy(r, O[bx, 0:N])

    return main


def reference(a, M, bM, kind, dim, clear):
    """float64 result, with the zero rows the copy reads past M in the last block."""
    blocks = -(-M // bM)
    x = np.zeros((blocks * bM, a.shape[1]))
    x[:M] = a
    x = x.reshape(blocks, bM, -1)
    if kind.startswith("abs"):
        x = np.abs(x)
    op = {"sum": np.sum, "abssum": np.sum, "max": np.max, "absmax": np.max, "min": np.min}[kind]
    out = op(x, axis=2 if dim == 1 else 1)
    if not clear:
        out = (
            out + 0.5
            if kind in ("sum", "abssum")
            else (np.minimum if kind == "min" else np.maximum)(out, 0.5)
        )
    return out.reshape(-1) if dim == 1 else out


CASES = [
    # M, N, bM, kind, dim, clear, dst scope
    (70, 50, 32, "sum", 1, True, "fragment"),
    (70, 50, 32, "max", 1, False, "fragment"),
    (45, 33, 16, "min", 0, True, "fragment"),
    (45, 33, 16, "abssum", 0, False, "shared"),
    (70, 50, 32, "absmax", 1, True, "shared"),
    (70, 200, 24, "sum", 0, False, "shared"),  # 200 outputs on 128 threads: a strided loop
]


@pytest.mark.parametrize("M,N,bM,kind,dim,clear,dst", CASES)
def test_shared_source_cpu(rng, M, N, bM, kind, dim, clear, dst):
    a = rng.standard_normal((M, N)).astype(np.float32)
    rows = -(-M // bM)
    out = np.zeros((rows * bM,) if dim == 1 else (rows, N), np.float32)
    kernel = tilelang.compile(shared_reduce(M, N, bM, kind, dim, clear, dst), target="cpu")
    import torch

    o = torch.from_numpy(out)
    kernel(torch.from_numpy(a), o)
    want = reference(a.astype(np.float64), M, bM, kind, dim, clear)
    np.testing.assert_allclose(o.numpy(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,bM,kind,dim,clear,dst", CASES)
def test_shared_source_emulated(rng, target, M, N, bM, kind, dim, clear, dst):
    a = rng.standard_normal((M, N)).astype(np.float32)
    rows = -(-M // bM)
    out = np.zeros((rows * bM,) if dim == 1 else (rows, N), np.float32)
    lowered = pipeline.lower(shared_reduce(M, N, bM, kind, dim, clear, dst), target)
    got = emulate(lowered, a, out, race_check=True)[1]
    want = reference(a.astype(np.float64), M, bM, kind, dim, clear)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_shared_source_then_fragment_use_emulated(rng):
    """The fragment result feeds a T.Parallel loop (its layout fixed by the loop)."""
    M, N = 48, 37

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=64):
            s = T.alloc_shared((M, N), "float32")
            mx = T.alloc_fragment((M,), "float32")
            T.copy(A, s)
            T.reduce_max(s, mx, dim=1)
            for i, j in T.Parallel(M, N):
                O[i, j] = s[i, j] - mx[i]

    a = rng.standard_normal((M, N)).astype(np.float32)
    got = emulate(pipeline.lower(main, TARGETS[1]), a, np.zeros_like(a), race_check=True)[1]
    want = a.astype(np.float64) - a.astype(np.float64).max(1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_fragment_source_shared_dst_is_an_error():
    """fragment -> shared is not an upstream form: a clear error, not a wrong result."""

    @T.prim_func
    def main(A: T.Tensor((32, 32), "float32"), O: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((32, 32), "float32")
            r = T.alloc_shared((32,), "float32")
            T.copy(A, f)
            T.reduce_sum(f, r, dim=1)
            T.copy(r, O)

    with pytest.raises(errors.CompileError, match=r"src must be a fragment or a shared tile"):
        pipeline.lower(main, TARGETS[0])


@needs_nvcc
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90a"])
def test_shared_source_nvcc(target):
    for case in CASES[:2] + CASES[3:5]:
        M, N, bM, kind, dim, clear, dst = case
        art = pipeline.build(
            shared_reduce(M, N, bM, kind, dim, clear, dst), {**target, "compiler": "nvcc"}
        )
        assert art.device_binary


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,bM,kind,dim,clear,dst", CASES)
def test_shared_source_gpu(M, N, bM, kind, dim, clear, dst):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    a = torch.randn(M, N, dtype=torch.float64).float()
    rows = -(-M // bM)
    out = torch.zeros((rows * bM,) if dim == 1 else (rows, N))
    ta, to = a.cuda(), out.cuda()
    kernel = load_kernel(
        pipeline.build(shared_reduce(M, N, bM, kind, dim, clear, dst), {"kind": "cuda"})
    )
    kernel(ta, to)
    torch.cuda.synchronize()
    want = reference(a.double().numpy(), M, bM, kind, dim, clear)
    np.testing.assert_allclose(to.cpu().numpy(), want, rtol=1e-5, atol=1e-4)
