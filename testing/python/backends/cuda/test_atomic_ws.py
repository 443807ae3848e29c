"""Serial-code atomics in an automatically warp-specialized kernel (sm_90a).

The consumer branch ``if tx < threads`` holds the user's serial code after the pipelined
loop. A thread-independent ``T.atomic_add(Cnt[0], 1)`` there is still done once per block
(thread 0), not by each consumer thread (the branch's condition holds for every thread of
the user's block, so it is no thread guard), and ``return_prev=True`` hands every thread
the one old value. Emulated (wgmma, the specialized branches, the race check) against
float64, and on the GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def counted_gemm(M, N, K):
    """C = A @ B in 128x128 tiles; each block adds 1 to Cnt[0] and 10 to Cnt[1], recording
    the old Cnt[1] in Old[block, :]."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
        Cnt: T.Tensor((2,), "int32"),
        Old: T.Tensor((M // 128 * (N // 128), 128), "int32"),
    ):
        with T.Kernel(N // 128, M // 128, threads=128) as (bx, by):
            As = T.alloc_shared((128, 64), "float16")
            Bs = T.alloc_shared((64, 128), "float16")
            Cl = T.alloc_fragment((128, 128), "float32")
            T.clear(Cl)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(A[by * 128, k * 64], As)
                T.copy(B[k * 64, bx * 128], Bs)
                T.gemm(As, Bs, Cl)
            T.copy(Cl, C[by * 128, bx * 128])
            T.atomic_add(Cnt[0], 1)
            old = T.atomic_add(Cnt[1], 10, return_prev=True)
            for i in T.Parallel(128):
                Old[by * (N // 128) + bx, i] = old

    return main


def _check(c, cnt, old, a, b, blocks):
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)
    assert list(cnt) == [blocks, 10 * blocks]
    assert np.all(old == old[:, :1])  # every thread of a block saw the same old value
    assert sorted(old[:, 0].tolist()) == [10 * k for k in range(blocks)]


@pytest.mark.parametrize("M,N,K", [(128, 256, 256), (256, 128, 192)])
def test_serial_atomics_in_a_specialized_kernel_emulated(rng, M, N, K):
    lowered = pipeline.lower(counted_gemm(M, N, K), SM90A)
    assert 'launch_thread("threadIdx.x", 256)' in lowered.script()  # specialized
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    blocks = (M // 128) * (N // 128)
    arrays = [
        a,
        b,
        np.zeros((M, N), np.float32),
        np.zeros(2, np.int32),
        np.zeros((blocks, 128), np.int32),
    ]
    (_, _, c, cnt, old), _ = emulate_rs(lowered, *arrays, mode="late_writes", race=True)
    _check(c, cnt, old, a, b, blocks)


@pytest.mark.cuda
def test_serial_atomics_in_a_specialized_kernel_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    M, N, K = 512, 384, 256
    blocks = (M // 128) * (N // 128)
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.zeros(M, N, device="cuda")
    cnt = torch.zeros(2, dtype=torch.int32, device="cuda")
    old = torch.zeros(blocks, 128, dtype=torch.int32, device="cuda")
    load_kernel(pipeline.build(counted_gemm(M, N, K), SM90A))(a.cuda(), b.cuda(), c, cnt, old)
    torch.cuda.synchronize()
    _check(c.cpu().numpy(), cnt.cpu().numpy(), old.cpu().numpy(), a.numpy(), b.numpy(), blocks)
