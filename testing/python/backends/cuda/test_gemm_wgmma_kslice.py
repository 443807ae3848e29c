"""``T.gemm`` on sm_90a with a K-major shared operand given as a K slice of its tile
(``B_s[:, c:]``), and a register-A (RS) gemm chained after shared-A (SS) gemms into one
accumulator: the pattern of MLA decode with part of the queries in registers
(``examples/deepseek_mla/example_mla_decode.py``, ``q_reg_cols``).

* dispatch: a K slice starting at a multiple of 16 stays on wgmma (the descriptor starts on
  a 16-byte chunk of an atom row, the swizzle is the whole tile's); a slice starting
  elsewhere, or a slice of an MN-major operand, is refused by the wgmma plan (mma.sync);
* the wait chain: SS then RS gemms of the same instruction shape into one accumulator are
  issued back to back, one ``wait_group 0`` after the last (PTX orders same-shape
  accumulator accesses); an RS gemm of another shape keeps its own wait;
* emulated (asynchronous wgmma, register A read late, race check) against float64 numpy on
  fresh random inputs, shapes that are not tile multiples;
* GPU (``cuda``): against torch in float64.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def split_k_gemm(M, N, K, c, bM, bN, threads, policy, rs=True, c_shared=None):
    """``C = A @ B^T`` (A (M, K), B (N, K)) per block as two gemms into one accumulator:
    columns ``c:`` of A from a shared tile against the K slice ``B_s[:, c:]``, then columns
    ``:c`` of A (a register fragment with ``rs``, else a shared tile) against ``B_s[:, :c]``.
    ``c_shared`` (with ``rs=False``) reads the second gemm's A as the K slice
    ``A_all[:, :c]`` of a whole shared copy of A instead."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((N, K), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, K - c), "float16")
            B_s = T.alloc_shared((bN, K), "float16")
            acc = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM : (by + 1) * bM, c:], A_s)
            T.copy(B[bx * bN : (bx + 1) * bN, :], B_s)
            T.gemm(A_s, B_s[:, c:], acc, transpose_B=True, policy=policy, clear_accum=True)
            if rs:
                A_r = T.alloc_fragment((bM, c), "float16")
                T.copy(A[by * bM : (by + 1) * bM, :c], A_r)
                T.gemm(A_r, B_s[:, :c], acc, transpose_B=True, policy=policy)
            elif c_shared:
                A_all = T.alloc_shared((bM, K), "float16")
                T.copy(A[by * bM : (by + 1) * bM, :], A_all)
                T.gemm(A_all[:, :c], B_s[:, :c], acc, transpose_B=True, policy=policy)
            else:
                A_l = T.alloc_shared((bM, c), "float16")
                T.copy(A[by * bM : (by + 1) * bM, :c], A_l)
                T.gemm(A_l, B_s[:, :c], acc, transpose_B=True, policy=policy)
            T.copy(acc, C[by * bM : (by + 1) * bM, bx * bN : (bx + 1) * bN])

    return main


def _gemms(text):
    """The wgmma instruction (without template arguments) of each gemm issue, in order."""
    out = []
    for chunk in text.split('"tl::wgmma_commit"')[:-1]:
        found = re.findall(r'"(tl::wgmma_m64n\w+)<', chunk)
        out.append(found[-1] if found else None)
    return out


# ------------------------------------------------------------------------- dispatch
def test_k_slices_lower_to_wgmma_and_chain_into_one_wait():
    text = pipeline.lower(split_k_gemm(128, 64, 192, 64, 128, 64, 256, 1), SM90A).script()
    assert "mma_m16n8k16" not in text
    assert _gemms(text) == ["tl::wgmma_m64n64k16_ss", "tl::wgmma_m64n64k16_rs"]
    # one wait after both commits: the RS gemm is issued while the SS group is in flight
    first_commit = text.index("tl::wgmma_commit")
    assert (
        "tl::wgmma_wait"
        not in text[first_commit : text.index("tl::wgmma_commit", first_commit + 1)]
    )


def test_chain_compares_shapes_not_forms():
    """Same shape and input type chain (SS or RS form alike); another N or type does not."""
    from tilelang.backends.cuda.passes.wgmma_wait_sinking import _instr_shape

    assert _instr_shape("tl::wgmma_m64n32k16_ss<false, 0, 0>") == _instr_shape(
        "tl::wgmma_m64n32k16_rs<false, 0>"
    )
    assert _instr_shape("tl::wgmma_m64n32k16_rs<false, 0>") != _instr_shape(
        "tl::wgmma_m64n64k16_rs<false, 0>"
    )
    assert _instr_shape("tl::wgmma_m64n32k16_ss<true, 0, 0>") != _instr_shape(
        "tl::wgmma_m64n32k16_ss<false, 0, 0>"
    )


def test_k_slice_rule():
    """Rows whole; the K slice may start at a multiple of the instruction's K only (a
    descriptor starts on a k16 step), and only when the caller says the operand is K-major
    (slicing an MN-major operand along K would cut its column blocks)."""
    from tilelang.ops.gemm.wgmma_cuda import _whole_tile

    def view(begins, extents, shape=(64, 64)):
        return type("View", (), {"begins": begins, "extents": extents, "shape": list(shape)})

    sliced = view([0, 16], [64, 48])
    assert _whole_tile(sliced, 16) and not _whole_tile(sliced) and not _whole_tile(sliced, 32)
    assert not _whole_tile(view([0, 8], [64, 48]), 16)
    assert not _whole_tile(view([16, 0], [48, 64]), 16)  # rows cut
    assert _whole_tile(view([0, 0], [64, 64]))


# ------------------------------------------------------------------------- emulated
CASES = [
    # M, N, K, c, bM, bN, threads, policy
    (100, 90, 192, 64, 64, 64, 128, 0),
    (130, 70, 160, 48, 64, 64, 256, 2),  # FullCol: register A replicated over 2 warpgroups
    (128, 100, 256, 128, 128, 64, 256, 1),  # FullRow
    (64, 64, 96, 16, 64, 64, 128, 0),
]


@pytest.mark.parametrize("mode", ["late_reads", "late_writes"])
@pytest.mark.parametrize("M,N,K,c,bM,bN,threads,policy", CASES)
def test_split_k_gemm_emulated(M, N, K, c, bM, bN, threads, policy, mode, rng):
    func = split_k_gemm(M, N, K, c, bM, bN, threads, policy)
    lowered = pipeline.lower(func, SM90A)
    assert "k16_rs" in lowered.script() and "mma_m16n8k16" not in lowered.script()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    c_out = np.full((M, N), np.nan, np.float32)
    (_, _, got), _ = emulate_rs(lowered, a, b, c_out, mode=mode, race=True)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("c", [32, 80])
def test_shared_a_k_slice_emulated(c, rng):
    """Both operands K slices of shared tiles (SS form, A's slice starting at column 0)."""
    M, N, K = 70, 64, 160
    func = split_k_gemm(M, N, K, c, 64, 64, 128, 0, rs=False, c_shared=True)
    lowered = pipeline.lower(func, SM90A)
    text = lowered.script()
    assert "mma_m16n8k16" not in text and text.count("tl::wgmma_commit") == 2
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((N, K)).astype(np.float16)
    (_, _, got), _ = emulate_rs(lowered, a, b, np.full((M, N), np.nan, np.float32), race=True)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-3,
                               atol=1e-3)  # fmt: skip


# ------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("M,N,K,c,bM,bN,threads,policy", CASES)
def test_split_k_gemm_gpu(M, N, K, c, bM, bN, threads, policy):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    kernel = load_kernel(pipeline.build(split_k_gemm(M, N, K, c, bM, bN, threads, policy),
                                        {"kind": "cuda"}))  # fmt: skip
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(N, K, device="cuda").half()
    out = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, b, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), a.double() @ b.double().T, rtol=1e-3, atol=1e-3)
