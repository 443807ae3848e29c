"""Ports of upstream TileLang's DeepSeek / sparse-attention examples, written in upstream's
API: the v3.2 radix top-k selector (per-thread shared atomics with ``return_prev``, a named
barrier under ``if tx < 256``), HISA's logits clean-up (SIMT stores past a row's end,
skipped as upstream's safe-memory legalization does) and DeepGEMM's FP8 GEMM with block
scales and two-level accumulation (fp8 tiles). Each runs on the CPU against a float64 (or
exact) torch reference on shapes that are not tile multiples, builds with nvcc for sm_90a,
and runs its ``main`` on a GPU when one is present."""

import shutil

import numpy as np
import pytest
import torch
from example_loader import load_example

from tilelang.backends.cuda import pipeline

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TOPK = "deepseek_v32/topk_selector.py"
CLEAN = "dsa_hisa/clean_and_maintain_logits.py"
FP8GEMM = "deepseek_deepgemm/example_deepgemm_fp8_2xAcc.py"


def _nvcc_sm90a(func):
    artifact = pipeline.build(func, {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"})
    assert artifact.meta["kernel_names"]
    return artifact


@pytest.fixture(autouse=True)
def _cpu_default(monkeypatch):
    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", "cpu")


# ------------------------------------------------------------------ v3.2 top-k selector


def _check_topk(scores, starts, ends, k, index):
    for b in range(scores.shape[0]):
        s, e = int(starts[b]), int(ends[b])
        n = min(k, max(e - s, 0))
        row = scores[b, s:e].double().numpy()
        got = index[b].numpy()
        assert len(set(got[:n].tolist())) == n, f"row {b}: repeated positions"
        assert np.all((got[:n] >= s) & (got[:n] < e)), f"row {b}: a position outside the range"
        assert np.all(got[n:] == -1), f"row {b}: unfilled slots must be -1"
        # the chosen values are the n largest (ties may be broken either way)
        chosen = np.sort(scores[b].double().numpy()[got[:n]])[::-1]
        np.testing.assert_array_equal(chosen, np.sort(row)[::-1][:n])


@pytest.mark.parametrize(
    "batch,length,k,threads",
    [(3, 3001, 100, 1024), (2, 777, 64, 512), (4, 300, 256, 256)],
)
def test_topk_selector_cpu(batch, length, k, threads):
    mod = load_example(TOPK)
    gen = torch.Generator().manual_seed(length)
    scores = torch.randn(batch, length, generator=gen)
    starts = torch.randint(0, length // 3, (batch,), generator=gen, dtype=torch.int32)
    ends = torch.randint(length // 2, length + 1, (batch,), generator=gen, dtype=torch.int32)
    ends[-1] = starts[-1] + k // 2  # a row with fewer than k positions
    index = mod.radix_topk(scores, starts, ends, k, threads=threads)
    assert index.shape == (batch, k) and index.dtype == torch.int32
    _check_topk(scores, starts, ends, k, index)


def test_topk_selector_ties_cpu():
    """Many equal scores: the last radix round takes ties in arrival order, exactly k."""
    mod = load_example(TOPK)
    gen = torch.Generator().manual_seed(7)
    scores = torch.randint(-3, 4, (2, 1500), generator=gen).float() * 0.5
    starts = torch.zeros(2, dtype=torch.int32)
    ends = torch.full((2,), 1500, dtype=torch.int32)
    index = mod.radix_topk(scores, starts, ends, 300, threads=512)
    _check_topk(scores, starts, ends, 300, index)


@needs_nvcc
def test_topk_selector_builds_sm90a():
    mod = load_example(TOPK)
    x = torch.randn(2, 4096)
    s = torch.zeros(2, dtype=torch.int32)
    _nvcc_sm90a(mod.radix_topk.get_tir(x, s, s + 4096, 2048))


@pytest.mark.cuda
@needs_gpu
def test_topk_selector_gpu():
    load_example(TOPK).main(batch=4, length=32 * 1024, k=2048)


# ------------------------------------------------------------------ HISA logits clean-up


@pytest.mark.parametrize(
    "seqs,per_seq,extra_kv,threads,block_K",
    [(3, 40, 17, 64, 256), (1, 300, 0, 128, 512), (4, 25, 333, 32, 128)],
)
def test_clean_logits_cpu(seqs, per_seq, extra_kv, threads, block_K):
    mod = load_example(CLEAN)
    cu = torch.arange(seqs + 1) * per_seq
    ks, ke = mod.causal_ranges(cu)
    rows, cols = seqs * per_seq, seqs * per_seq + extra_kv
    gen = torch.Generator().manual_seed(rows + cols)
    storage = torch.full((rows * cols + block_K,), 3.0)  # past the tensor: must stay 3.0
    logits = storage[: rows * cols].view(rows, cols)
    logits.copy_(torch.randn(rows, cols, generator=gen))
    start = logits.double().clone()
    mod.clean_logits(logits, ks, ke, threads=threads, block_K=block_K)
    want = start.numpy().copy()
    n = np.arange(cols)[None, :]
    ksn, ken = ks.numpy()[:, None], ke.numpy()[:, None]
    want[(n < ksn) | (n >= ken)] = -np.inf
    want[np.arange(rows), ks.numpy()] = np.inf
    want[np.arange(rows), ke.numpy() - 1] = np.inf
    np.testing.assert_array_equal(logits.double().numpy(), want)
    assert torch.all(storage[rows * cols :] == 3.0), "stored past the tensor"


@needs_nvcc
def test_clean_logits_builds_sm90a():
    mod = load_example(CLEAN)
    logits = torch.zeros(64, 300)
    ks = torch.zeros(64, dtype=torch.int32)
    _nvcc_sm90a(mod.clean_logits.get_tir(logits, ks, ks))


@pytest.mark.cuda
@needs_gpu
def test_clean_logits_gpu():
    load_example(CLEAN).main(seqs=4, per_seq=1024, extra_kv=100)


# ------------------------------------------------------------------ DeepGEMM fp8 2xAcc


@pytest.mark.parametrize(
    "m,n,k,block_m,block_n,out_dtype",
    [
        (77, 200, 320, 64, 128, "bfloat16"),
        (33, 64, 128, 32, 64, "float32"),
        (5, 130, 260, 16, 32, "float32"),
    ],
)
def test_fp8_gemm_2xacc_cpu(m, n, k, block_m, block_n, out_dtype):
    mod = load_example(FP8GEMM)
    gen = torch.Generator().manual_seed(m * n + k)
    A, scales_a = mod.quantize_rows(torch.randn(m, k, generator=gen) * 3)
    B, scales_b = mod.quantize_blocks(torch.randn(n, k, generator=gen))
    C = mod.fp8_gemm_2xacc(A, B, scales_a, scales_b, out_dtype, block_M=block_m, block_N=block_n)
    assert C.shape == (m, n) and str(C.dtype) == f"torch.{out_dtype}"
    want = mod.reference(A, B, scales_a, scales_b).numpy()
    # float32 partial sums per K group; bfloat16 output keeps 8 bits
    rtol = 1e-2 if out_dtype == "bfloat16" else 1e-5
    np.testing.assert_allclose(C.double().numpy(), want, rtol=rtol, atol=rtol * np.abs(want).max())


def test_fp8_gemm_block_n_must_divide_the_scale_block():
    mod = load_example(FP8GEMM)
    A, sa = mod.quantize_rows(torch.randn(8, 128))
    B, sb = mod.quantize_blocks(torch.randn(96, 128))
    with pytest.raises(Exception, match="block_N must divide 128"):
        mod.fp8_gemm_2xacc(A, B, sa, sb, block_N=96)


@needs_nvcc
def test_fp8_gemm_2xacc_builds_sm90a():
    mod = load_example(FP8GEMM)
    A, sa = mod.quantize_rows(torch.randn(256, 512))
    B, sb = mod.quantize_blocks(torch.randn(256, 512))
    _nvcc_sm90a(mod.fp8_gemm_2xacc.get_tir(A, B, sa, sb))


@pytest.mark.cuda
@needs_gpu
def test_fp8_gemm_2xacc_gpu():
    load_example(FP8GEMM).main(M=1024, N=1024, K=8192)
