"""T.use_swizzle: the panel renumbering is a bijection of the grid and reaches the CUDA IR."""

import pytest
import torch
from tvm_tirx import ir, sym

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.backends.cuda.passes.rasterize_blocks import panel_map


def _value(expr):
    return (
        expr
        if isinstance(expr, int)
        else sym.Analyzer().simplify(ir.const(0, "int32") + expr).value
    )


@pytest.mark.parametrize("gx,gy,panel", [(7, 5, 2), (8, 8, 3), (3, 10, 4), (1, 6, 8), (9, 1, 4)])
def test_panel_map_is_a_bijection(gx, gy, panel):
    seen = set()
    for by in range(gy):
        for bx in range(gx):
            nbx, nby = (_value(e) for e in panel_map(bx, by, gx, gy, panel))
            assert 0 <= nbx < gx and 0 <= nby < gy
            seen.add((nbx, nby))
    assert len(seen) == gx * gy


def _copy_kernel(M, N, bM, bN, order):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            T.use_swizzle(panel_size=3, order=order)
            tile = T.alloc_shared((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], tile)
            T.copy(tile, B[by * bM, bx * bN])

    return main


@pytest.mark.parametrize("order", ["row", "col"])
def test_cuda_ir_reads_renumbered_blocks(order):
    low = cuda_pipeline.lower(
        _copy_kernel(100, 90, 16, 16, order), {"kind": "cuda", "arch": "sm_90a"}
    )
    text = low.script()
    assert "bx_r" in text and "by_r" in text and "use_swizzle" not in text


@pytest.mark.parametrize("order", ["row", "col"])
def test_swizzled_kernel_still_copies_everything_on_cpu(order, rng):
    kernel = tilelang.compile(_copy_kernel(100, 90, 16, 16, order), target="cpu", out_idx=[-1])
    a = torch.from_numpy(rng.standard_normal((100, 90)).astype("float32"))
    torch.testing.assert_close(kernel(a), a)


@pytest.mark.cuda
@pytest.mark.parametrize("order", ["row", "col"])
def test_swizzled_kernel_copies_everything_on_gpu(order):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernel = tilelang.compile(_copy_kernel(1000, 900, 64, 64, order), target="cuda", out_idx=[-1])
    a = torch.randn(1000, 900, device="cuda")
    torch.testing.assert_close(kernel(a), a)
