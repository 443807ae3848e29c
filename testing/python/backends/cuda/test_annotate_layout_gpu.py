"""``T.annotate_layout`` on the GPU: GEMMs whose shared tiles are annotated with
``make_swizzled_layout`` and with padded rows (``bK + 8``), and an elementwise kernel
whose annotated shared tile is written by ``T.Parallel``, against torch on fresh random
inputs, tile multiples and tails. The CPU-side checks (IR, inference, emulation,
conflicts) are in ``testing/python/transform/test_annotate_layout.py``.
"""

from __future__ import annotations

import pytest
from annotate_layout_kernels import elementwise, gemm

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.layout import Fragment, Layout


def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


@pytest.mark.cuda
@pytest.mark.parametrize("ann", ["swizzle", "pad"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "M,N,K,bM,bN,bK,threads,stages",
    [
        (1024, 1024, 1024, 128, 128, 32, 128, 3),
        (1000, 520, 200, 128, 128, 32, 128, 3),  # tails in M, N and K
        (256, 256, 512, 64, 64, 64, 128, 2),
        (512, 384, 256, 128, 128, 32, 256, 3),
    ],
)
def test_gemm_annotated_gpu(ann, dtype, M, N, K, bM, bN, bK, threads, stages):
    torch, load = _gpu()
    kernel = load(gemm(M, N, K, bM, bN, bK, threads, stages, ann, dtype=dtype))
    tdt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda").to(tdt)
    b = torch.randn(K, N, device="cuda").to(tdt)
    c = torch.empty(M, N, device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * K**0.5)


@pytest.mark.cuda
@pytest.mark.parametrize("shared", ["pad", "swizzle"])
@pytest.mark.parametrize("M,N", [(1024, 1024), (1000, 136)])
def test_parallel_through_annotated_tile_gpu(shared, M, N):
    torch, load = _gpu()
    kernel = load(elementwise(M, N, shared=shared))
    a = torch.randn(M, N, device="cuda", dtype=torch.float16)
    b = torch.empty_like(a)
    kernel(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(b.double(), a.double() * 2 + 1, rtol=2e-3, atol=2e-3)


def test_layout_module_exports():
    """``T.Layout`` is upstream's ``tilelang.layout.Layout`` (used in the kernels above)."""
    assert T.Layout is Layout and T.Fragment is Fragment
