"""Ports of upstream TileLang's linear-attention and utility examples (hadamard transform,
chunked retention, gated-delta-rule chunk cumsum, top-k, Philox random numbers), written in upstream's API.

Each runs on the CPU against a float64 torch reference on shapes that are not tile
multiples where the program allows, builds with nvcc for sm_90a, runs on the CUDA emulator
where the emulator models the program (race-checked), and runs its ``main`` on a GPU when
one is present (``@pytest.mark.cuda``).
"""

import shutil

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

HADAMARD = "hadamard_transform/example_hadamard.py"
RETENTION = "linear_attention/example_retention_fwd.py"
CUMSUM = "gdn/example_cumsum.py"
TOPK = "topk/example_topk.py"
RAND = "rand/rand_uint.py"


def _nvcc_build(func):
    artifact = pipeline.build(func, SM90A, compiler="nvcc")
    assert artifact.meta["kernel_names"]
    return artifact


def _emulate(func, *arrays):
    lowered = pipeline.lower(func, SM90A, {"tl.gemm_scalar": True})
    return cuda_emulator.emulate(
        lowered, *[np.array(a, copy=True) for a in arrays], race_check=True
    )


# ---------------------------------------------------------------- hadamard transform


@pytest.mark.parametrize("batch,n", [(5, 2), (3, 64), (4, 256), (3, 2048), (2, 8192)])
def test_hadamard_cpu(batch, n):
    """n=2..256: in-thread and warp-shuffle butterflies; 2048/8192: shared-memory swaps."""
    module = _load(HADAMARD)
    x = torch.randn(batch, n, dtype=torch.float32)
    y = module.hadamard(x, n)
    ref = x.double() @ module.hadamard_matrix(n)
    np.testing.assert_allclose(y.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-3)


def test_hadamard_matrix_is_orthogonal():
    """The reference's H_n: H H^T = n I (so a wrong matrix cannot agree with the kernel)."""
    h = _load(HADAMARD).hadamard_matrix(64)
    torch.testing.assert_close(h @ h.T, 64 * torch.eye(64, dtype=torch.float64))


@needs_nvcc
@pytest.mark.parametrize("n", [256, 8192])
def test_hadamard_nvcc_build(n):
    module = _load(HADAMARD)
    _nvcc_build(module.hadamard.get_tir(torch.empty(7, n), n))


@pytest.mark.cuda
@needs_gpu
def test_hadamard_gpu():
    _load(HADAMARD).main(["--batch", "64", "--dim", "8192"])
    _load(HADAMARD).main(["--batch", "33", "--dim", "512"])


# ---------------------------------------------------------------- chunked retention


@pytest.mark.parametrize("B,S,H,D", [(1, 192, 3, 64), (2, 64, 2, 128)])
def test_retention_cpu(B, S, H, D):
    module = _load(RETENTION)
    q, k, v = (torch.randn(B, S, H, D).half() for _ in range(3))
    o = module.postprocess(module.chunk_retention_fwd_kernel(B, S, H, D, D)(q, k, v))
    ref = module.ref_program(q, k, v)
    # float16 output: one half-precision ulp of |o| up to ~30
    np.testing.assert_allclose(o.double().numpy(), ref.numpy(), rtol=2e-3, atol=3e-2)


@needs_nvcc
def test_retention_nvcc_build():
    module = _load(RETENTION)
    _nvcc_build(module.chunk_retention_fwd_kernel.get_tir(2, 256, 4, 128, 128))


@pytest.mark.cuda
@needs_gpu
def test_retention_gpu():
    _load(RETENTION).main(["--B", "2", "--S", "1024", "--H", "8", "--D", "128"])


# ---------------------------------------------------------------- gdn chunk-local cumsum


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("head_first", [False, True])
def test_cumsum_cpu(reverse, head_first):
    """S=300: a ragged last chunk (64 + 64 + 64 + 64 + 44)."""
    module = _load(CUMSUM)
    B, S, H, chunk = 2, 300, 3, 64
    g = torch.randn((B, H, S) if head_first else (B, S, H), dtype=torch.float32)
    out = module.chunk_local_cumsum(B, S, H, chunk, reverse, head_first)(g)
    ref = module.ref_program(g, chunk, reverse, head_first)
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_emulated(reverse):
    """The CUDA lowering (a static ``scope="shared"`` tile in the planned buffer)."""
    module = _load(CUMSUM)
    B, S, H, chunk = 1, 150, 2, 32
    g = torch.randn(B, S, H, dtype=torch.float32)
    func = module.chunk_local_cumsum.get_tir(B, S, H, chunk, reverse, False, threads=64)
    out = _emulate(func, g.numpy(), np.zeros((B, S, H), np.float32))[-1]
    ref = module.ref_program(g, chunk, reverse, False)
    np.testing.assert_allclose(out.astype(np.float64), ref.numpy(), rtol=1e-5, atol=1e-5)


@needs_nvcc
def test_cumsum_nvcc_build():
    _nvcc_build(_load(CUMSUM).chunk_local_cumsum.get_tir(1, 1000, 4, 64, True, True))


@pytest.mark.cuda
@needs_gpu
def test_cumsum_gpu():
    _load(CUMSUM).main(["--S", "4100", "--H", "8"])
    _load(CUMSUM).main(["--S", "4100", "--H", "8", "--reverse", "--head_first"])


# ---------------------------------------------------------------- top-k


def _topk_reference(logits, k):
    """float64 top-k; among equal values the highest column first (the kernel's rule)."""
    x = logits.double().numpy()
    order = np.lexsort((-np.arange(x.shape[1])[None, :].repeat(x.shape[0], 0), -x), axis=1)
    idx = order[:, :k]
    return np.take_along_axis(x, idx, 1), idx


@pytest.mark.parametrize("M,N,k,blk_m", [(37, 50, 5, 16), (70, 33, 3, 32)])
def test_topk_cpu(M, N, k, blk_m):
    module = _load(TOPK)
    logits = torch.rand(M, N)
    logits[0, 3] = logits[0, 7] = 2.0  # a tie: column 7 comes first
    gates, idx = module.tl_topk(logits, k, blk_m=blk_m)
    ref_gates, ref_idx = _topk_reference(logits, k)
    np.testing.assert_array_equal(gates.double().numpy(), ref_gates)
    np.testing.assert_array_equal(idx.numpy(), ref_idx)
    assert idx[0, 0] == 7 and idx[0, 1] == 3


def test_topk_emulated():
    module = _load(TOPK)
    M, N, k = 20, 24, 4
    logits = torch.rand(M, N)
    func = module.tl_topk.jit_impl.get_tir(logits, k, blk_m=16, threads=128)
    outs = _emulate(func, logits.numpy(), np.zeros((M, k), np.float32), np.zeros((M, k), np.int32))
    ref_gates, ref_idx = _topk_reference(logits, k)
    np.testing.assert_array_equal(outs[-2].astype(np.float64), ref_gates)
    np.testing.assert_array_equal(outs[-1], ref_idx)


@needs_nvcc
def test_topk_nvcc_build():
    module = _load(TOPK)
    _nvcc_build(module.tl_topk.jit_impl.get_tir(torch.empty(320, 128), 6, blk_m=64, threads=128))


@pytest.mark.cuda
@needs_gpu
def test_topk_gpu():
    _load(TOPK).main(["--M", "333", "--N", "128", "--topk", "6", "--blk_m", "64"])


# ---------------------------------------------------------------- random numbers


def test_rand_reference_known_answer():
    """The example's numpy Philox: Random123's known-answer vector for key 0, counter 0."""
    words = _load(RAND).philox_randint4x(0, 1)[0]
    assert [int(w) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@pytest.mark.parametrize("M,seed,per_block", [(300, 123, 128), (77, 2**40 + 5, 16)])
def test_rand_cpu(M, seed, per_block):
    """Element i is word i of the stream whatever the block size (triton's randint4x)."""
    module = _load(RAND)
    out = module.tilelang_rand_1d(M, seed, per_block)
    np.testing.assert_array_equal(out.numpy(), module.ref_program(M, seed))


@needs_nvcc
def test_rand_nvcc_build():
    _nvcc_build(_load(RAND).tilelang_rand_1d.get_tir(1000, 7))


@pytest.mark.cuda
@needs_gpu
def test_rand_gpu():
    _load(RAND).main(["--M", "5000", "--seed", "42"])
