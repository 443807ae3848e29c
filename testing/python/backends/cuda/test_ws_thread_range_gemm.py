"""``T.gemm`` and ``T.reduce_*`` under ``T.ws(g)`` / ``if tx < 128:`` (upstream's behaviour).

The op is planned over the threads the scope keeps, ``[lo, hi)``: its layout rule and its
lowering see a block of ``hi - lo`` threads (fragments laid on ``[lo, hi)``, warp and
warpgroup indices of ``t - lo``, the reduce's cross-warp exchange among those threads,
barriers inside the branch ``bar.sync id, hi - lo``). mma.sync needs whole warps, wgmma
whole warpgroups: anything else is a CompileError at the gemm's line. Tiles a gemm of one
range reads and other threads write get a proxy fence after the write (sm_90a; the race
check of the emulator finds the cross-proxy hazard without it).

The programs are the examples of ``examples/warp_specialize/``, checked against float64
references on shapes that are not tile multiples: CPU backend, the CUDA emulator with its
race check (mma.sync on sm_80; wgmma on sm_90a through the wgmma machine of
``test_gemm_wgmma_rs.py``), nvcc for sm_90a (SASS: HGMMA when cuobjdump is installed), and
the GPU (``@pytest.mark.cuda``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from example_loader import load_example

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402 - the wgmma (SS and RS) machine

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
THIS_FILE = Path(__file__).name


def _example(name):
    return load_example(f"warp_specialize/{name}.py")


def split_n(M, N, K):
    return _example("example_ws_gemm_split_n").matmul_ws_split_n.get_tir(M, N, K)


def producer_consumer(M, N, K):
    return _example("example_ws_gemm_producer_consumer").matmul_producer_consumer.get_tir(M, N, K)


def logsumexp(M, N, D):
    return _example("example_ws_logsumexp").row_logsumexp.get_tir(M, N, D)


def _gemm_inputs(rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def _lse_inputs(rng, M, N, D):
    q = rng.standard_normal((M, D)).astype(np.float16)
    k = rng.standard_normal((N, D)).astype(np.float16)
    s = q.astype(np.float64) @ k.astype(np.float64).T
    top = s.max(axis=1)
    return q, k, top + np.log(np.exp(s - top[:, None]).sum(axis=1))


def _run(func, target, *arrays):
    """The arrays after running ``func``: emulated (race check) for a CUDA target, else
    compiled for the CPU."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    if target == "cpu":
        tensors = [torch.from_numpy(a) for a in arrays]
        tilelang.compile(func, target="cpu")(*tensors)
        return [t.numpy() for t in tensors]
    if target["arch"] == "sm_90a":
        return emulate_rs(pipeline.lower(func, target), *arrays, race=True)[0]
    return emulate(pipeline.lower(func, target), *arrays, race_check=True)


TARGETS = pytest.mark.parametrize("target", ["cpu", SM80, SM90A], ids=["cpu", "sm_80", "sm_90a"])


# ------------------------------------------------------------- the examples, three ways
@TARGETS
def test_split_n(rng, target):
    """Two T.ws scopes, each a warpgroup's T.copy of its B half and its own T.gemm."""
    M, N, K = 136, 200, 72
    a, b, ref = _gemm_inputs(rng, M, N, K)
    c = _run(split_n(M, N, K), target, a, b, np.zeros((M, N), np.float16))[2]
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("options", [{}, {"tl.disable_wgmma": True}], ids=["wgmma", "mma"])
def test_producer_consumer_emulated(rng, options):
    """An mbarrier ring between a loading and a multiplying warpgroup (sm_90a; the gemm on
    the consumer's 128 threads with wgmma, or its 4 warps with mma.sync)."""
    M, N, K = 200, 136, 200
    a, b, ref = _gemm_inputs(rng, M, N, K)
    low = pipeline.lower(producer_consumer(M, N, K), SM90A, options)
    c = np.zeros((M, N), np.float16)
    if options:
        c = emulate(low, a, b, c, race_check=True)[2]
    else:
        c = emulate_rs(low, a, b, c, race=True)[0][2]
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


def test_producer_consumer_cpu_is_refused():
    """The CPU backend runs a block's threads one after another: the consumer's wait for
    the producer's arrival cannot be run, and the error names the op and its line."""
    with pytest.raises(errors.CompileError, match="not supported on the CPU backend") as err:
        tilelang.compile(producer_consumer(64, 64, 64), target="cpu")
    assert "example_ws_gemm_producer_consumer.py:" in str(err.value)


@TARGETS
def test_logsumexp(rng, target):
    """gemm + reduce_max + reduce_sum per warpgroup (if tx < 128 / else), merged by the
    block; 300 keys over blocks of 128 (the last one masked), 100 rows of blocks of 64."""
    M, N, D = 100, 300, 64
    q, k, ref = _lse_inputs(rng, M, N, D)
    lse = _run(logsumexp(M, N, D), target, q, k, np.zeros(M, np.float32))[2]
    np.testing.assert_allclose(lse, ref, rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------- thread ranges
def range_gemm(lo, hi, threads=256, M=64, N=64, K=32):
    """``C = A @ B`` by the threads ``lo <= tx < hi`` of the block (C's fragment on them)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            a = T.alloc_shared((M, K), "float16")
            b = T.alloc_shared((K, N), "float16")
            c = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            T.copy(B, b)
            if tx >= lo and tx < hi:  # noqa: SIM300
                T.gemm(a, b, c, clear_accum=True)  # the gemm's line
                T.copy(c, C)

    return main


@pytest.mark.parametrize("lo,hi", [(64, 192), (32, 96), (224, 256)])
def test_mma_on_whole_warps_of_a_range(rng, lo, hi):
    """mma.sync over the warps of the range, wherever it starts (emulated, sm_80)."""
    a, b, ref = _gemm_inputs(rng, 64, 64, 32)
    got = _run(range_gemm(lo, hi), SM80, a, b, np.zeros((64, 64), np.float32))[2]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "lo,hi,target,pattern",
    [
        (16, 144, SM80, r"threads 16\.\.143 .* not whole warps: mma\.sync"),
        (64, 192, SM90A, r"threads 64\.\.191 .* not whole warpgroups \(128 threads\): wgmma"),
    ],
    ids=["mma_part_warps", "wgmma_part_warpgroups"],
)
def test_misaligned_range_is_refused(lo, hi, target, pattern):
    with pytest.raises(errors.CompileError, match=pattern) as err:
        pipeline.lower(range_gemm(lo, hi), target)
    line = int(str(err.value).split(f"{THIS_FILE}:")[1].split(":")[0])
    assert "the gemm's line" in Path(__file__).read_text().splitlines()[line - 1]


def test_wgmma_range_issues_its_warpgroup_only():
    """sm_90a, threads 128..255: one warpgroup's wgmma (64 rows: one m64 per k16 step) and
    no __syncthreads inside the branch (the other threads never reach it)."""
    import tvm_ffi
    from tvm_tirx import ir

    low = pipeline.lower(range_gemm(128, 256), SM90A)
    branches = []

    def visit(stmt):
        if "wgmma_m64" in str(stmt.then_case) and "128" in str(stmt.condition):
            branches.append(str(stmt.then_case))

    tvm_ffi.structural_walk(low.body, [(ir.If, visit)])
    assert branches, "no branch issuing the wgmma"
    inner = branches[-1]  # the innermost such if: the range's branch
    assert inner.count("wgmma_m64n64k16_ss") == 32 // 16  # 64 rows: one m64 per k16 step
    assert "__syncthreads" not in inner


@TARGETS
def test_ws_of_two_warpgroups(rng, target):
    """``T.ws(1, 2)`` of a 384-thread block is the range 128..383: the gemm runs on its
    two warpgroups (8 warps), the rest of the block idles."""

    @T.prim_func
    def main(
        A: T.Tensor((64, 48), "float16"),
        B: T.Tensor((48, 80), "float16"),
        C: T.Tensor((64, 80), "float32"),
    ):
        with T.Kernel(1, threads=384):
            a = T.alloc_shared((64, 48), "float16")
            b = T.alloc_shared((48, 80), "float16")
            c = T.alloc_fragment((64, 80), "float32")
            T.copy(A, a)
            T.copy(B, b)
            with T.ws(1, 2):
                T.gemm(a, b, c, clear_accum=True)
                T.copy(c, C)

    a, b, ref = _gemm_inputs(rng, 64, 80, 48)
    got = _run(main, target, a, b, np.zeros((64, 80), np.float32))[2]
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("target", ["cpu", SM80], ids=["cpu", "sm_80"])
def test_runtime_clear_accum(rng, target):
    """``clear_accum=(j == 0)`` in a T.unroll: the first gemm overwrites C (the condition
    was read as False, so C kept its 7.0 fill)."""

    @T.prim_func
    def main(
        A: T.Tensor((64, 32), "float16"),
        B: T.Tensor((32, 64), "float16"),
        C: T.Tensor((64, 64), "float32"),
    ):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), "float16")
            b = T.alloc_shared((32, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.fill(c, 7.0)
            for j in T.unroll(3):
                T.gemm(a, b, c, clear_accum=(j == 0))
            T.copy(c, C)

    a, b, ref = _gemm_inputs(rng, 64, 64, 32)
    got = _run(main, target, a, b, np.zeros((64, 64), np.float32))[2]
    np.testing.assert_allclose(got, 3 * ref, rtol=1e-3, atol=1e-3)


# ------------------------------------------------------------------------ nvcc, SASS
def _build(func, arch="sm_90a"):
    return pipeline.build(func, {"kind": "cuda", "arch": arch}, {}, compiler="nvcc")


@needs_nvcc
@pytest.mark.parametrize(
    "make,args",
    [
        (split_n, (200, 300, 136)),
        (producer_consumer, (1000, 1000, 1000)),
        (logsumexp, (200, 300, 64)),
    ],
    ids=["split_n", "producer_consumer", "logsumexp"],
)
def test_nvcc_sm90a(make, args):
    art = _build(make(*args))
    src = art.get_kernel_source()
    assert art.device_binary and "tl::wgmma_m64" in src
    assert "tl::named_barrier_sync" in src  # the branches synchronise on their own


@needs_nvcc
def test_sass_hgmma():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_tma import _sass  # noqa: PLC0415 - sibling helper (cuobjdump, skips without)

    from tilelang.tools.sass_loops import main_loop, opcode_counts

    sass = _sass(_build(split_n(1000, 1000, 1000)))
    assert "HGMMA" in sass
    loop = main_loop(sass)
    assert loop is not None and any(op.startswith("HGMMA") for op in opcode_counts(loop))


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("M,N,K", [(200, 300, 136), (1000, 1000, 1000)])
def test_split_n_gpu(M, N, K):
    _example("example_ws_gemm_split_n").main(M, N, K, device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,K", [(1000, 1000, 1000), (1024, 1024, 4096)])
def test_producer_consumer_gpu(M, N, K):
    _example("example_ws_gemm_producer_consumer").main(M, N, K)


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,D", [(200, 300, 64), (1000, 4000, 128)])
def test_logsumexp_gpu(M, N, D):
    _example("example_ws_logsumexp").main(M, N, D, device="cuda")
