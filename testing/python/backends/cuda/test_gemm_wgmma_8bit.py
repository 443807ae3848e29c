"""sm_90a wgmma for 8-bit inputs: float8 (e4m3, e5m2) with float32 accumulation and
int8/uint8 with int32, K-major A (M, K) and B (N, K), ``wgmma.m64nNk32``.

* the plan: which gemms take the k32 instructions, and the clear refusals (transposed or
  register 8-bit operands stay off wgmma; float8 then has no CUDA path and says so);
* whole kernels through ``pipeline.lower`` run on the wgmma model of
  ``test_gemm_wgmma_emulation.py`` extended to k32 (an 8-bit K-major operand element
  (mn, k) sits at ``start + (mn // 8) * SBO + (mn % 8) * W + k`` before the swizzle), tails
  included, against float64;
* nvcc builds for sm_90a (the PTX holds ``wgmma.mma_async...k32.f32.e4m3.e4m3``);
* GPU runs against torch in float64 (``cuda``-marked).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as _emu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_emulation import (  # noqa: E402
    ROW_BYTES,
    WgmmaMachine,
    accumulator_coords,
    decode_desc,
    swizzle,
)

SM90A = {"kind": "cuda", "arch": "sm_90a"}
_INSTR8 = re.compile(r"tl::wgmma_m64n(\d+)k32_ss_(fp8|int8)<(true|false)>")
# instruction kind + flag -> numpy element type of A and B
_ELEMENT = {
    ("fp8", "false"): ml_dtypes.float8_e4m3fn,
    ("fp8", "true"): ml_dtypes.float8_e5m2,
    ("int8", "false"): np.int8,
    ("int8", "true"): np.uint8,
}
NP = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
NP.update(int8=np.int8, uint8=np.uint8, float32=np.float32, int32=np.int32)
NP.update(bfloat16=ml_dtypes.bfloat16, float16=np.float16)


def operand_addresses_8bit(desc: int, mn_extent: int) -> np.ndarray:
    """Byte address of every element (mn, k) of an 8-bit K-major ``mn_extent x 32`` operand."""
    start, _lbo, sbo, base, layout = decode_desc(desc)
    assert base == 0 and layout in ROW_BYTES
    w = ROW_BYTES[layout]
    mn = np.arange(mn_extent)[:, None]
    k = np.arange(32)[None, :]
    assert (start % w) + 32 <= w, "a K-major k32 row must stay inside one swizzle row"
    return swizzle(start + (mn // 8) * sbo + (mn % 8) * w + k, layout)


class Wgmma8Machine(WgmmaMachine):
    """The wgmma model with the 8-bit k32 instructions."""

    def _wgmma_op(self, fname, args, mask):
        m = _INSTR8.fullmatch(fname)
        if m is None:
            return super()._wgmma_op(fname, args, mask)
        op = super()._wgmma_op("tl::wgmma_m64n8k16_ss<false, 0, 0>", args, mask)
        op.update(n=int(m.group(1)), element=_ELEMENT[(m.group(2), m.group(3))], k32=True)
        return op

    def _execute_wgmma(self, op):
        if not op.get("k32"):
            return super()._execute_wgmma(op)
        smem = self.smem_root.view(np.uint8)
        rows, cols = accumulator_coords(op["n"])
        acc_buf, acc_flat = op["acc"]
        for w in _emu.whole_warpgroups(op["mask"], self.lanes, "wgmma k32"):
            lanes = slice(128 * w, 128 * w + 128)
            da, db = op["desc_a"][lanes], op["desc_b"][lanes]
            assert len(set(da.tolist())) == 1 and len(set(db.tolist())) == 1
            a_addr = operand_addresses_8bit(da[0], 64)
            b_addr = operand_addresses_8bit(db[0], op["n"])
            a = smem[a_addr].view(op["element"]).astype(np.float64)  # (64, 32)
            b = smem[b_addr].view(op["element"]).astype(np.float64).T  # (32, n)
            d = a @ b
            base = acc_flat[lanes][:, None] + np.arange(op["n"] // 2)[None, :]
            t = np.arange(128 * w, 128 * w + 128)[:, None]
            old = acc_buf.data[t, base].astype(np.float64)
            new = d[rows, cols] + (old if op["scale"] else 0.0)
            acc_buf.data[t, base] = new.astype(acc_buf.data.dtype)


def gemm_8bit(M, N, K, dtype, acc, out, bM=128, bN=128, bK=64, threads=128, stages=3):
    """C (out) = A (M, K) @ B (N, K)^T with ``acc`` accumulation: the fp8 GEMM as written
    for upstream (B transposed, K-major)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), C: T.Tensor((M, N), out)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bN, bK), dtype)
            C_f = T.alloc_fragment((bM, bN), acc)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[bx * bN, k * bK], B_s)
                T.gemm(A_s, B_s, C_f, transpose_B=True)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def _inputs(rng, M, N, K, dtype):
    if dtype.startswith("float8"):
        a = rng.standard_normal((M, K)).astype(NP[dtype])
        b = rng.standard_normal((N, K)).astype(NP[dtype])
    else:
        lo, hi = (-8, 8) if dtype == "int8" else (0, 16)
        a = rng.integers(lo, hi, size=(M, K)).astype(NP[dtype])
        b = rng.integers(lo, hi, size=(N, K)).astype(NP[dtype])
    return a, b


CASES = [
    ("float8_e4m3fn", "float32", "float32"),
    ("float8_e5m2", "float32", "bfloat16"),
    ("int8", "int32", "int32"),
    ("uint8", "int32", "int32"),
]


@pytest.mark.parametrize("dtype,acc,out", CASES)
def test_plan_takes_k32_wgmma(dtype, acc, out):
    text = pipeline.lower(gemm_8bit(256, 256, 256, dtype, acc, out), SM90A).script()
    kind = "fp8" if dtype.startswith("float8") else "int8"
    assert f"k32_ss_{kind}" in text
    assert "mma_m16n8" not in text


@pytest.mark.parametrize("dtype,acc,out", CASES)
@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 136, 96)])
def test_emulated_against_float64(dtype, acc, out, shape, rng):
    M, N, K = shape
    lowered = pipeline.lower(gemm_8bit(M, N, K, dtype, acc, out), SM90A)
    a, b = _inputs(rng, M, N, K, dtype)
    c = np.full((M, N), 7, dtype=NP[out])  # poisoned: every element must be written
    m = Wgmma8Machine(lowered, [a, b, c], "late_reads")
    m.run(lowered.body, True)
    m.finish()
    assert m.instructions > 0
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    got = c.astype(np.float64)  # the machine writes the arrays it is given
    tol = 1e-2 if out == "bfloat16" else 1e-5
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_transposed_fp8_is_refused_clearly():
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float8_e4m3fn"), C: T.Tensor((256, 256), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float8_e4m3fn")
            B_s = T.alloc_shared((64, 128), "float8_e4m3fn")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            T.copy(A[by * 128, 0], A_s)
            T.copy(A[0, bx * 128], B_s)
            T.gemm(A_s, B_s, C_f)  # B stored (K, N): not K-major
            T.copy(C_f, C[by * 128, bx * 128])

    with pytest.raises(tilelang.CompileError, match=r"float8 inputs run on sm_90a wgmma only"):
        pipeline.lower(main, SM90A)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dtype,ptx", [("float8_e4m3fn", "f32.e4m3.e4m3"), ("int8", "s32.s8.s8")])
def test_nvcc_builds(dtype, ptx, tmp_path):
    import subprocess

    acc = "float32" if dtype.startswith("float8") else "int32"
    art = pipeline.build(gemm_8bit(1024, 1024, 1024, dtype, acc, acc), SM90A, compiler="nvcc")
    cu = tmp_path / "k.cu"
    cu.write_text(art.get_kernel_source())
    out = subprocess.run(
        ["nvcc", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-o", "-", str(cu)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"k32.{ptx}" in out


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,acc,out", CASES)
@pytest.mark.parametrize("shape", [(512, 512, 512), (300, 520, 192)])
def test_gpu_against_torch(dtype, acc, out, shape):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs an sm_90 GPU")
    M, N, K = shape
    kernel = tilelang.compile(gemm_8bit(M, N, K, dtype, acc, out), out_idx=[2], target="cuda")
    tdt = getattr(torch, dtype)
    if dtype.startswith("float8"):
        a = torch.randn(M, K, device="cuda").to(tdt)
        b = torch.randn(N, K, device="cuda").to(tdt)
    else:
        lo, hi = (-8, 8) if dtype == "int8" else (0, 16)
        a = torch.randint(lo, hi, (M, K), device="cuda", dtype=tdt)
        b = torch.randint(lo, hi, (N, K), device="cuda", dtype=tdt)
    c = kernel(a, b)
    ref = a.double() @ b.double().T
    # Hopper's fp8 wgmma accumulates with fewer mantissa bits than float32 (about 14, as
    # DeepSeek-V3's report measured): errors of ~1e-3 of the result's scale are the hardware's
    tol = 1e-2 if dtype.startswith("float8") else 1e-5
    torch.testing.assert_close(c.double(), ref, rtol=tol, atol=tol * ref.abs().max().item())
