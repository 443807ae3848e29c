"""Upstream's ``examples/gemm/example_gemm_intrinsics.py`` (TensorCoreIntrinEmitter) unchanged:
on the CPU backend, the CUDA emulator (sm_80 ldmatrix + mma.sync), nvcc builds and a GPU.

The example tiles 128 x 128 x 32 and loops ``K // 32`` times, so K must be a multiple of 32
(as upstream; a K tail is not computed). M and N need not be tile multiples: the
T.Parallel copies guard the tails. References are float64 (int64 for int8).
"""

import shutil

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

import tilelang
from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator

EXAMPLE = "gemm/example_gemm_intrinsics.py"
FP16 = {"in_dtype": "float16", "out_dtype": "float16", "accum_dtype": "float32"}
INT8 = {"in_dtype": "int8", "out_dtype": "int32", "accum_dtype": "int32"}


def _inputs(rng, m, n, k, dtypes):
    if dtypes is INT8:
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (n, k)).astype(np.int8)
        return a, b, a.astype(np.int64) @ b.astype(np.int64).T
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


def _matmul_for(target):
    """The example's ``tl_matmul`` jitted for ``target`` (its own decorator picks the default)."""
    return tilelang.jit(target=target)(_load(EXAMPLE).tl_matmul.func)


def _check(out, ref, dtypes):
    if dtypes is INT8:
        np.testing.assert_array_equal(np.asarray(out, np.int64), ref)
    else:  # float16 output: half an ulp of |ref| plus the float32 accumulation
        np.testing.assert_allclose(np.asarray(out, np.float64), ref, rtol=2e-3, atol=2e-2)


def test_main_runs():
    """The example's own main (benchmark + assert_allclose) on the default device."""
    _load(EXAMPLE).main(256, 256, 128)


@pytest.mark.parametrize(
    "m,n,k,dtypes",
    [(200, 136, 96, FP16), (128, 256, 64, FP16), (130, 200, 64, INT8)],
    ids=["f16-tails", "f16-aligned", "i8-tails"],
)
def test_cpu(m, n, k, dtypes, rng):
    a, b, ref = _inputs(rng, m, n, k, dtypes)
    kernel = _matmul_for("cpu").compile(M=m, N=n, K=k, **dtypes)
    out = kernel(torch.from_numpy(a), torch.from_numpy(b))
    _check(out.numpy(), ref, dtypes)


@pytest.mark.parametrize(
    "m,n,k,dtypes,arch",
    [(200, 136, 96, FP16, "sm_80"), (130, 200, 64, INT8, "sm_80"), (72, 136, 64, FP16, "sm_90a")],
    ids=["f16-sm_80", "i8-sm_80", "f16-sm_90a"],
)
def test_cuda_emulated(m, n, k, dtypes, arch, rng):
    """The CUDA lowering (ldmatrix / mma.sync helpers) run by the CUDA emulator."""
    a, b, ref = _inputs(rng, m, n, k, dtypes)
    func = _load(EXAMPLE).tl_matmul.get_tir(M=m, N=n, K=k, **dtypes)
    c = np.full((m, n), np.nan, np.float16) if dtypes is FP16 else np.zeros((m, n), np.int32)
    out = cuda_emulator.emulate(pipeline.lower(func, {"kind": "cuda", "arch": arch}), a, b, c)
    _check(out[2], ref, dtypes)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtypes", [FP16, INT8], ids=["f16", "i8"])
def test_builds_with_nvcc(arch, dtypes):
    func = _load(EXAMPLE).tl_matmul.get_tir(M=200, N=136, K=96, **dtypes)
    artifact = pipeline.build(func, {"kind": "cuda", "arch": arch, "compiler": "nvcc"})
    assert "tl::ptx_ldmatrix_x4" in artifact.kernel_source
    assert "tl::mma_m16n8k" in artifact.kernel_source


@pytest.mark.cuda
@pytest.mark.parametrize(
    "m,n,k,dtypes",
    [(4096, 4096, 4096, FP16), (200, 136, 96, FP16), (1000, 520, 256, INT8)],
    ids=["f16-4096", "f16-tails", "i8-tails"],
)
def test_gpu(m, n, k, dtypes, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b, _ = _inputs(rng, m, n, k, dtypes)
    kernel = _matmul_for("cuda").compile(M=m, N=n, K=k, **dtypes)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    out = kernel(ta, tb)
    if dtypes is INT8:
        ref = (ta.cpu().long() @ tb.cpu().long().T).numpy()
    else:
        ref = (ta.double() @ tb.double().T).cpu().numpy()
    _check(out.cpu().numpy(), ref, dtypes)


@pytest.mark.cuda
def test_main_gpu():
    """The example's main at upstream's size (benchmark + assert_allclose) on a GPU."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _load(EXAMPLE).main()


def test_plot_layout_fragment_mma_load_a(tmp_path, monkeypatch):
    """Upstream's ``examples/plot_layout/fragment_mma_load_a.py`` unchanged: the mma A-operand
    fragment from ``tilelang.cuda.intrinsics.layout.mma_layout`` (through ``tvm.tirx.IndexMap``),
    repeated to warp and block level and plotted (files under ./tmp)."""
    monkeypatch.chdir(tmp_path)
    module = _load("plot_layout/fragment_mma_load_a.py")
    base = module.base_layout
    assert base.get_input_shape() == [16, 16] and base.get_thread_size() == 32
    # lane 4 g + t holds A[g + 8 (i // 2 % 2), 2 t + i % 2 + 8 (i // 4)] in element i (PTX ISA)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(8):
            row, col = g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)
            assert base.forward_thread_point(row, col) == lane
            assert int(base.map_forward_index([row, col])[0]) == i
    assert module.block_layout.get_input_shape() == [128, 32]
    plots = {p.name for p in (tmp_path / "tmp").iterdir()}
    assert {"base_layout.pdf", "warp_layout.pdf", "block_layout.pdf"} <= plots
