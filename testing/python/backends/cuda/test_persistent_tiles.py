"""Persistent warp-specialized kernels (pass config ``tl.persistent_tiles``,
``backends/cuda/passes/persistent_tiles.py``): ``G = min(tiles, SMs)`` blocks walking a
tile loop, the mbarrier rings running on across tiles, the epilogue tile apart from the
stages. Emulated with tails against float64 with fewer blocks than tiles (the emulated
device's SM count: ``TILELANG_EMULATOR_SM_COUNT``), the race check on; the fallbacks and
their notes; the nvcc build; and, marked ``cuda``, the H200 runs."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_programs import readme_gemm as gemm  # noqa: E402
from test_gemm_wgmma_rs import emulate_rs  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
ON = {"tl.persistent_tiles": True}
OFF = {"tl.persistent_tiles": False}


def _notes(func):
    return [str(x) for x in func.attrs["tl.tma"]] if "tl.tma" in func.attrs else []


def _persistent_note(func):
    return [n for n in _notes(func) if n.startswith("persistent tiles")]


def _np(dtype):
    return np.float16 if dtype == "float16" else ml_dtypes.bfloat16


def _emulate(lowered, M, N, K, dtype, seed=0):
    """(C from the emulator, float64 reference, the machine); C starts as NaN."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((M, K)) / 4).astype(_np(dtype))
    b = (rng.standard_normal((K, N)) / 4).astype(_np(dtype))
    c = np.full((M, N), np.nan, _np(dtype))
    (_, _, c), machine = emulate_rs(lowered, a, b, c, mode="late_writes", race=True)
    return c.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), machine


def _close(got, want, dtype):
    tol = 1e-2 if dtype == "bfloat16" else 2e-3
    assert not np.isnan(got).any(), "elements never written"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


# ------------------------------------------------------------------------------ emulated
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "M,N,K,bM,bN,threads,swizzle,sms",
    [
        (200, 328, 136, 64, 128, 128, 0, 5),  # 12 tiles on 5 blocks
        (200, 328, 136, 64, 128, 128, 3, 1),  # one block walks every tile
        (136, 200, 200, 128, 64, 256, 0, 3),  # two consumer warpgroups, 4 tiles, 4 k-steps
        (72, 96, 72, 64, 64, 128, 0, 132),  # more SMs than tiles: one tile per block
    ],
)
def test_persistent_gemm_emulated(M, N, K, bM, bN, threads, swizzle, sms, dtype, monkeypatch):
    """Tails in M, N and K, fewer blocks than tiles (each block loops over several with
    the rings' stage and phase running on), with and without ``T.use_swizzle``: the
    float64 product, every element written once, no shared-memory race."""
    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", str(sms))
    func = gemm(M, N, K, bM=bM, bN=bN, threads=threads, dtype=dtype, swizzle=swizzle)
    lowered = pipeline.lower(func, SM90A, ON)
    tiles = -(-M // bM) * -(-N // bN)
    (note,) = _persistent_note(lowered)
    assert "persistent: G = min(tiles, SMs)" in note and f"range(blockIdx.x, {tiles}," in note
    got, want, machine = _emulate(lowered, M, N, K, dtype)
    assert machine.grid_dims == {"blockIdx.x": min(tiles, sms)}
    _close(got, want, dtype)


def _gemm_1d(M, N, K, bM=64, bN=128, bK=64, dtype="float16"):
    """The GEMM on a 1-D grid: the user derives the tile's row and column from one index."""
    nx = -(-N // bN)

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM) * nx, threads=128) as b:
            bx = b % nx
            by = b // nx
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


def _two_store_gemm(M, N, K, bM=64, bN=128, bK=64):
    """C = A @ B and D = 2 A @ B, both stored through the same shared tile C_s."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float16"),
        D: T.Tensor((M, N), "float16"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_s = T.alloc_shared((bM, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C_s)
            T.copy(C_s, C[by * bM, bx * bN])
            for i, j in T.Parallel(bM, bN):
                C_l[i, j] = C_l[i, j] * 2
            T.copy(C_l, C_s)
            T.copy(C_s, D[by * bM, bx * bN])

    return main


def test_tile_reused_within_the_epilogue_keeps_its_wait(monkeypatch):
    """Two TMA stores from one shared tile in the epilogue: the wait between them stays
    (the tile is rewritten right after), only the last one moves before the next tile's
    epilogue; emulated on 2 blocks for 12 tiles, C and D right."""
    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "2")
    M, N, K = 200, 328, 136
    lowered = pipeline.lower(_two_store_gemm(M, N, K), SM90A, ON)
    consumer = str(lowered).split("for tile_j in range")[1].split("else:")[0]
    assert consumer.count("tl::tma_store_2d") == 2 and consumer.count("tma_store_commit") == 2
    assert consumer.count("tl::tma_store_wait_read<0>") == 3  # between, guard, after the loop
    rng = np.random.default_rng(9)
    a = (rng.standard_normal((M, K)) / 4).astype(np.float16)
    b = (rng.standard_normal((K, N)) / 4).astype(np.float16)
    c, d = (np.full((M, N), np.nan, np.float16) for _ in range(2))
    (_, _, c, d), _ = emulate_rs(lowered, a, b, c, d, mode="late_writes", race=True)
    want = a.astype(np.float64) @ b.astype(np.float64)
    _close(c.astype(np.float64), want, "float16")
    _close(d.astype(np.float64), 2 * want, "float16")


def _shared_epilogue_gemm(M, N, K):
    from test_tma_store import gemm_shared_epilogue

    return gemm_shared_epilogue(M, N, K)


@pytest.mark.parametrize(
    "program,M,N,K,configs",
    [
        ("readme_256", 200, 328, 136, {"tl.ws_pingpong": True}),  # warpgroups take turns
        ("shared_epilogue", 200, 328, 136, {}),  # the user's C_s and its TMA store
        ("readme", 200, 328, 136, {"tl.wgmma_in_flight": False}),  # a release per iteration
        ("readme", 200, 330, 136, {}),  # B rows not 16-byte multiples: consumers copy B
        ("readme", 200, 100, 136, {}),  # one tile column (blockIdx.x extent 1)
        ("readme", 200, 328, 136, {"tl.tma_store_epilogue": False}),  # register stores
        ("grid_1d", 200, 328, 136, {}),  # one block index, the user's binds per tile
    ],
)
def test_persistent_variants_emulated(program, M, N, K, configs, monkeypatch):
    """Other schedules the persistent loop wraps, on 3 blocks: the float64 product."""
    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "3")
    func = {
        "readme": lambda: gemm(M, N, K, bM=64, bN=128),
        "readme_256": lambda: gemm(M, N, K, bM=128, bN=128, threads=256),
        "shared_epilogue": lambda: _shared_epilogue_gemm(M, N, K),
        "grid_1d": lambda: _gemm_1d(M, N, K),
    }[program]()
    lowered = pipeline.lower(func, SM90A, {**configs, **ON})
    (note,) = _persistent_note(lowered)
    assert "persistent: G = min(tiles, SMs)" in note
    got, want, machine = _emulate(lowered, M, N, K, "float16", seed=3)
    assert machine.grid_dims == {"blockIdx.x": 3}
    _close(got, want, "float16")


def test_attention_3d_grid_emulated(monkeypatch):
    """FlashAttention (GQA example, not causal): a 3-d grid (z extent 1) walked by 3
    blocks, the staged Output epilogue apart from the stages; float64 reference. Causal,
    the loop's extent grows with the block index: not applied, and the note says so."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _attention, _example

    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "3")
    fa = _example("flash_attention/example_gqa_fwd_bshd.py").flashattn
    B, H, S, D = 1, 2, 192, 64
    kw = dict(groups=1, block_M=128, block_N=64, num_stages=2, threads=256)
    f = pipeline.lower(fa.get_tir(B, H, S, D, False, **kw), SM90A, ON)
    (note,) = _persistent_note(f)
    assert "tiles = 2 x 2 x 1 = 4" in note
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    arrays, machine = emulate_rs(f, q, k, v, np.full_like(q, np.nan), race=True)
    assert machine.grid_dims == {"blockIdx.x": 3}
    np.testing.assert_allclose(arrays[3], _attention(q, k, v, False), rtol=1e-2, atol=2e-3)
    causal = pipeline.lower(fa.get_tir(B, H, S, D, True, **kw), SM90A, ON)
    assert "not applied (the extent of loop k depends" in _persistent_note(causal)[0]


def test_attention_ordered_loop_emulated(monkeypatch):
    """FlashAttention (MHA example, not causal): the ordered consumer loop (groups in two
    stages, ping-pong turns) persistent, one block walking all 6 tiles; the last
    iteration's late-read stage is handed back after the loop's epilogue, so the next
    tile's producer can go on. float64 reference."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _attention, _example

    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "1")
    fa = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    B, H, S, D = 2, 1, 320, 64
    tir = fa.get_tir(B, H, S, D, False, block_M=128, block_N=64, num_stages=2, threads=256)
    f = pipeline.lower(tir, SM90A, ON)
    notes = _notes(f)
    assert any("consumer software-pipelined" in n for n in notes), notes
    assert "tiles = 3 x 1 x 2 = 6" in _persistent_note(f)[0]
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((B, S, H, D)).astype(np.float16) for _ in range(3))
    arrays, machine = emulate_rs(f, q, k, v, np.full_like(q, np.nan), race=True)
    assert machine.grid_dims == {"blockIdx.x": 1}
    np.testing.assert_allclose(arrays[3], _attention(q, k, v, False), rtol=1e-2, atol=2e-3)


def test_emulated_sm_count_must_be_positive(monkeypatch):
    from tilelang.testing.cuda_emulator import EmulationError

    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "0")
    lowered = pipeline.lower(gemm(72, 96, 72, bM=64, bN=64), SM90A, ON)
    with pytest.raises(EmulationError, match="TILELANG_EMULATOR_SM_COUNT='0'"):
        _emulate(lowered, 72, 96, 72, "float16")


def test_lowered_tile_loop_and_rings():
    """The dump: one blockIdx launch over min(tiles, __tl_sm_count()), the tile loop in
    both branches with the block indices (and the swizzle's) recomputed, ring indices
    offset by the iteration base, the last stage released after the drain, the store's
    wait moved before the next epilogue, and the epilogue tile apart from the stages."""
    func = gemm(1000, 1088, 296, bM=128, bN=256, threads=256, swizzle=10)
    text = str(pipeline.lower(func, SM90A, ON))
    assert 'T.launch_thread("blockIdx.x", T.min(40, T.call_extern("__tl_sm_count"' in text
    assert 'launch_thread("blockIdx.y"' not in text
    assert "for tile_j in range(T.Div(40 - block_id + num_blocks - 1, num_blocks)):" in text
    assert "for tile_j_load in range(T.Div(40 - block_id + num_blocks - 1, num_blocks)):" in text
    assert "bx_r: T.let[T.int32]" in text and "bx_r_load: T.let[T.int32]" in text
    assert "tile_iter_base: T.let[T.int32] = tile_j * 5" in text
    assert "tma_full_k[(tile_iter_base + k) % 3]), (tile_iter_base + k) // 3 % 2" in text
    assert "tma_empty_k[(tile_iter_base_load + k_load) % 3]" in text
    assert "tma_empty_k[(tile_iter_base + 5 + 3 - 1) % 3]" in text  # after the drain
    consumer = text.split("for tile_j in range")[1].split("else:")[0]
    wait, bar = "tl::tma_store_wait_read<0>", "tl::named_barrier_sync"
    guard = consumer.index(wait)
    assert consumer.index("tl::wgmma_wait<0>") < guard < consumer.index(bar, guard)
    assert consumer.index(bar, guard) < consumer.index("tl::ptx_stmatrix_x4")
    assert consumer.count(wait) == 2  # the guard and, after the tile loop, the last store
    assert consumer.rindex(wait) > consumer.rindex("tl::tma_store_commit")


def test_epilogue_tile_apart_from_the_stages():
    """Persistent, C_epilogue gets its own bytes (the producer refills the stages during
    the epilogue); one block per tile, it reuses a stage buffer as before."""
    func = gemm(1024, 1024, 512, bM=128, bN=256, threads=256)
    plan = dict(pipeline.lower(func, SM90A, ON).attrs["tl.shared_memory"])
    lo, size = (int(x) for x in plan["C_epilogue"])
    assert size == 128 * 256 * 2
    for name in ("A_s_mb", "B_s_mb"):
        o, sz = (int(x) for x in plan[name])
        assert lo + size <= o or o + sz <= lo, (name, plan)
    assert "C_epilogue" not in dict(pipeline.lower(func, SM90A, OFF).attrs["tl.shared_memory"])


def test_missing_wait_before_the_epilogue_is_caught(monkeypatch):
    """Without the wait for the previous tile's TMA store before the stmatrix writes of the
    next tile, the emulator sees the store's bytes overwritten."""
    from tvm_tirx import ir

    from tilelang.backends.cuda.passes import persistent_tiles as pt
    from tilelang.testing.cuda_emulator import EmulationError

    real, nothing = pt._call, ir.Evaluate(ir.const(0, "int32"))
    monkeypatch.setattr(pt, "_call", lambda n, *a: nothing if n == pt._WAIT_READ else real(n, *a))
    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "2")
    lowered = pipeline.lower(gemm(200, 328, 136, bM=64, bN=128), SM90A, ON)
    with pytest.raises(EmulationError, match="may still read"):
        _emulate(lowered, 200, 328, 136, "float16")


def test_default_is_on_for_gemms_only():
    """Unset, a GEMM with 256 consumer threads is persistent (as with True); FlashAttention's
    ordered loop and a 128-thread GEMM are not (as with False), and say nothing about it."""
    func = gemm(1000, 1088, 296, bM=128, bN=256, threads=256, swizzle=10)
    default = str(pipeline.lower(func, SM90A, {}))
    assert default == str(pipeline.lower(func, SM90A, ON)) and "tile_j" in default
    off = str(pipeline.lower(func, SM90A, OFF))
    assert "tile_j" not in off and "__tl_sm_count" not in off and "persistent" not in off
    small = gemm(1000, 1088, 296, bM=128, bN=128, threads=128)
    assert str(pipeline.lower(small, SM90A, {})) == str(pipeline.lower(small, SM90A, OFF))
    from test_pipeline_emulate import _example

    fa = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    tir = fa.get_tir(2, 2, 1024, 64, False, block_M=128, block_N=128, num_stages=2, threads=256)
    import tvm_ffi

    plain = pipeline.lower(tir, SM90A, {})
    off_fa = pipeline.lower(tir, SM90A, OFF)
    assert tvm_ffi.structural_equal(plain.body, off_fa.body, map_free_vars=True)
    assert "persistent" not in str(plain)


# ------------------------------------------------------------------------------ fallbacks
def _atomic_gemm(M, N, K, bM=64, bN=128, bK=64):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.atomic_add(C[by * bM, bx * bN], C_l)

    return main


@pytest.mark.parametrize(
    "func,target,configs,reason",
    [
        (gemm(256, 256, 128, cluster=(2, 1, 1)), SM90A, {}, "thread-block cluster launch"),
        (gemm(256, 256, 128), SM90A, {"tl.cluster_multicast": 2}, "thread-block cluster"),
        (gemm(256, 256, 128), {"kind": "cuda", "arch": "sm_80"}, {}, "not automatically warp"),
        (gemm(256, 256, 128), SM90A, {"tl.disable_warp_specialized": True}, "not automatically"),
        (_atomic_gemm(256, 256, 128), SM90A, {}, "cross-block operation"),
        (
            gemm(1024, 1024, 512, bM=128, bN=256, threads=256, out="float32"),
            SM90A,
            {"tl.tma_store_epilogue": True},
            "bytes of shared memory",
        ),
    ],
)
def test_not_applied_keeps_the_kernel_and_says_why(func, target, configs, reason):
    lowered = pipeline.lower(func, target, {**configs, **ON})
    notes = _persistent_note(lowered)
    assert len(notes) == 1 and "not applied" in notes[0] and reason in notes[0], notes
    plain = pipeline.lower(func, target, {**configs, **OFF})
    assert "tile_j" not in str(lowered) and "tile_iter_base" not in str(lowered)
    strip = [n for n in _notes(lowered) if not n.startswith("persistent tiles")]
    assert strip == _notes(plain)
    import tvm_ffi

    assert tvm_ffi.structural_equal(lowered.body, plain.body, map_free_vars=True)


def test_given_up_after_planning_still_computes(monkeypatch):
    """When the staging tile does not fit beside the stages after all (the planning
    estimate forced to accept here), ``tma_store`` gives the plan up: one tile per block
    again (ring base 0, no extra release), the note says why, the product is right."""
    from tilelang.backends.cuda.passes import persistent_tiles as pt

    monkeypatch.setattr(pt, "_shared_estimate", lambda planner, loop, inner: (0, 1))
    func = gemm(200, 320, 136, bM=128, bN=256, threads=256, out="float32")
    lowered = pipeline.lower(func, SM90A, {"tl.tma_store_epilogue": True, **ON})
    (note,) = _persistent_note(lowered)
    assert "not applied (epilogue C_l -> C:" in note and "beside the stages" in note, note
    text = str(lowered)
    assert "tile_iter_base" not in text and "tile_j" not in text
    plain = str(pipeline.lower(func, SM90A, {"tl.tma_store_epilogue": True, **OFF}))
    arrive = '"tl::mbarrier_arrive", '
    assert text.count(arrive) == plain.count(arrive) == 1
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((200, 136)) / 4).astype(np.float16)
    b = (rng.standard_normal((136, 320)) / 4).astype(np.float16)
    c = np.full((200, 320), np.nan, np.float32)
    (_, _, c), _ = emulate_rs(lowered, a, b, c, mode="late_writes", race=True)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


# ----------------------------------------------------------------------------- the build
def test_nvcc_build_has_the_tile_loop_and_the_sm_query():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    func = gemm(1000, 1088, 296, bM=128, bN=256, threads=256, swizzle=10)
    art = pipeline.build(func, SM90A, ON, compiler="nvcc")
    src, host = art.kernel_source, art.get_host_source()
    assert "int num_blocks = tl::grid_dim_x();" in src
    assert "for (int tile_j = 0;" in src and "for (int tile_j_load = 0;" in src
    assert src.count("tl::wgmma_m64n256k16_ss") == 4  # a loop, not unrolled copies per tile
    assert "__tl_sm_count()" in host and "blockIdx.y" not in src


def test_nvcc_build_of_persistent_attention():
    """The ordered FlashAttention loop (ping-pong turns) inside the tile loop: ptxas
    accepts it (setmaxnreg, named barriers and turn barriers in a loop)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _example

    fa = _example("flash_attention/example_mha_fwd_bshd.py").flashattn
    tir = fa.get_tir(2, 4, 4000, 128, False, block_M=128, block_N=128, num_stages=2, threads=256)
    src = pipeline.build(tir, SM90A, ON, compiler="nvcc").kernel_source
    assert "for (int tile_j = 0;" in src and "for (int tile_j_load = 0;" in src


def _sm_count_program(tmp_path, body):
    """A C program (or library) with the host helper, built with the C compiler."""
    from tilelang.backends.cuda.host_library import _HOST_TYPES_HEADER, _c_compiler

    cc = _c_compiler()
    if cc is None:
        pytest.skip("no C compiler")
    header = tmp_path / "types.h"
    header.write_text(_HOST_TYPES_HEADER)
    src = tmp_path / "prog.c"
    src.write_text(body)
    return cc, header, src


def _sm_count_exe(tmp_path):
    import subprocess

    program = '#include <stdio.h>\nint main(void) { printf("%d", __tl_sm_count()); }\n'
    cc, header, src = _sm_count_program(tmp_path, program)
    exe = tmp_path / "prog"
    subprocess.run([*cc, "-include", str(header), str(src), "-o", str(exe), "-ldl", "-lpthread"], check=True)  # fmt: skip
    return exe


def _run_exe(exe, **env_changes):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TILELANG_CUDA_SM_COUNT"}
    env.update(env_changes)
    return subprocess.run([str(exe)], capture_output=True, text=True, env=env).stdout


def test_host_sm_count_without_a_context(tmp_path):
    """``__tl_sm_count()`` with no current CUDA context (or no driver at all) answers
    INT32_MAX: the grid is then one block per tile, which computes the same result."""
    assert _run_exe(_sm_count_exe(tmp_path)) == str(2**31 - 1)


def test_host_sm_count_override(tmp_path):
    """``TILELANG_CUDA_SM_COUNT`` (a positive integer) is what ``__tl_sm_count()`` answers,
    with or without a driver; anything else is ignored."""
    exe = _sm_count_exe(tmp_path)
    assert _run_exe(exe, TILELANG_CUDA_SM_COUNT="3") == "3"
    for bad in ("0", "-2", "x", "3x", ""):
        assert _run_exe(exe, TILELANG_CUDA_SM_COUNT=bad) == str(2**31 - 1), bad


# ------------------------------------------------------------------------------- the GPU
@pytest.mark.cuda
def test_gpu_host_sm_count_is_the_device_multiprocessor_count(tmp_path):
    """In a process with a current context, ``__tl_sm_count()`` is torch's
    ``multi_processor_count`` of the current device (asked twice: the cached answer)."""
    import ctypes
    import subprocess

    import torch

    program = "int32_t tl_sm_count_for_test(void) { return __tl_sm_count(); }\n"
    cc, header, src = _sm_count_program(tmp_path, program)
    lib = tmp_path / "libsm.so"
    subprocess.run([*cc, "-shared", "-fPIC", "-include", str(header), str(src), "-o", str(lib), "-ldl", "-lpthread"], check=True)  # fmt: skip
    torch.zeros(1, device="cuda")  # a current context
    want = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    fn = ctypes.CDLL(str(lib)).tl_sm_count_for_test
    assert fn() == want and fn() == want


def _gpu_run(kernel, M, N, K, dtype):
    import torch

    tdt = torch.float16 if dtype == "float16" else torch.bfloat16
    a = torch.randn((M, K), device="cuda", dtype=tdt) / 4
    b = torch.randn((K, N), device="cuda", dtype=tdt) / 4
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    kernel(a, b, c)
    torch.cuda.synchronize()
    return c.double(), a.double() @ b.double()


def _gpu_kernel(M, N, K, dtype):
    """The README GEMM (128x256x64, 256 threads, 3 stages, swizzle 10), persistent."""
    from tilelang.backends.cuda import load_kernel

    func = gemm(M, N, K, bM=128, bN=256, bK=64, threads=256, stages=3, dtype=dtype, swizzle=10)
    return load_kernel(pipeline.build(func, {"kind": "cuda"}, ON))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "M,N,K",
    [
        (1000, 1100, 296),  # 40 tiles: one per block
        (2000, 3000, 296),  # 192 tiles with tails: fewer blocks than tiles on 132 SMs
        (4096, 4096, 4096),  # 512 tiles
    ],
)
def test_gpu_readme_gemm_persistent(M, N, K, dtype):
    """The persistent README GEMM vs the float64 product on the GPU."""
    got, want = _gpu_run(_gpu_kernel(M, N, K, dtype), M, N, K, dtype)
    assert not got.isnan().any()
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    err = (got - want).abs().max().item() / want.abs().max().item()
    assert err < tol, err


@pytest.mark.cuda
def test_gpu_persistent_repeated_calls_agree():
    """One persistent kernel called three times on fresh inputs (the SM count is cached per
    device after the first call) gives the product every time."""
    kernel = _gpu_kernel(2000, 3000, 296, "float16")
    for _ in range(3):
        got, want = _gpu_run(kernel, 2000, 3000, 296, "float16")
        assert (got - want).abs().max().item() / want.abs().max().item() < 4e-3


@pytest.mark.cuda
def test_gpu_tilelang_compile_with_the_pass_config():
    """``tilelang.compile(..., pass_configs={"tl.persistent_tiles": True})`` (what
    ``benchmark/matmul_readme.py --variant pers:tl.persistent_tiles=true`` builds) returns
    C with out_idx=[-1]; 4096^3 in float16 vs the float64 product."""
    import torch

    import tilelang

    func = gemm(4096, 4096, 4096, bM=128, bN=256, bK=64, threads=256, stages=3, swizzle=10)
    kernel = tilelang.compile(func, out_idx=[-1], target="cuda", pass_configs=ON)
    a = torch.randn((4096, 4096), device="cuda", dtype=torch.float16) / 4
    b = torch.randn((4096, 4096), device="cuda", dtype=torch.float16) / 4
    got, want = kernel(a, b).double(), a.double() @ b.double()
    assert (got - want).abs().max().item() / want.abs().max().item() < 4e-3


@pytest.mark.cuda
@pytest.mark.parametrize("example", ["example_mha_fwd_bshd.py", "example_gqa_fwd_bshd.py"])
def test_gpu_attention_persistent(example):
    """FlashAttention forward, not causal (the MHA example's ordered loop with ping-pong
    turns; GQA's plain loop), persistent: 32 x 4 x 2 = 256 tiles (a tail in the sequence),
    more than the SMs, D=128, vs float64."""
    import torch

    from tilelang.backends.cuda import load_kernel

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from test_pipeline_emulate import _example

    fa = _example(f"flash_attention/{example}").flashattn
    B, H, S, D = 2, 4, 4000, 128
    kw = dict(block_M=128, block_N=128, num_stages=2, threads=256)
    if "gqa" in example:
        kw["groups"] = 1
    kernel = load_kernel(pipeline.build(fa.get_tir(B, H, S, D, False, **kw), {"kind": "cuda"}, ON))
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.cuda.synchronize()
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    ref = ((qd @ kd.transpose(-1, -2) / D**0.5).softmax(-1) @ vd).transpose(1, 2)
    torch.testing.assert_close(o.double(), ref, rtol=1e-2, atol=1e-2)


_FEW_BLOCKS = """
import sys, torch
sys.path[:0] = [{root!r}, {here!r}]
from test_persistent_tiles import _gpu_kernel, _gpu_run
kernel = _gpu_kernel(2000, 3000, 296, {dtype!r})
got, want = _gpu_run(kernel, 2000, 3000, 296, {dtype!r})
assert not got.isnan().any()
print((got - want).abs().max().item() / want.abs().max().item())
"""


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("blocks", [1, 3, 7])
def test_gpu_persistent_with_few_blocks(blocks, dtype):
    """``TILELANG_CUDA_SM_COUNT=1/3/7`` (in a fresh process: the count is read once per
    library): 192 tiles on 1, 3 or 7 blocks, each walking dozens of tiles with the rings
    running on, vs float64."""
    import os
    import subprocess

    here = Path(__file__).resolve().parent
    code = _FEW_BLOCKS.format(root=str(here.parents[3]), here=str(here), dtype=dtype)
    env = dict(os.environ, TILELANG_CUDA_SM_COUNT=str(blocks))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    assert float(proc.stdout.strip().splitlines()[-1]) < tol, proc.stdout
