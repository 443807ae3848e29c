"""``T.atomic_add(global, shared, use_tma=True)`` (``backends/cuda/passes/tma_reduce.py``):
the bulk tensor reduction on sm_90a, emulated with tails against float64; the fallbacks to
ordinary atomics and their ``tl.tma`` notes; upstream's compile errors (CPU, sm_80, element
types); the PTX through ptxas and the SASS (UTMAREDG); on the GPU against torch."""

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
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import EmulationError, emulate

sys.path.insert(0, str(Path(__file__).parent))
from test_tma import _sass, _tool  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
       "int32": np.int32, "uint32": np.uint32, "uint64": np.uint64}  # fmt: skip


def _notes(func):
    return [str(x) for x in func.attrs["tl.tma"]] if "tl.tma" in func.attrs else []


def tile_sum(M, N, bM, bN, reps=2, dtype="float32", use_tma=True, threads=128):
    """Y += reps * X, one (bM, bN) tile per block: X -> shared S, then ``reps`` tile atomics
    of S into Y (every block adds its own tile; ``reps`` makes the reduce re-read S)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            T.copy(X[by * bM, bx * bN], S)
            for _ in range(reps):
                T.atomic_add(Y[by * bM : (by + 1) * bM, bx * bN : (bx + 1) * bN], S,
                             use_tma=use_tma)  # fmt: skip

    return main


def column_sum(M, N, bM, bN, dtype="float32"):
    """Y[0:bM, :] += sum over row blocks of X's blocks: a loop that rewrites the shared tile
    after each reduce (the barrier after the reduce's wait is the compiler's), every block
    adding into the same rows (the reduce is atomic across blocks)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((bM, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), 2, threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            F = T.alloc_fragment((bM, bN), dtype)
            for k in T.serial(T.ceildiv(M, bM * 2)):
                T.copy(X[(2 * k + by) * bM, bx * bN], F)
                for i, j in T.Parallel(bM, bN):
                    F[i, j] = F[i, j] * 2
                T.copy(F, S)
                T.atomic_add(Y[0:bM, bx * bN : (bx + 1) * bN], S, use_tma=True)

    return main


def _rand(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 50, size=shape).astype(_NP[dtype])
    return rng.standard_normal(shape).astype(_NP[dtype])


def _tol(dtype):
    return {"float32": 1e-5, "float16": 2e-2, "bfloat16": 1e-1}.get(dtype, 0)


# --------------------------------------------------------------------------- emulated
@pytest.mark.parametrize("M,N,bM,bN", [(100, 72, 64, 32), (130, 200, 64, 64), (40, 8, 64, 32)])
def test_reduce_emulated_with_tails(M, N, bM, bN):
    """Tiles not dividing the tensor: the boxes past its end are clipped (the rows after Y
    in the same storage are untouched); race checking on (fence, barrier, wait)."""
    f = pipeline.lower(tile_sum(M, N, bM, bN, reps=3), SM90A)
    notes = _notes(f)
    assert any(n.startswith("atomic_add S -> Y: TMA reduce") for n in notes), notes
    text = str(f)
    assert "tl::tma_store_add_2d" in text and "AtomicAdd" not in text
    fence = text.index("tl::fence_proxy_async_shared")
    assert fence < text.index("tl::tma_store_add_2d") < text.index("tl::tma_store_commit")
    assert text.index("tl::tma_store_commit") < text.index("tl::tma_store_wait_read<0>")
    x, y = _rand((M, N), "float32", 1), _rand((M, N), "float32", 2)
    want = y.astype(np.float64) + 3 * x.astype(np.float64)
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint32", "uint64"])
def test_reduce_element_types_emulated(dtype):
    """Every type ``cp.reduce .add`` takes (the map's element type), tails in both axes."""
    M, N = 70, 96 if dtype != "uint64" else 36
    f = pipeline.lower(tile_sum(M, N, 32, 32, reps=2, dtype=dtype), SM90A)
    assert any("TMA reduce" in n for n in _notes(f)), _notes(f)
    x, y = _rand((M, N), dtype, 3), _rand((M, N), dtype, 4)
    want = y.astype(np.float64) + 2 * x.astype(np.float64)
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=_tol(dtype), atol=_tol(dtype))


def test_rewritten_tile_in_a_loop_emulated():
    """The tile is written again after each reduce: the emulator's race checker sees the
    barrier between the elected thread's (waited) read and the next writes, and the fence
    before the reduce; the blocks' reduces into the same rows all land."""
    M, N, bM, bN = 300, 96, 32, 64
    f = pipeline.lower(column_sum(M, N, bM, bN), SM90A)
    x = _rand((M, N), "float32", 5)
    y = _rand((bM, N), "float32", 6)
    pad = np.zeros((-(-M // (2 * bM)) * 2 * bM, N))
    pad[:M] = x
    want = y.astype(np.float64) + 2 * pad.reshape(-1, bM, N).sum(axis=0)
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


def test_rank4_region_of_a_bshd_tensor_emulated():
    """dQ[b, rows, h, :] += tile (upstream's GQA backward): a rank-4 map, box (1, R, 1, C)."""
    B, S, H, D, bN = 2, 50, 3, 64, 32

    @T.prim_func
    def main(X: T.Tensor((B, S, H, D), "float32"), Y: T.Tensor((B, S, H, D), "float32")):
        with T.Kernel(H, T.ceildiv(S, bN), B, threads=128) as (bx, by, bz):
            Sh = T.alloc_shared((bN, D), "float32")
            T.copy(X[bz, by * bN : (by + 1) * bN, bx, :], Sh)
            T.atomic_add(Y[bz, by * bN : (by + 1) * bN, bx, :], Sh, use_tma=True)

    f = pipeline.lower(main, SM90A)
    assert "tl::tma_store_add_4d" in str(f)
    x, y = _rand((B, S, H, D), "float32", 7), _rand((B, S, H, D), "float32", 8)
    want = y.astype(np.float64) + x
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_emulator_catches_a_missing_fence(monkeypatch):
    """Without ``fence.proxy.async`` the reduce may read the tile's old bytes: the emulator's
    race checker refuses it (so the tests above do check the fence)."""
    from tilelang.backends.cuda.passes import tma_store

    real = tma_store._call
    monkeypatch.setattr(
        tma_store, "_call", lambda name, *a: real("__syncthreads" if "fence" in name else name, *a)
    )
    f = pipeline.lower(tile_sum(64, 64, 64, 64, reps=1), SM90A)
    x = np.ones((64, 64), np.float32)
    with pytest.raises(Exception, match="cross-proxy race"):
        emulate(f, x, np.zeros_like(x), race_check=True)


def test_emulator_catches_a_missing_wait(monkeypatch):
    from tilelang.backends.cuda.passes import tma_store

    real = tma_store._call
    monkeypatch.setattr(
        tma_store,
        "_call",
        lambda name, *a: real("tl::tma_store_commit" if "wait_read" in name else name, *a),
    )
    f = pipeline.lower(tile_sum(64, 64, 64, 64, reps=1), SM90A)
    x = np.ones((64, 64), np.float32)
    with pytest.raises(EmulationError, match="may still read shared memory"):
        emulate(f, x, np.zeros_like(x))


# ------------------------------------------------------------ tl.tma_reduce_defer_wait
DEFER = {"tl.tma_reduce_defer_wait": True}


def staged_rows(M, N, bM, bN):
    """Y[0:bM, :] += 2 * sum of X's row blocks through a second tile T: every iteration
    writes T and reads it (its own barriers) before it writes S, so a barrier lies between
    one iteration's reduce of S and the next iteration's writes of S that does not order the
    elected thread's (deferred) wait."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((bM, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), threads=128) as bx:
            Tt = T.alloc_shared((bM, bN), "float32")
            S = T.alloc_shared((bM, bN), "float32")
            F = T.alloc_fragment((bM, bN), "float32")
            for k in T.serial(T.ceildiv(M, bM)):
                T.copy(X[k * bM, bx * bN], Tt)
                for i, j in T.Parallel(bM, bN):
                    F[i, j] = Tt[bM - 1 - i, j] * 2
                T.copy(F, S)
                T.atomic_add(Y[0:bM, bx * bN : (bx + 1) * bN], S, use_tma=True)

    return main


def _staged_rows_want(x, y, bM):
    M, N = x.shape
    pad = np.zeros((-(-M // bM) * bM, N))
    pad[:M] = x
    return y.astype(np.float64) + 2 * pad.reshape(-1, bM, N)[:, ::-1].sum(axis=0)


@pytest.mark.parametrize("func,args", [(column_sum, (300, 96, 32, 64)),
                                       (staged_rows, (200, 96, 32, 64))])  # fmt: skip
def test_deferred_wait_emulated(func, args):
    """The wait (naming the tile) sits right before the next iteration's first access of the
    tile, the barrier after it, and once more after the loop; race-checked, exact sums."""
    M, N, bM, _ = args
    f = pipeline.lower(func(*args), SM90A, DEFER)
    text = str(f)
    waits = [m.start() for m in re.finditer(r"tma_store_wait_read<0>\", T.address_of\(S", text)]
    assert len(waits) == 2, text
    assert text.index("__syncthreads", waits[0]) < text.index("tl::tma_store_add_2d")
    x = _rand((M, N), "float32", 15)
    y = _rand((bM, N), "float32", 16)
    if func is column_sum:
        pad = np.zeros((-(-M // (2 * bM)) * 2 * bM, N))
        pad[:M] = x
        want = y.astype(np.float64) + 2 * pad.reshape(-1, bM, N).sum(axis=0)
    else:
        want = _staged_rows_want(x, y, bM)
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)


def test_deferred_wait_without_its_tile_operand_is_a_race(monkeypatch):
    """A deferred wait that does not name the tile: ``insert_sync`` counts the tile read at
    the reduce, so the barrier after the reads of the other tile is taken as ordering it and
    none comes between the wait and the next writes of S. The emulator (the reduce's read
    lasting until its wait) reports the race: the operand is what keeps the kernel right."""
    from tilelang.backends.cuda.passes import tma_reduce

    monkeypatch.setattr(tma_reduce, "_tile_wait",
                        lambda tile, tx: tma_reduce.ir.If(tx == 0, tma_reduce.extern_stmt(
                            tma_reduce.WAIT_READ), None))  # fmt: skip
    f = pipeline.lower(staged_rows(200, 96, 32, 64), SM90A, DEFER)
    x = _rand((200, 96), "float32", 17)
    with pytest.raises(Exception, match="race"):
        emulate(f, x, np.zeros((32, 96), np.float32), race_check=True)


def test_deferred_wait_builds_with_nvcc():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    art = pipeline.build(staged_rows(200, 96, 32, 64), SM90A, DEFER, compiler="nvcc")
    assert "tl::tma_store_wait_read<0>((&(S[0])))" in art.kernel_source.replace(
        " ", ""
    ) or re.search(r"tma_store_wait_read<0>\(\(?&\(?S", art.kernel_source)


def gemm_prefix_sums(M, N, K, bM, bN, bK, stages):
    """C += (A[:, :k+1 blocks] @ B[:k+1 blocks]) for every k: the accumulator goes through
    a shared tile and a TMA reduce in every iteration of a pipelined wgmma loop."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bK), "float16")
            Bs = T.alloc_shared((bK, bN), "float16")
            Cs = T.alloc_shared((bM, bN), "float32")
            Cl = T.alloc_fragment((bM, bN), "float32")
            T.clear(Cl)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], As)
                T.copy(B[k * bK, bx * bN], Bs)
                T.gemm(As, Bs, Cl)
                T.copy(Cl, Cs)
                T.atomic_add(C[by * bM : (by + 1) * bM, bx * bN : (bx + 1) * bN], Cs,
                             use_tma=True)  # fmt: skip

    return main


@pytest.mark.parametrize(
    "configs,stages,loop",
    [(None, 2, "warp-specialized"), ({"tl.disable_warp_specialized": True}, 2, "cp.async"),
     (DEFER, 3, "warp-specialized"), ({"tl.disable_warp_specialized": True, **DEFER}, 1, None)],
    ids=["ws", "cp_async", "ws_deferred", "cp_async_deferred_1_stage"],
)  # fmt: skip
def test_reduce_in_pipelined_wgmma_loops_emulated(configs, stages, loop):
    """The reduce inside warp-specialized (TMA loads, consumer barriers) and cp.async
    pipelines, immediate or deferred wait: race-checked wgmma emulation, exact prefix sums."""
    from test_gemm_wgmma_rs import emulate_rs

    from tilelang.testing.cuda_emulator_race import RaceChecker

    M, N, K, bK = 100, 72, 96, 32
    f = pipeline.lower(gemm_prefix_sums(M, N, K, 64, 64, bK, stages), SM90A, configs)
    notes = _notes(f)
    assert any("atomic_add Cs -> C: TMA reduce" in n for n in notes), notes
    assert loop is None or any(loop in n for n in notes), notes
    rng = np.random.default_rng(18)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    want = sum(a[:, : (k + 1) * bK].astype(np.float64) @ b[: (k + 1) * bK].astype(np.float64)
               for k in range(-(-K // bK)))  # fmt: skip
    (_, _, c), _ = emulate_rs(f, a, b, np.zeros((M, N), np.float32), race=RaceChecker())
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


# -------------------------------------------------------------------------- fallbacks
def _fallback(f, reason):
    notes = _notes(f)
    assert any(n.startswith("atomic_add") and "ordinary atomics" in n and reason in n
               for n in notes), notes  # fmt: skip
    assert "tma_store_add" not in str(f) and "tl::AtomicAdd" in str(f)


def test_default_keeps_the_atomics():
    """``use_tma=False`` (the default): today's per-element atomics, no note."""
    f = pipeline.lower(tile_sum(100, 72, 64, 32, use_tma=False), SM90A)
    assert "tma_store_add" not in str(f) and "tl::AtomicAdd" in str(f)
    assert not any(n.startswith("atomic_add") for n in _notes(f))


def test_fallback_fragment_source_emulated():
    M, N, bM, bN = 90, 40, 64, 32

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            F = T.alloc_fragment((bM, bN), "float32")
            T.copy(X[by * bM, bx * bN], F)
            T.atomic_add(Y[by * bM : (by + 1) * bM, bx * bN : (bx + 1) * bN], F, use_tma=True)

    f = pipeline.lower(main, SM90A)
    _fallback(f, "fragment")
    x, y = _rand((M, N), "float32", 9), _rand((M, N), "float32", 10)
    want = y.astype(np.float64) + x
    emulate(f, x, y)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_fallback_unaligned_rows_emulated():
    """N = 100 halves: 200-byte rows are no 16-byte multiple (no tensor map): the atomics."""
    M, N = 64, 100
    f = pipeline.lower(tile_sum(M, N, 64, 32, reps=1, dtype="float16"), SM90A)
    _fallback(f, "global byte stride")
    x, y = _rand((M, N), "float16", 11), _rand((M, N), "float16", 12)
    want = y.astype(np.float64) + x.astype(np.float64)
    emulate(f, x, y)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dynamic_cols", [False, True])
def test_dynamic_shapes_emulated(dynamic_cols):
    """Dynamic rows: the map's dims are run-time values (TMA); dynamic columns: the row
    stride is not provably 16-byte aligned, so the atomics (and the note says why)."""
    rows = T.dynamic("m")
    cols = T.dynamic("n") if dynamic_cols else 72

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((rows, cols), "float32")):
        with T.Kernel(T.ceildiv(cols, 32), T.ceildiv(rows, 64), threads=128) as (bx, by):
            S = T.alloc_shared((64, 32), "float32")
            T.copy(X[by * 64, bx * 32], S)
            T.atomic_add(Y[by * 64 : (by + 1) * 64, bx * 32 : (bx + 1) * 32], S, use_tma=True)

    f = pipeline.lower(main, SM90A)
    if dynamic_cols:
        _fallback(f, "not provably a multiple of 16")
    else:
        assert any("TMA reduce" in n for n in _notes(f)), _notes(f)
    x, y = _rand((90, 72), "float32", 19), _rand((90, 72), "float32", 20)
    want = y.astype(np.float64) + x
    emulate(f, x, y, race_check=True)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_fallback_disable_tma_and_partial_tile():
    f = pipeline.lower(tile_sum(64, 64, 64, 64), SM90A, {"tl.disable_tma_lower": True})
    _fallback(f, "tl.disable_tma_lower=True")

    @T.prim_func
    def part(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float32")
            T.copy(X, S)
            T.atomic_add(Y, S[0:32, :], use_tma=True)

    f = pipeline.lower(part, SM90A)
    _fallback(f, "whole shared tile")
    x, y = _rand((64, 64), "float32", 13), _rand((32, 64), "float32", 14)
    want = y + x[:32].astype(np.float64)
    emulate(f, x, y)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- errors
def test_pre_hopper_target_is_an_error():
    """As upstream (``test_tma_atomic_add_rejects_pre_hopper_target``)."""
    with pytest.raises(errors.CompileError, match=r"requires a CUDA target with TMA support \(SM90\+\)"):  # fmt: skip
        pipeline.lower(tile_sum(64, 64, 64, 64), {"kind": "cuda", "arch": "sm_80"})


def test_cpu_target_is_an_error():
    """As upstream (``test_cpu_atomic_add_use_tma_rejected``): no cp.reduce on the CPU."""
    with pytest.raises(Exception, match="use_tma"):
        tilelang.compile(tile_sum(64, 64, 64, 64), target="cpu")


@pytest.mark.parametrize("dtype", ["float64", "int64", "int16"])
def test_unsupported_element_type_is_an_error(dtype):
    """As upstream (``test_tma_atomic_add_rejects_unsupported_dtype``)."""
    with pytest.raises(errors.CompileError, match=f"TMA atomic add does not support dtype {dtype}"):  # fmt: skip
        pipeline.lower(tile_sum(16, 16, 16, 16, dtype=dtype), SM90A)


def test_scalar_value_is_an_error():
    with pytest.raises(Exception, match="use_tma=True\\) needs a tile value"):

        @T.prim_func
        def main(Y: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32):
                T.atomic_add(Y[3], 1.0, use_tma=True)


# ------------------------------------------------------------------ source and SASS
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ptx_assembles_to_utmaredg(dtype):
    """nvcc/ptxas for sm_90a accept the reduce; its SASS has UTMAREDG (and the proxy fence,
    the bulk commit), no per-element global reductions (RED/ATOM)."""
    if shutil.which("nvcc") is None or _tool("cuobjdump") is None:
        pytest.skip("nvcc / cuobjdump not installed")
    art = pipeline.build(tile_sum(200, 96, 64, 32, dtype=dtype), SM90A, compiler="nvcc")
    assert "const __grid_constant__ CUtensorMap Y_tmap" in art.kernel_source
    assert "tl::tma_store_add_2d(" in art.kernel_source
    sass = _sass(art)
    assert "UTMAREDG.2D.ADD" in sass and "FENCE.VIEW.ASYNC.S" in sass
    assert "UTMACMDFLUSH" in sass
    assert not re.search(r"\s(RED|ATOM)G?\.E\.ADD", sass), sass


# -------------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N", [(256, 128), (200, 72)])
def test_reduce_gpu(M, N, dtype):
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    kernel = tilelang.compile(tile_sum(M, N, 64, 32, reps=3, dtype=dtype), target="cuda")
    assert "tma_store_add_2d" in kernel.get_kernel_source()
    tdtype = getattr(torch, dtype)
    x = torch.randn(M, N, device="cuda").to(tdtype)
    y = torch.randn(M, N, device="cuda").to(tdtype)
    want = y.double() + 3 * x.double()
    kernel(x, y)
    torch.testing.assert_close(y.double(), want, rtol=_tol(dtype), atol=_tol(dtype) * 4)


@pytest.mark.cuda
def test_many_blocks_into_one_tile_gpu():
    """Blocks reduce concurrently into the same rows (atomic across blocks)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs an sm_90 GPU")
    M, N, bM, bN = 4000, 96, 32, 64
    kernel = tilelang.compile(column_sum(M, N, bM, bN), target="cuda")
    x = torch.randn(M, N, device="cuda")
    y = torch.randn(bM, N, device="cuda")
    pad = torch.zeros(-(-M // (2 * bM)) * 2 * bM, N, device="cuda", dtype=torch.float64)
    pad[:M] = x.double()
    want = y.double() + 2 * pad.reshape(-1, bM, N).sum(0)
    kernel(x, y)
    torch.testing.assert_close(y.double(), want, rtol=1e-4, atol=1e-3)


def two_tiles_reduced(M, N, bM, bN):
    """Two tiles reduced in one loop: Y += sum of X's row blocks, Z += 3 * that. The
    deferred waits of both go before each tile's first access and after the loop."""

    @T.prim_func
    def main(
        X: T.Tensor((M, N), "float32"),
        Y: T.Tensor((bM, N), "float32"),
        Z: T.Tensor((bM, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), threads=128) as bx:
            S1 = T.alloc_shared((bM, bN), "float32")
            S2 = T.alloc_shared((bM, bN), "float32")
            F = T.alloc_fragment((bM, bN), "float32")
            for k in T.serial(T.ceildiv(M, bM)):
                T.copy(X[k * bM, bx * bN], F)
                T.copy(F, S1)
                for i, j in T.Parallel(bM, bN):
                    F[i, j] = F[i, j] * 3
                T.copy(F, S2)
                T.atomic_add(Y[0:bM, bx * bN : (bx + 1) * bN], S1, use_tma=True)
                T.atomic_add(Z[0:bM, bx * bN : (bx + 1) * bN], S2, use_tma=True)

    return main


def test_deferred_waits_of_two_tiles_emulated():
    M, N, bM, bN = 150, 96, 32, 64
    f = pipeline.lower(two_tiles_reduced(M, N, bM, bN), SM90A, DEFER)
    text = str(f)
    for tile in ("S1", "S2"):
        waits = re.findall(rf"tma_store_wait_read<0>\", T.address_of\({tile}", text)
        assert len(waits) == 2, text  # before the tile's first write, and after the loop
    x, y, z = (
        _rand((M, N), "float32", 21),
        _rand((bM, N), "float32", 22),
        _rand((bM, N), "float32", 23),
    )
    pad = np.zeros((-(-M // bM) * bM, N))
    pad[:M] = x
    block_sum = pad.reshape(-1, bM, N).sum(axis=0)
    want_y, want_z = y.astype(np.float64) + block_sum, z.astype(np.float64) + 3 * block_sum
    emulate(f, x, y, z, race_check=True)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(z, want_z, rtol=1e-5, atol=1e-4)
