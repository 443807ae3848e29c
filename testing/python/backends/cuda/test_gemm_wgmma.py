"""The sm_90a wgmma GEMM path: dispatch, nvcc/ptxas checks (no GPU) and GPU runs vs torch.

CPU: which gemms take wgmma (sm_90a, fp16/bf16 shared A/B, whole warpgroups) and which stay
on mma.sync (other archs, register A, tiles no warpgroup split fits); the warpgroup split;
the generated source compiles with nvcc for sm_90a, its PTX has the expected
``wgmma.mma_async`` shapes and transpose immediates, and ptxas reports no spills, no stack
frame and no serialised wgmma. GPU (``cuda`` marker): results against torch in float64
for all four transposes, fp16/bf16, tails, 1-4 stages, 1-2 warpgroups, fp16 C, clear_accum,
a gemm outside any pipeline, and the FlashAttention example (wgmma Q @ K^T, wgmma RS P @ V).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.ops.gemm.wgmma_cuda import warpgroup_partition

ROOT = Path(__file__).resolve().parents[4]
SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def gemm(
    M, N, K, bM=128, bN=128, bK=64, threads=128, stages=3, dtype="float16", out_dtype="float32",
    ta=False, tb=False, pipelined=True,
):  # fmt: skip
    """C = A @ B (A (K, M) when ``ta``, B (N, K) when ``tb``); ``pipelined=False`` uses T.serial."""
    a_shape, b_shape = ((K, M) if ta else (M, K)), ((N, K) if tb else (K, N))
    as_, bs_ = ((bK, bM) if ta else (bM, bK)), ((bN, bK) if tb else (bK, bN))

    @T.prim_func
    def main(
        A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), out_dtype)
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_, dtype)
            B_s = T.alloc_shared(bs_, dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            loop = (
                T.Pipelined(T.ceildiv(K, bK), num_stages=stages)
                if pipelined
                else T.serial(T.ceildiv(K, bK))
            )
            for k in loop:
                if ta:
                    T.copy(A[k * bK, by * bM], A_s)
                else:
                    T.copy(A[by * bM, k * bK], A_s)
                if tb:
                    T.copy(B[bx * bN, k * bK], B_s)
                else:
                    T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l, transpose_A=ta, transpose_B=tb)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def gemm_clear_accum(M, N, K, bM=64, bN=64, threads=128, dtype="float16"):
    """One gemm over the whole K (K == tile K) with clear_accum=True on garbage C."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), "float")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, K), dtype)
            B_s = T.alloc_shared((bN, K), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.fill(C_l, 123.0)
            T.copy(A[by * bM, 0], A_s)
            T.copy(B[bx * bN, 0], B_s)
            T.gemm(A_s, B_s, C_l, transpose_B=True, clear_accum=True)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def _example(rel):
    path = ROOT / "examples" / rel
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------ dispatch
def _lowered(func, arch="sm_90a"):
    return str(pipeline.lower(func, {"kind": "cuda", "arch": arch}))


def test_sm90a_uses_wgmma_other_archs_mma():
    func = gemm(512, 512, 512)
    text = _lowered(func)
    assert "tl::wgmma_m64n128k16_ss<false, 0, 1>" in text and "mma_m16n8k16" not in text
    for arch in ("sm_90", "sm_80"):
        text = _lowered(func, arch)
        assert "wgmma" not in text and "tl::mma_m16n8k16_f16f16f32" in text


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(threads=64),  # not a whole warpgroup
        dict(bM=32, bN=128, bK=32),  # no 64-row warpgroup tile
        dict(bM=128, bN=24, bK=32, threads=128),  # N-major B of 24: no swizzle fits n24
    ],
)
def test_tiles_without_a_warpgroup_split_stay_on_mma(kwargs):
    text = _lowered(gemm(256, 256, 256, **kwargs))
    assert "wgmma" not in text and "mma_m16n8k16" in text


def test_flash_attention_uses_wgmma_for_both_gemms():
    fa = _example("flash_attention/example_mha_fwd_bshd.py")
    text = _lowered(fa.flashattn.get_tir(1, 2, 128, 64, False))
    assert "tl::wgmma_m64n64k16_ss<false, 0, 0>" in text  # Q @ K^T: both K-major
    assert "tl::wgmma_m64n64k16_rs<false, 1>" in text  # P @ V, P in registers, V N-major
    assert "mma_m16n8k16" not in text


@pytest.mark.parametrize(
    "m,n,num_wg,policy,want",
    [
        (128, 256, 2, 0, (2, 1, 256)),
        (128, 128, 1, 0, (1, 1, 128)),
        (256, 128, 2, 0, (2, 1, 128)),
        (64, 256, 2, 0, (1, 2, 128)),
        (128, 256, 2, 2, (1, 2, 128)),  # FullCol
        (128, 512, 1, 0, (1, 1, 256)),  # two n256 instructions
        (64, 64, 2, 1, (1, 2, 32)),  # FullRow: too few rows for 2 x 64, the rest along N
        (64, 8, 2, 1, None),  # nor 8 columns for 2 x n8
        (128, 40, 1, 0, (1, 1, 8)),  # 40 = 5 x n8 when B is K-major
    ],
)
def test_warpgroup_partition(m, n, num_wg, policy, want):
    assert warpgroup_partition(m, n, num_wg, policy) == want


def test_n_major_b_needs_16_wide_instructions():
    assert warpgroup_partition(128, 40, 1, 0, mn_major_b=True) is None
    assert warpgroup_partition(128, 48, 1, 0, mn_major_b=True) == (1, 1, 48)


# ------------------------------------------------------------------------------ nvcc
def ptxas_report(source: str, tmp_path) -> dict:
    cu = tmp_path / "k.cu"
    cu.write_text(source)
    flags = ["-gencode=arch=compute_90a,code=sm_90a", "--use_fast_math"]
    log = subprocess.run(
        ["nvcc", "-cubin", *flags, "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(cu)],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    ptx = subprocess.run(
        ["nvcc", "-ptx", *flags, "-o", "-", str(cu)], capture_output=True, text=True, check=True
    ).stdout
    return {
        "registers": int(re.search(r"Used (\d+) registers", log).group(1)),
        "spill": sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)),
        "stack": int(re.search(r"(\d+) bytes stack frame", log).group(1)),
        "log": log,
        "ptx": ptx,
    }


@needs_nvcc
@pytest.mark.parametrize(
    "cfg,instr,count",
    [
        (dict(bM=128, bN=256, bK=64, threads=256, stages=4), "m64n256k16", 4),
        (dict(bM=128, bN=256, bK=64, threads=256, stages=3, dtype="bfloat16"), "m64n256k16", 4),
        (dict(bM=256, bN=128, bK=64, threads=256, stages=3), "m64n128k16", 8),
        (dict(bM=128, bN=128, bK=64, threads=128, stages=4), "m64n128k16", 8),
        (dict(bM=128, bN=256, bK=64, threads=256, stages=4, ta=True, tb=True), "m64n256k16", 4),
    ],
)
def test_benchmark_configs_compile_without_spills(cfg, instr, count, tmp_path):
    func = gemm(8192, 8192, 8192, out_dtype=cfg.get("dtype", "float16"), **cfg)
    art = pipeline.build(func, SM90A, compiler="nvcc")
    rep = ptxas_report(art.get_kernel_source(), tmp_path)
    assert rep["spill"] == 0 and rep["stack"] == 0, rep["log"]
    assert rep["registers"] <= 255
    assert "serialized" not in rep["log"], rep["log"]  # ptxas: wgmma serialization warning
    kind = "bf16" if cfg.get("dtype") == "bfloat16" else "f16"
    shape = f"wgmma.mma_async.sync.aligned.{instr}.f32.{kind}.{kind}"
    found = rep["ptx"].count(shape)  # one k-tile's worth, or more where nvcc unrolls the loop
    assert found and found % count == 0, found  # (the TMA loop: unrolled by 2 with ta, tb)
    ta, tb = int(cfg.get("ta", False)), int(not cfg.get("tb", False))
    assert re.search(rf"p, 1, 1, {ta}, {tb};", rep["ptx"])
    for op in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned"):
        assert op in rep["ptx"]
    assert "wgmma.wait_group.sync.aligned 1" in rep["ptx"]  # one group in flight (S >= 3)
    assert "fence.proxy.async.shared::cta" in rep["ptx"]


# ------------------------------------------------------------------------------ GPU
def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    return torch, lambda f: load_kernel(pipeline.build(f, {"kind": "cuda"}))


def _run(func, M, N, K, dtype="float16", out_dtype="float32", ta=False, tb=False, ints=False):
    torch, load = _torch()
    tdt = getattr(torch, dtype)

    def rand(shape):
        if ints:
            return torch.randint(-3, 4, shape, device="cuda").to(tdt)
        return torch.randn(shape, device="cuda", dtype=tdt)

    a, b = rand((K, M) if ta else (M, K)), rand((N, K) if tb else (K, N))
    c = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    load(func)(a, b, c)
    torch.cuda.synchronize()
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    return c.double(), ref


TRANSPOSES = [(False, False), (False, True), (True, False), (True, True)]


@pytest.mark.cuda
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_exact_small_integers_gpu(ta, tb):
    """Integer inputs: every element exact, so any misplaced element shows."""
    M = N = 256
    K = 512
    c, ref = _run(gemm(M, N, K, ta=ta, tb=tb), M, N, K, ta=ta, tb=tb, ints=True)
    assert bool((c == ref).all()), (c - ref).abs().max()


@pytest.mark.cuda
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(512, 512, 256), (200, 136, 96)])
def test_gemm_matches_torch_gpu(ta, tb, dtype, shape):
    import torch

    M, N, K = shape
    c, ref = _run(gemm(M, N, K, bK=32, ta=ta, tb=tb, dtype=dtype), M, N, K, dtype, ta=ta, tb=tb)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=2e-2)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "cfg",
    [
        dict(bM=128, bN=256, bK=64, threads=256, stages=4),
        dict(bM=128, bN=256, bK=64, threads=256, stages=3, ta=True, tb=True),
        dict(bM=256, bN=128, bK=64, threads=256, stages=3, tb=True),
        dict(bM=128, bN=128, bK=64, threads=128, stages=1),
        dict(bM=128, bN=128, bK=64, threads=128, stages=2, ta=True),
        dict(bM=128, bN=128, bK=64, threads=128, stages=3, pipelined=False),
        dict(bM=64, bN=64, bK=64, threads=128, stages=4, dtype="bfloat16"),
    ],
)
def test_configs_fp16_out_gpu(cfg):
    import torch

    M, N, K = 768, 1024, 1088  # 17 k-tiles of 64; M = 3 x 256, not a multiple of 512
    dtype = cfg.get("dtype", "float16")
    func = gemm(M, N, K, out_dtype=dtype, **cfg)
    c, ref = _run(func, M, N, K, dtype, dtype, cfg.get("ta", False), cfg.get("tb", False))
    torch.testing.assert_close(c, ref, rtol=2e-2, atol=5e-2)


@pytest.mark.cuda
def test_clear_accum_gpu():
    import torch

    M, N, K = 256, 192, 64
    torch_, load = _torch()
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda")
    load(gemm_clear_accum(M, N, K))(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gpu(causal):
    torch, load = _torch()
    fa = _example("flash_attention/example_mha_fwd_bshd.py")
    B, H, S, D = 2, 4, 256, 64
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    load(fa.flashattn.get_tir(B, H, S, D, causal))(q, k, v, o)
    torch.cuda.synchronize()
    torch.testing.assert_close(o.double(), fa.ref_program(q, k, v, causal), rtol=1e-2, atol=1e-2)
