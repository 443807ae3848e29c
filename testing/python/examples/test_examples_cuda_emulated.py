"""The examples' CUDA lowering, run by the CUDA emulator on the CPU (no GPU needed).

``tilelang.testing.cuda_emulator`` executes the thread-level IR the CUDA pipeline produces
(cp.async, ldmatrix, mma.sync, shuffles, barriers, atomics), so the kernels CI cannot run
on a GPU are still checked against float64 references, tails included. The ``sm_80``
lowering (mma.sync) is emulated for the gemm examples; the wgmma form has its own
emulation tests (``backends/cuda/test_gemm_wgmma_*.py``). With nvcc on PATH, every
kernel here is also built for sm_80 and sm_90a (TIRx's passes, codegen and nvcc run).
"""

import shutil

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emulate_mod

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _emulate(func, target, *arrays):
    return emulate_mod.emulate(pipeline.lower(func, target), *[a.copy() for a in arrays])


@pytest.fixture
def rng():
    return np.random.default_rng(1)


@pytest.mark.parametrize("m,n,k", [(129, 257, 33), (1, 300, 77)])
def test_gemm_unaligned_k(m, n, k, rng):
    """K rows that are not 16-byte aligned: the copies test alignment at run time and
    zero-fill the tails (mma.sync lowering)."""
    matmul = _load("gemm/example_gemm.py").matmul
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = _emulate(matmul.get_tir(m, n, k), SM80, a, b, np.full((m, n), np.nan, np.float16))[2]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=5e-2)


@pytest.mark.parametrize("target", [SM80, SM90A], ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("n,k", [(100, 300), (64, 256)])
def test_gemv(target, n, k, rng):
    gemv = _load("gemv/example_gemv.py").gemv
    a = rng.standard_normal((n, k)).astype(np.float16)
    x = rng.standard_normal(k).astype(np.float16)
    out = _emulate(gemv.get_tir(n, k), target, a, x, np.zeros(n, np.float32))[2]
    np.testing.assert_allclose(
        out, a.astype(np.float64) @ x.astype(np.float64), rtol=1e-3, atol=1e-2
    )


@pytest.mark.parametrize("target", [SM80, SM90A], ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel", ["rms_norm", "rms_norm_splitk"])
def test_rms_norm(target, kernel, rng):
    module = _load("norm/example_rms_norm.py")
    x = rng.standard_normal((70, 300)).astype(np.float32)
    out = _emulate(getattr(module, kernel).get_tir(70, 300), target, x, np.zeros_like(x))[1]
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("m,n,k,split_k", [(100, 72, 500, 3), (128, 64, 256, 2)])
def test_gemm_splitk(m, n, k, split_k, rng):
    matmul = _load("gemm_splitk/example_gemm_splitk.py").matmul_splitk
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    out = _emulate(
        matmul.get_tir(m, n, k, split_k=split_k), SM80, a, b, np.zeros((m, n), np.float32)
    )
    np.testing.assert_allclose(
        out[2], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2
    )


@pytest.mark.parametrize("causal,dq_layout", [(False, False), (True, False), (False, True)])
def test_flash_attention_bwd(causal, dq_layout, rng):
    """The backward kernels (sm_80 lowering) against torch autograd in float64; with
    ``dq_layout`` dQ is stored permuted and converted by the postprocess kernel."""
    fa = _load("flash_attention/example_mha_bwd_bshd.py")
    B, H, S, D = 1, 1, 128, 32
    q, k, v, do = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(4))
    fwd = fa.flashattn_fwd.get_tir(B, H, S, D, causal)
    o, lse = _emulate(fwd, SM80, q, k, v, np.zeros_like(q), np.zeros((B, H, S), np.float32))[3:]
    pre = fa.flashattn_bwd_preprocess.get_tir(B, H, S, D)
    delta = _emulate(pre, SM80, o, do, np.zeros((B, H, S), np.float32))[2]
    grads = _emulate(
        fa.flashattn_bwd.get_tir(B, H, S, D, causal, dq_layout=dq_layout),
        SM80,
        q, k, v, do, lse, delta,
        np.zeros(q.shape, np.float32), np.zeros_like(k), np.zeros_like(v),
    )[6:]  # fmt: skip
    if dq_layout:
        post = fa.flashattn_bwd_postprocess.get_tir(B, H, S, D)
        dq16 = _emulate(post, SM80, grads[0], np.zeros(q.shape, np.float16))[1]
        grads = [dq16, *grads[1:]]
    ref = fa.ref_program(*(torch.from_numpy(x) for x in (q, k, v, do)), causal)
    for name, got, want in zip(("O", "dQ", "dK", "dV"), (o, *grads), ref):
        np.testing.assert_allclose(
            got.astype(np.float64), want.detach().numpy(), rtol=2e-2, atol=2e-2, err_msg=name
        )


def test_blocksparse_gemm(rng):
    module = _load("blocksparse_gemm/example_blocksparse_gemm.py")
    M, N, K = 100, 130, 70
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    mask = rng.random((2, 3, 3)) < 0.5
    out = _emulate(
        module.blocksparse_matmul.get_tir(M, N, K), SM80, a, b, mask, np.zeros((M, N), np.float32)
    )[3]
    ref = module.reference(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(mask))
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-3, atol=1e-2)


def test_dequant_gemm_w4a16(rng):
    module = _load("dequantize_gemm/example_dequant_gemm_w4a16.py")
    M, N, K = 100, 72, 96
    a = rng.standard_normal((M, K)).astype(np.float16)
    codes = torch.from_numpy(rng.integers(0, 16, size=(K, N)))
    scale = (rng.random(N) + 0.5).astype(np.float16)
    packed = module.pack_int4(codes).numpy()
    out = _emulate(
        module.dequant_matmul.get_tir(M, N, K), SM80, a, packed, scale, np.zeros((M, N), np.float32)
    )[3]
    weights = ((codes.numpy() - 8).astype(np.float16) * scale).astype(np.float64)
    np.testing.assert_allclose(out, a.astype(np.float64) @ weights, rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize(
    "args", [(1, 3, 15, 13, 10, 3, 2, 0, 2), (2, 32, 8, 8, 64, 3, 1, 1, 1)], ids=["strided", "same"]
)
def test_convolution(args, rng):
    """Implicit GEMM: an im2col gather in T.Parallel, weights through a reshaped view."""
    module = _load("convolution/example_convolution.py")
    n, c, h, w, f, k, stride, padding, dilation = args
    x = rng.standard_normal((n, h, w, c)).astype(np.float16)
    wt = rng.standard_normal((k, k, c, f)).astype(np.float16)
    ref = module.reference(torch.from_numpy(x), torch.from_numpy(wt), stride, padding, dilation)
    func = module.convolution.get_tir(n, c, h, w, f, k, k, stride, padding, dilation)
    out = _emulate(func, SM80, x, wt, np.zeros(ref.shape, np.float32))[2]
    np.testing.assert_allclose(out, ref.numpy(), rtol=1e-3, atol=2e-2)


@pytest.mark.parametrize("target", [SM80, SM90A], ids=["sm_80", "sm_90a"])
@pytest.mark.parametrize("args", [(1, 16, 2, 200, 64, 4), (1, 8, 8, 9, 64, 4)])
def test_gqa_decode(target, args, rng):
    """Split-KV decoding and the combine kernel (the 9-key cache leaves one split empty)."""
    module = _load("flash_decoding/example_gqa_decode.py")
    b, h, hk, s, d, split = args
    q = rng.standard_normal((b, h, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, s, hk, d)).astype(np.float16) for _ in range(2))
    parts, lse = _emulate(
        module.gqa_decode_split.get_tir(b, h, hk, s, d, split), target, q, k, v,
        np.zeros((b, h, split, d), np.float32), np.zeros((b, h, split), np.float32),
    )[3:]  # fmt: skip
    combine = module.combine_splits.get_tir(b, h, split, d)
    out = _emulate(combine, target, parts, lse, np.zeros((b, h, d), np.float16))[2]
    ref = module.reference(*(torch.from_numpy(x) for x in (q, k, v))).numpy()
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


def _kernels():
    """(example, kernel, args) of the kernels above, at the shapes the tests use."""
    yield "gemm/example_gemm.py", "matmul", (129, 257, 33)
    yield "gemv/example_gemv.py", "gemv", (100, 300)
    yield "norm/example_rms_norm.py", "rms_norm", (70, 300)
    yield "norm/example_rms_norm.py", "rms_norm_splitk", (70, 300)
    yield "gemm_splitk/example_gemm_splitk.py", "matmul_splitk", (100, 72, 500, 64, 64, 32, 3)
    yield "blocksparse_gemm/example_blocksparse_gemm.py", "blocksparse_matmul", (100, 130, 70)
    yield "dequantize_gemm/example_dequant_gemm_w4a16.py", "dequant_matmul", (100, 72, 96)
    yield "convolution/example_convolution.py", "convolution", (1, 3, 15, 13, 10, 3, 3, 2, 0, 2)
    yield "flash_decoding/example_gqa_decode.py", "gqa_decode_split", (1, 16, 2, 200, 64, 4)
    yield "flash_decoding/example_gqa_decode.py", "combine_splits", (1, 16, 4, 64)
    for causal in (False, True):
        yield "flash_attention/example_mha_bwd_bshd.py", "flashattn_bwd", (1, 2, 128, 32, causal)
    yield (
        "flash_attention/example_mha_bwd_bshd.py",
        "flashattn_bwd",
        (1, 2, 128, 32, False, 64, 64, 128, True),
    )
    yield "flash_attention/example_mha_bwd_bshd.py", "flashattn_bwd_postprocess", (1, 2, 128, 32)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("example,kernel,args", list(_kernels()))
def test_builds_with_nvcc(example, kernel, args, arch):
    func = getattr(_load(example), kernel).get_tir(*args)
    artifact = pipeline.build(func, {"kind": "cuda", "arch": arch, "compiler": "nvcc"})
    assert artifact.meta["kernel_names"]
