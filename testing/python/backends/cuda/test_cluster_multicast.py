"""Thread-block clusters: the cluster launch (``T.Kernel(cluster_dims=...)``), cluster-granular
``T.use_swizzle``, and the automatic TMA multicast of the warp-specialized GEMM (pass config
``tl.cluster_multicast``, ``backends/cuda/passes/cluster_multicast.py``): generated IR and
CUDA source, ptxas/SASS of nvcc builds, 2- and 4-block clusters run by the emulator
(``tilelang/testing/cuda_emulator_cluster.py``) against float64, and, marked ``cuda``, the
GEMM on the GPU against torch."""

from __future__ import annotations

import functools
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm_tirx import ir, sym

import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.hopper_source import with_cluster_dims
from tilelang.lowering.stmt import launches_of, substitute

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_programs import readme_gemm  # noqa: E402
from test_gemm_wgmma_emulation import emulate_wgmma  # noqa: E402
from test_tma import _sass  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
MC2 = {"tl.cluster_multicast": 2}


gemm = functools.partial(readme_gemm, threads=256, out="float32")  # gemm_programs.py


def _notes(f):
    return [str(x) for x in f.attrs["tl.tma"]] if "tl.tma" in f.attrs else []


# ------------------------------------------------------------------------ lowered IR
def test_multicast_ir_of_the_readme_gemm():
    """A 2-block cluster along x: A (same for both blocks) is loaded in 64-row slices, each
    block its own slice multicast to both (mask 0b11); B stays per block; the empty ring
    counts the consumer warps of both blocks (2 x 256 / 32) through remote arrivals; cluster
    barriers publish the barriers and end the kernel; the A map's box is the slice."""
    f = pipeline.lower(gemm(1000, 1024, 1000), SM90A, MC2)
    text = str(f)
    assert any("A -> A_s multicast to the 2 blocks" in n for n in _notes(f)), _notes(f)
    assert not any("B -> B_s multicast" in n for n in _notes(f))
    assert 'T.call_extern("tl::cluster_dims<2, 1, 1>"' in text
    assert '"tl::mbarrier_init", T.address_of(tma_empty_k[0]), T.uint32(16)' in text
    assert '"tl::mbarrier_init", T.address_of(tma_full_k[0]), T.uint32(1)' in text
    producer = text.split("if tx == 256:")[1]
    assert producer.count("tl::tma_load_multicast_2d") == 1
    assert producer.count('"tl::tma_load_2d"') == 2  # B: two 64-column panels
    assert "T.uint32(3), k_load * 64 + A_tma_shift, by * 128 + cluster_rank * 64" in producer
    assert "k_load % 3 * 8192 + cluster_rank * 4096" in producer  # the slice's place
    assert "T.uint32(32768)" in producer  # each block's full barrier expects all bytes
    # CTA-scope wait and arrivals in the loop (tl.cluster_multicast_sync="cta", the
    # default; test_cluster_multicast_schedule.py checks both schedules)
    assert '"tl::mbarrier_wait", T.address_of(tma_empty_k[k_load % 3])' in producer
    consumer = text.split("if tx < 256:")[1].split("else:")[0]
    assert "tl::mbarrier_arrive_cluster_warp<2>" in consumer
    assert '"tl::mbarrier_arrive"' not in consumer
    assert "tl::cluster_sync" not in text
    assert text.count('T.call_extern("tl::cluster_arrive"') == 2  # each branch, after its loop
    assert text.rstrip().endswith('T.call_extern("tl::cluster_wait", ty=T.void)')
    enc = [ln for ln in text.splitlines() if "tensormap_encode_tiled(A_tmap" in ln]
    assert len(enc) == 1 and "2000, 64, 64, 1, 1" in enc[0]  # box 64 x 64 (was 64 x 128)


def test_multicast_is_off_by_default_and_explains_refusals():
    f = pipeline.lower(gemm(1000, 1024, 1000), SM90A)
    assert "cluster" not in str(f)
    odd = pipeline.lower(gemm(1000, 384, 1000), SM90A, MC2)  # 3 blocks along x
    assert "tl::cluster_dims" not in str(odd) and "tma_load_multicast" not in str(odd)
    assert "tl::mbarrier_arrive_cluster" not in str(odd) and "tl::cluster_sync" not in str(odd)
    assert any("not a static multiple of 2" in n for n in _notes(odd)), _notes(odd)
    square = pipeline.lower(gemm(1024, 1024, 256), SM90A, {"tl.cluster_multicast": 4})
    assert any("multicast to the 4 blocks" in n for n in _notes(square))
    assert "tl::mbarrier_arrive_cluster_warp<4>" in str(square)
    with pytest.raises(ValueError, match="tl.cluster_multicast"):
        pipeline.lower(gemm(1000, 1024, 1000), SM90A, {"tl.cluster_multicast": 3})


def test_swizzled_blocks_stay_paired_in_clusters():
    """With clusters, ``T.use_swizzle`` renumbers clusters, not blocks: the two blocks of a
    cluster get the same tile row (so A is still shared) and adjacent columns; the map is a
    bijection of the grid (checked by evaluating the lowered block indices)."""
    from tilelang.backends.cuda.passes.rasterize_blocks import rasterize_blocks

    func = gemm(1000, 2048, 512, swizzle=3)
    f = pipeline.lower(func, SM90A, MC2)
    assert any("A -> A_s multicast" in n for n in _notes(f)), _notes(f)
    gx, gy = 16, 8
    launches, inner = launches_of(rasterize_blocks(func, (2, 1)).body)
    var = {tag: v for tag, _, v in launches}
    new_bx, new_by = inner.seq[0], inner.seq[1]  # the renumbering binds
    analyzer = sym.Analyzer()
    seen = {}
    for x in range(gx):
        for y in range(gy):
            m = {var["blockIdx.x"]: ir.const(x, "int32"), var["blockIdx.y"]: ir.const(y, "int32")}
            seen[(x, y)] = tuple(
                int(analyzer.simplify(substitute(b.value, m))) for b in (new_bx, new_by)
            )
    assert sorted(seen.values()) == sorted((x, y) for x in range(gx) for y in range(gy))
    for x in range(0, gx, 2):
        for y in range(gy):
            (x0, y0), (x1, y1) = seen[(x, y)], seen[(x + 1, y)]
            assert y0 == y1 and x1 == x0 + 1 and x0 % 2 == 0
    # without clusters the same hint pairs blocks of different rows
    launches, inner = launches_of(rasterize_blocks(func).body)
    var = {tag: v for tag, _, v in launches}
    m = {var["blockIdx.x"]: ir.const(1, "int32"), var["blockIdx.y"]: ir.const(0, "int32")}
    plain = int(analyzer.simplify(substitute(inner.seq[1].value, m)))
    assert plain == 1  # block (1, 0) computes row 1: a block-granular panel


def test_cluster_dims_source_fixup():
    code = (
        'extern "C" __global__ void __launch_bounds__(384, 1) k(int* a) {\n'
        "  tl::cluster_dims<2, 1, 1>();\n}\n"
        'extern "C" __global__ void __launch_bounds__(128) j(int* a) {\n}\n'
    )
    out = with_cluster_dims(code)
    assert "__launch_bounds__(384, 1) __cluster_dims__(2, 1, 1) k(" in out
    assert "__launch_bounds__(128) j(" in out
    with pytest.raises(ValueError, match="conflicting cluster shapes"):
        with_cluster_dims(
            code.replace("k(int* a) {\n", "k(int* a) {\n tl::cluster_dims<4, 1, 1>();")
        )


# ------------------------------------------------------------------- nvcc / SASS
def test_ptxas_accepts_multicast_and_sass_has_it():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    art = pipeline.build(gemm(1000, 1024, 1000), SM90A, MC2, compiler="nvcc")
    src = art.kernel_source
    assert "__cluster_dims__(2, 1, 1) main_kernel(" in src
    assert ".multicast::cluster" in src and "mapa.shared::cluster" in src
    assert "cluster.h" in art.meta["extra_headers"]
    assert art.meta["direct_launch_kernels"] == ["main_kernel"]
    sass = _sass(art)
    assert "UTMALDG.2D.MULTICAST" in sass
    assert "UCGABAR_ARV" in sass and "UCGABAR_WAIT" in sass
    off = _sass(pipeline.build(gemm(1000, 1024, 1000), SM90A, compiler="nvcc"))
    assert "MULTICAST" not in off and "UCGABAR" not in off
    dyn = pipeline.build(_dynamic_cluster_kernel(), SM90A, compiler="nvcc")
    assert "__cluster_dims__(2, 1, 1) dyn_kernel(" in dyn.kernel_source
    assert "multiple of the cluster's (2)" in dyn.host_source  # checked at each call


def _dynamic_cluster_kernel():
    n = T.dynamic("n")

    @T.prim_func
    def dyn(A: T.Tensor((n, 128), "int32")):
        with T.ClusterKernel(n, cluster_dims=(2, 1, 1), threads=128) as bx:
            A[bx, T.get_thread_binding()] = T.block_rank_in_cluster() + bx * 10

    return dyn


# ----------------------------------------------------------------------- emulated
def _emulate(func, M, N, K, configs, seed=0):
    lowered = pipeline.lower(func, SM90A, configs)
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, size=(M, K)).astype(np.float16)
    b = rng.integers(-3, 4, size=(K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(lowered, a, b, c, mode="late_writes")
    return lowered, c, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize(
    "M,N,K,bN,threads,size,swizzle",
    [
        (136, 256, 200, 64, 128, 2, 0),  # tails in M and K
        (200, 200, 136, 64, 128, 2, 0),  # tails in M, N (4 column blocks) and K
        (136, 512, 72, 64, 128, 4, 0),  # 4-block clusters: 32-row slices
        (264, 256, 136, 64, 128, 2, 3),  # swizzled clusters, a partial last panel
        (136, 256, 136, 128, 256, 2, 0),  # two consumer warpgroups: 16 warps release
    ],
)
def test_emulated_cluster_gemm_matches_float64(M, N, K, bN, threads, size, swizzle):
    """The blocks of each cluster run together (each its producer and consumers as tasks),
    the multicast slices landing in every block's tile and barrier: exact against float64."""
    func = gemm(M, N, K, bM=128, bN=bN, bK=64, threads=threads, stages=3, swizzle=swizzle)
    lowered, c, want = _emulate(func, M, N, K, {"tl.cluster_multicast": size})
    assert f"tl::cluster_dims<{size}, 1, 1>" in str(lowered)
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_emulated_attention_chain_multicasts_k_and_v(dtype):
    """The FlashAttention gemm chain (K and V tiles the same in every block along M): both
    are multicast (V's 64-byte-swizzled boxes sliced too); Q, loaded before the loop, stays
    per block; the result matches float64."""
    from test_gemm_wgmma_rs import _round, chained, emulate_rs

    M, N1, N2, K = 200, 256, 96, 64
    lowered = pipeline.lower(chained(M, N1, N2, K, 128, 128, 256, 3, dtype), SM90A, MC2)
    notes = _notes(lowered)
    assert any("Kt -> K_s multicast" in n for n in notes), notes
    assert any("V -> V_s multicast" in n for n in notes), notes
    rng = np.random.default_rng(7)
    q = _round(rng.standard_normal((M, K)) / 4, dtype)
    kt = _round(rng.standard_normal((N1, K)) / 4, dtype)
    v = _round(rng.standard_normal((N1, N2)), dtype)
    o = np.full((M, N2), np.nan, np.float32)
    (_, _, _, o), _ = emulate_rs(lowered, q, kt, v, o)
    want = _round(q.astype(np.float64) @ kt.astype(np.float64).T, dtype).astype(np.float64)
    want = want @ v.astype(np.float64)
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    np.testing.assert_allclose(o, want, rtol=tol, atol=tol * np.abs(want).max())


def test_emulated_b_multicast_when_x_walks_m():
    """blockIdx.x walking M: the B tile (two 64-column panels) is the shared one, sliced in
    32-row boxes; swizzled over clusters; exact against float64."""
    M, N, K = 392, 200, 136  # 4 row blocks, tails in M, N, K
    func = gemm(M, N, K, bN=128, bK=64, threads=128, swizzle=2, x_walks="m")
    lowered, c, want = _emulate(func, M, N, K, MC2)
    notes = _notes(lowered)
    assert any("B -> B_s multicast" in n and "32-row slices" in n for n in notes), notes
    assert not any("A -> A_s multicast" in n for n in notes)
    np.testing.assert_array_equal(c, want)


def test_user_cluster_dims_with_multicast_emulated():
    """``T.Kernel(..., cluster_dims=2)`` and ``tl.cluster_multicast = 2`` agree: one marker,
    the multicast applies (with ``T.use_swizzle`` over clusters); other cluster shapes
    refuse the multicast (a note) but keep the launch."""
    M, N, K = 136, 256, 200
    func = gemm(M, N, K, bN=64, threads=128, swizzle=2, cluster=2)
    lowered, c, want = _emulate(func, M, N, K, MC2)
    assert str(lowered).count("tl::cluster_dims<2, 1, 1>") == 1
    assert any("multicast to the 2 blocks" in n for n in _notes(lowered))
    np.testing.assert_array_equal(c, want)
    other = pipeline.lower(gemm(M, N, K, bN=64, threads=128, cluster=(1, 2)), SM90A, MC2)
    assert any("cluster_dims (1, 2, 1) differ" in n for n in _notes(other)), _notes(other)
    assert "tl::cluster_dims<1, 2, 1>" in str(other)


def test_emulator_catches_missing_peer_releases(monkeypatch):
    """Consumers that release only their own block's stage (the peer's producer may then
    overwrite a slice this block has not read) fail in the emulator."""
    from tilelang.backends.cuda.passes import warp_specialize_auto as wsa
    from tilelang.testing.cuda_emulator import EmulationError

    real = wsa._call

    def local_only(name, *args):
        if name == "tl::mbarrier_arrive_cluster_warp<2>":
            name = "tl::mbarrier_arrive_cluster_warp<1>"
        if name == "tl::mbarrier_init" and int(args[1].value) == 8:
            args = (args[0], wsa._u32(4))
        return real(name, *args)

    monkeypatch.setattr(wsa, "_call", local_only)
    func = gemm(136, 256, 200, bN=64, threads=128)
    with pytest.raises(EmulationError, match="never return|more bytes"):
        _emulate(func, 136, 256, 200, MC2)


def test_user_cluster_launch_rank_and_barrier_emulated():
    """``T.ClusterKernel``: ``T.block_rank_in_cluster`` is ``bx % 2``; a value written to
    shared memory before ``T.cluster_sync`` is read after it; a dynamic grid extent gets a
    host check."""
    from tilelang.testing.cuda_emulator import emulate

    @T.prim_func
    def k(A: T.Tensor((8, 128), "int32")):
        with T.ClusterKernel(8, cluster_dims=2, threads=128) as bx:
            S = T.alloc_shared((128,), "int32")
            tx = T.get_thread_binding()
            r = T.block_rank_in_cluster()
            S[tx] = r * 10 + bx
            T.cluster_sync()
            assert T.get_cluster_dims() == [2, 1, 1] and T.get_cluster_size() == 2
            assert T.get_cluster_extents() == [4, 1, 1]
            A[bx, tx] = S[127 - tx] + 1 + T.get_cluster_id() * 100

    f = pipeline.lower(k, SM90A)
    assert 'T.call_extern("tl::cluster_dims<2, 1, 1>"' in str(f)
    (a,) = emulate(f, np.zeros((8, 128), np.int32))
    x = np.arange(8)
    want = (x % 2 * 10 + x + 1 + x // 2 * 100)[:, None] * np.ones((1, 128), np.int32)
    np.testing.assert_array_equal(a, want)
    with pytest.raises(errors.CompileError, match="need CUDA sm_90"):
        pipeline.lower(k, {"kind": "cuda", "arch": "sm_80"})

    n = T.dynamic("n")

    @T.prim_func
    def dyn(A: T.Tensor((n, 128), "int32")):
        with T.ClusterKernel(n, cluster_dims=(2, 1, 1), threads=128) as bx:
            A[bx, T.get_thread_binding()] = T.block_rank_in_cluster()

    text = str(pipeline.lower(dyn, SM90A))
    assert "multiple of the cluster's (2)" in text


def _remote_arrival_kernel(peer_offset=1):
    """Every thread arrives on the cluster barrier of block ``rank ^ peer_offset`` (0: its
    own), then waits for its own barrier's first phase: 128 arrivals from the peer."""

    @T.prim_func
    def k(A: T.Tensor((4, 128), "int32")):
        with T.ClusterKernel(4, cluster_dims=2, threads=128) as bx:
            bar = T.alloc_cluster_barrier(128)
            tx = T.get_thread_binding()
            r = T.block_rank_in_cluster()
            T.mbarrier_arrive(bar[0], cta_id=r ^ peer_offset)
            T.mbarrier_wait_parity(bar[0], 0)
            A[bx, tx] = r + 1
            T.cluster_sync()

    return k


def test_cluster_barrier_remote_arrivals_emulated():
    """``T.alloc_cluster_barrier`` + ``T.mbarrier_arrive(bar, cta_id=...)``: each block's
    phase completes by the peer's 128 arrivals (mapa + remote arrive). When every thread
    arrives on block 0, block 1's barrier never completes: the emulator reports the hang.
    A barrier from ``T.alloc_barrier`` takes no ``cta_id``."""
    from tilelang.testing.cuda_emulator import EmulationError, emulate

    f = pipeline.lower(_remote_arrival_kernel(), SM90A)
    text = str(f)
    assert '"tl::mbarrier_arrive_cluster", T.address_of(bar[0])' in text
    assert text.count("tl::cluster_sync") == 2  # after the init, and the user's
    (a,) = emulate(f, np.zeros((4, 128), np.int32))
    np.testing.assert_array_equal(a, (np.arange(4) % 2 + 1)[:, None] * np.ones((1, 128)))

    @T.prim_func
    def short(A: T.Tensor((4, 128), "int32")):
        with T.ClusterKernel(4, cluster_dims=2, threads=128) as bx:
            bar = T.alloc_cluster_barrier(256)
            T.mbarrier_arrive(bar[0], cta_id=0)
            T.mbarrier_wait_parity(bar[0], 0)
            A[bx, T.get_thread_binding()] = 1

    with pytest.raises(EmulationError, match="never return|deadlock"):
        emulate(pipeline.lower(short, SM90A), np.zeros((4, 128), np.int32))
    with pytest.raises(errors.TraceError, match="cluster barrier"):

        @T.prim_func
        def local(A: T.Tensor((4, 128), "int32")):
            with T.ClusterKernel(4, cluster_dims=2, threads=128):
                bar = T.alloc_barrier(128)
                T.mbarrier_arrive(bar[0], cta_id=1)


def test_tma_copy_cluster_mask_in_a_cluster_launch():
    """``T.tma_copy(..., cluster_mask=0b11)`` in a 2-block cluster: each block holds the tile
    (the synchronous copy of tma_explicit.py); outside a cluster launch it is refused."""
    from tilelang.testing.cuda_emulator import emulate

    @T.prim_func
    def k(A: T.Tensor((16, 64), "float32"), B: T.Tensor((4, 16, 64), "float32")):
        with T.ClusterKernel(4, cluster_dims=2, threads=128) as bx:
            S = T.alloc_shared((16, 64), "float32")
            bar = T.alloc_barrier(128)
            T.tma_copy(A[0, 0], S, barrier=bar, cluster_mask=0b11)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            T.copy(S, B[bx, 0, 0])

    a = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32)
    _, b = emulate(pipeline.lower(k, SM90A), a, np.zeros((4, 16, 64), np.float32))
    np.testing.assert_array_equal(b, np.broadcast_to(a, b.shape))
    with pytest.raises(errors.TraceError, match="beyond the cluster"):

        @T.prim_func
        def bad(A: T.Tensor((16, 64), "float32")):
            with T.ClusterKernel(4, cluster_dims=2, threads=128):
                S = T.alloc_shared((16, 64), "float32")
                bar = T.alloc_barrier(128)
                T.tma_copy(A[0, 0], S, barrier=bar, cluster_mask=0b111)


# ----------------------------------------------------------------------------- GPU
def _gpu_gemm(M, N, K, dtype, configs, swizzle=0, bN=128, x_walks="n"):
    import torch

    import tilelang

    func = gemm(
        M, N, K, bN=bN, threads=256, stages=4, dtype=dtype, swizzle=swizzle, x_walks=x_walks
    )
    kern = tilelang.compile(func, target="cuda", pass_configs=configs)
    tdt = getattr(torch, dtype)
    a = torch.randn((M, K), device="cuda", dtype=tdt)
    b = torch.randn((K, N), device="cuda", dtype=tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kern(a, b, c)
    torch.cuda.synchronize()
    return c.double(), a.double() @ b.double(), kern


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("multicast", [0, 2, 4])
@pytest.mark.parametrize(
    "shape",
    [
        (1024, 1024, 1024),
        (1000, 1000, 1000),  # tails in M, N, K
        (520, 2048, 776),
        (4096, 4096, 512),
        (1000, 1100, 296),  # 9 column blocks: no multicast, an ordinary launch
    ],
)
def test_cluster_gemm_matches_torch_gpu(dtype, multicast, shape):
    import torch

    M, N, K = shape
    c, ref, kern = _gpu_gemm(M, N, K, dtype, {"tl.cluster_multicast": multicast})
    applied = "tl::tma_load_multicast_2d" in kern.get_kernel_source()
    gx = -(-N // 128)
    assert applied == (multicast > 1 and gx % multicast == 0)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=5e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("swizzle", [4, 8])
@pytest.mark.parametrize("x_walks", ["n", "m"])
def test_cluster_gemm_swizzled_and_repeated_gpu(swizzle, x_walks):
    """Swizzled clusters sharing A (x walks N) or B (x walks M), launched repeatedly."""
    import torch

    c, ref, kern = _gpu_gemm(
        2000, 2048, 1000, "float16", MC2, swizzle=swizzle, bN=256, x_walks=x_walks
    )
    assert "tl::tma_load_multicast_2d" in kern.get_kernel_source()
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=5e-2)
    for _ in range(3):  # every launch forms clusters and ends cleanly
        a = torch.randn((2000, 1000), device="cuda", dtype=torch.float16)
        b = torch.randn((1000, 2048), device="cuda", dtype=torch.float16)
        c = torch.empty((2000, 2048), device="cuda", dtype=torch.float32)
        kern(a, b, c)
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-2, atol=5e-2)


@pytest.mark.cuda
def test_user_cluster_launch_gpu():
    import torch

    import tilelang

    @T.prim_func
    def k(A: T.Tensor((8, 128), "int32")):
        with T.ClusterKernel(8, cluster_dims=2, threads=128) as bx:
            S = T.alloc_shared((128,), "int32")
            tx = T.get_thread_binding()
            S[tx] = T.block_rank_in_cluster() * 10 + bx
            T.cluster_sync()
            A[bx, tx] = S[127 - tx] + 1

    a = torch.zeros((8, 128), device="cuda", dtype=torch.int32)
    tilelang.compile(k, target="cuda")(a)
    want = (torch.arange(8) % 2 * 10 + torch.arange(8) + 1)[:, None].expand(8, 128)
    torch.testing.assert_close(a.cpu(), want.to(torch.int32))
    dyn = tilelang.compile(_dynamic_cluster_kernel(), target="cuda")
    a = torch.zeros((6, 128), device="cuda", dtype=torch.int32)
    dyn(a)
    want = (torch.arange(6) % 2 + torch.arange(6) * 10)[:, None].expand(6, 128)
    torch.testing.assert_close(a.cpu(), want.to(torch.int32))
    with pytest.raises(Exception, match="multiple of the cluster"):  # ValueError via tvm-ffi
        dyn(torch.zeros((5, 128), device="cuda", dtype=torch.int32))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_chain_multicast_gpu(dtype):
    """K and V multicast to 2-block clusters (the FlashAttention gemm chain)."""
    import torch
    from test_gemm_wgmma_rs import chained

    import tilelang

    M, N1, N2, K = 1000, 1024, 128, 128
    kern = tilelang.compile(
        chained(M, N1, N2, K, 128, 128, 256, 3, dtype), target="cuda", pass_configs=MC2
    )
    assert "tl::tma_load_multicast_2d" in kern.get_kernel_source()
    tdt = getattr(torch, dtype)
    q = (torch.randn(M, K, device="cuda") / 8).to(tdt)
    kt = (torch.randn(N1, K, device="cuda") / 8).to(tdt)
    v = torch.randn(N1, N2, device="cuda").to(tdt)
    o = torch.full((M, N2), float("nan"), device="cuda")
    kern(q, kt, v, o)
    s = (q.double() @ kt.double().T).to(tdt).double()
    want = s @ v.double()
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    torch.testing.assert_close(o.double(), want, rtol=tol, atol=tol * want.abs().max().item())


@pytest.mark.cuda
def test_tma_copy_cluster_mask_gpu():
    import torch

    import tilelang

    @T.prim_func
    def k(A: T.Tensor((16, 64), "float32"), B: T.Tensor((4, 16, 64), "float32")):
        with T.ClusterKernel(4, cluster_dims=2, threads=128) as bx:
            S = T.alloc_shared((16, 64), "float32")
            bar = T.alloc_barrier(128)
            T.tma_copy(A[0, 0], S, barrier=bar, cluster_mask=0b11)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            T.copy(S, B[bx, 0, 0])

    a = torch.randn(16, 64, device="cuda")
    b = torch.zeros(4, 16, 64, device="cuda")
    tilelang.compile(k, target="cuda")(a, b)
    torch.testing.assert_close(b, a.expand(4, 16, 64))


@pytest.mark.cuda
def test_cluster_barrier_remote_arrivals_gpu():
    import torch

    import tilelang

    a = torch.zeros((4, 128), device="cuda", dtype=torch.int32)
    tilelang.compile(_remote_arrival_kernel(), target="cuda")(a)
    want = (torch.arange(4) % 2 + 1)[:, None].expand(4, 128).to(torch.int32)
    torch.testing.assert_close(a.cpu(), want)
