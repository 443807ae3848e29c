"""The explicit Hopper API (``T.alloc_barrier``, ``T.mbarrier_*``, ``T.ws``,
``T.set_max_nreg``, ``T.fence_proxy_async``, ``T.warpgroup_*``, ``T.cluster_*``, named
barriers): lowering on sm_90a, errors on other targets and older architectures, hand-written
warp-specialized programs emulated (mbarrier phases modelled) against float64, SASS of
nvcc builds and, marked ``cuda``, the programs on the GPU against torch in float64."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import EmulationError, emulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hopper_kernels import make_matvec, make_wgmma_gemm, make_ws_gemm  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
THIS_FILE = Path(__file__).name


def _line_of(tag):
    for i, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# {tag}"):
            return i
    raise AssertionError(tag)


def _lower(func, arch="sm_90a"):
    return pipeline.lower(func, {"kind": "cuda", "arch": arch})


# ------------------------------------------------------------------------- emulated
@pytest.mark.parametrize("M,K,stages", [(200, 100, 2), (130, 45, 3), (77, 300, 1)])
def test_ws_matvec_emulated(M, K, stages):
    """Producer warpgroup fills a shared ring, consumer waits on parity: y = A @ x."""
    lowered = _lower(make_matvec(M, K, stages=stages))
    rng = np.random.default_rng(M * K + stages)
    a = rng.standard_normal((M, K)).astype(np.float32)
    x = rng.standard_normal(K).astype(np.float32)
    y = np.full(M, np.nan, np.float32)
    y = emulate(lowered, a, x, y)[2]
    np.testing.assert_allclose(y, a.astype(np.float64) @ x.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_wrong_parity_is_caught_emulated():
    """Waiting on the phase that has not completed would spin forever on a GPU."""
    lowered = _lower(make_matvec(128, 64, flip_parity=True))
    args = [np.ones((128, 64), np.float32), np.ones(64, np.float32), np.zeros(128, np.float32)]
    with pytest.raises(EmulationError, match="never return"):
        emulate(lowered, *args)


@pytest.mark.parametrize("M,N,K,stages", [(72, 80, 100, 3), (64, 64, 32, 2), (130, 70, 75, 1)])
def test_ws_gemm_emulated(M, N, K, stages):
    """The warp-specialized GEMM (k loop around both scopes) against float64."""
    lowered = _lower(make_ws_gemm(M, N, K, stages=stages, interleaved=True))
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    c = emulate(lowered, a, b, c)[2]
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_separate_loops_run_interleaved_in_emulation():
    """With a k loop per warpgroup the emulator runs the two T.ws branches as cooperative
    tasks (tilelang/testing/cuda_emulator_ws.py): the producer's wait on an empty slot hands
    the turn to the consumer, and the GEMM comes out right."""
    lowered = _lower(make_ws_gemm(64, 64, 160, stages=2))
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (64, 160)).astype(np.float16)
    b = rng.integers(-3, 4, (160, 64)).astype(np.float16)
    from test_gemm_wgmma_emulation import emulate_wgmma

    (_, _, c), _ = emulate_wgmma(lowered, a, b, np.zeros((64, 64), np.float32))
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("mode", ["late_writes", "late_reads"])
@pytest.mark.parametrize("M,N,K", [(72, 80, 100), (128, 64, 64)])
def test_wgmma_gemm_with_explicit_wait_emulated(M, N, K, mode):
    """T.wgmma_gemm leaves its group pending; T.wait_wgmma(0) completes it and fences the
    accumulators. The emulator lands wgmma writes (or reads) late, at the wait."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    lowered = _lower(make_wgmma_gemm(M, N, K))
    text = str(lowered)
    commit = text.index("tl::wgmma_commit")
    assert text.index("tl::wgmma_wait<0>", commit) < text.index("tl::wgmma_fence_operand", commit)
    rng = np.random.default_rng(M * N + K)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    (_, _, c), _ = emulate_wgmma(lowered, a, b, np.full((M, N), np.nan, np.float32), mode=mode)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_wgmma_gemm_without_wait_is_caught_emulated():
    from test_gemm_wgmma_emulation import emulate_wgmma

    lowered = _lower(make_wgmma_gemm(64, 64, 64, wait=False))
    assert "tl::wgmma_wait" not in str(lowered)
    a, b = np.ones((64, 64), np.float16), np.ones((64, 64), np.float16)
    with pytest.raises(EmulationError, match="pending"):
        emulate_wgmma(lowered, a, b, np.zeros((64, 64), np.float32), mode="late_writes")


def test_wgmma_gemm_errors_name_the_line():
    line = f"hopper_kernels.py:{_kernel_line('WGMMA_GEMM')}:"
    with pytest.raises(
        errors.CompileError, match="T.wgmma_gemm is not supported on CUDA sm_80"
    ) as e:
        _lower(make_wgmma_gemm(64, 64, 64), "sm_80")
    assert line in str(e.value)
    with pytest.raises(
        tilelang.CompileError, match="T.wgmma_gemm is not supported on the cpu"
    ) as e:
        tilelang.compile(make_wgmma_gemm(64, 64, 64), target="cpu")
    assert line in str(e.value)
    with pytest.raises(errors.CompileError, match="T.wgmma_gemm: this gemm cannot use wgmma") as e:
        _lower(make_wgmma_gemm(64, 64, 64, threads=64))
    assert line in str(e.value)


def _kernel_line(tag):
    path = Path(__file__).resolve().parent / "hopper_kernels.py"
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# {tag}"):
            return i
    raise AssertionError(tag)


# --------------------------------------------------------------------- lowering shape
def test_ws_scopes_become_one_if_else_without_barriers():
    """The producer/consumer scopes are chained (one statement for the barrier analysis):
    no __syncthreads between them; only the two barrier initialisations synchronise."""
    text = str(_lower(make_ws_gemm(200, 136, 100)))
    assert text.count('"__syncthreads"') == 2
    assert "tl::ws_branch" not in text
    producer = text.index("tl::set_max_nreg<40, 0>")
    consumer = text.index("tl::set_max_nreg<232, 1>")
    between = text[producer:consumer]
    assert re.search(r"\n\s*else:\n", between)
    assert "tl::mbarrier_wait" in between and "tl::mbarrier_arrive" in between
    assert text.count('tl::mbarrier_init"') == 6


def test_unmarked_thread_branches_keep_their_barrier():
    """Plain ``if`` statements on thread ranges still hand shared data over a barrier."""

    @T.prim_func
    def handoff(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256):
            S = T.alloc_shared((128,), "float32")
            tx = T.get_thread_binding()
            if tx < 128:
                S[tx] = A[tx] * 2.0
            if tx >= 128:
                B[tx - 128] = S[255 - tx]

    lowered = _lower(handoff)
    assert str(lowered).count('"__syncthreads"') == 1
    a = np.arange(128, dtype=np.float32)
    b = emulate(lowered, a, np.zeros(128, np.float32))[1]
    np.testing.assert_array_equal(b, 2.0 * a[::-1])


def test_alloc_barrier_initialises_every_count():
    @T.prim_func
    def init(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128):
            bars = T.alloc_barrier([1, 2, 128])
            T.mbarrier_arrive(bars[2])
            T.mbarrier_wait_parity(bars[2], 0)
            A[0] = 1.0

    text = str(_lower(init))
    for i, count in enumerate((1, 2, 128)):
        assert f"T.address_of(bars[{i}]), T.uint32({count})" in text
    assert "tl::mbarrier_init_fence" in text


def test_expect_tx_counts_bytes_emulated():
    """A phase completes only once its expected bytes arrived: an expect_tx that no copy
    pays for leaves the phase open (the wait is reported)."""

    @T.prim_func
    def unpaid(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            bar = T.alloc_barrier(1)
            tx = T.get_thread_binding()
            if tx == 0:
                T.mbarrier_expect_tx(bar, 256)
                T.mbarrier_arrive(bar)
            T.mbarrier_wait_parity(bar, 0)
            A[tx] = 1.0

    with pytest.raises(EmulationError, match="never return"):
        emulate(_lower(unpaid), np.zeros(128, np.float32))


def test_arrive_expect_tx_zero_completes_emulated():
    @T.prim_func
    def paid(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            bar = T.alloc_barrier(1)
            tx = T.get_thread_binding()
            if tx == 0:
                T.mbarrier_arrive_expect_tx(bar, 0)
            T.barrier_wait(bar, 0)
            A[tx] = T.cast(tx, "float32")

    out = emulate(_lower(paid), np.zeros(128, np.float32))[0]
    np.testing.assert_array_equal(out, np.arange(128, dtype=np.float32))


def test_ws_branches_waiting_on_each_other_report_both_waits_emulated():
    """Each T.ws branch waits for the other's arrival before arriving itself: the deadlock
    a GPU would hang in. The emulator's error names the barrier the reporting branch waits
    on and what the other branch waits for (the task scheduler of cuda_emulator_cluster)."""

    @T.prim_func
    def crossed(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            bars = T.alloc_barrier([128, 128])
            tx = T.get_thread_binding()
            with T.ws(0):
                T.mbarrier_wait_parity(bars[1], 0)
                T.mbarrier_arrive(bars[0])
                A[tx] = 1.0
            with T.ws(1):
                T.mbarrier_wait_parity(bars[0], 0)
                T.mbarrier_arrive(bars[1])
                A[tx] = 2.0

    with pytest.raises(EmulationError, match="deadlock") as e:
        emulate(_lower(crossed), np.zeros(256, np.float32))
    text = str(e.value)
    assert re.search(r"mbarrier_wait on bars\[[01]\].*never return", text)
    assert "branch 0 (threads 0..127)" in text or "branch 1 (threads 128..255)" in text
    assert text.count("mbarrier_wait on bars") == 2  # this branch's wait and the other's


# -------------------------------------------------------------------------- errors
def _api_kernel(name):
    """A one-call kernel for each API name (the call's line is tagged ``API_CALL``)."""
    calls = {
        "alloc_barrier": lambda: T.alloc_barrier(1),
        "mbarrier_arrive": lambda: T.mbarrier_arrive(T.alloc_shared((1,), "uint64")[0]),
        "mbarrier_wait_parity": lambda: T.mbarrier_wait_parity(T.alloc_shared((1,), "uint64"), 0),
        "mbarrier_expect_tx": lambda: T.mbarrier_expect_tx(T.alloc_shared((1,), "uint64"), 8),
        "fence_proxy_async": T.fence_proxy_async,
        "set_max_nreg": lambda: T.set_max_nreg(240, 1),
        "warpgroup_arrive": T.warpgroup_arrive,
        "warpgroup_wait": lambda: T.warpgroup_wait(0),
        "cluster_sync": T.cluster_sync,
        "cluster_arrive": T.cluster_arrive,
        "cluster_wait": T.cluster_wait,
    }
    make = calls[name]

    @T.prim_func
    def k(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            make()  # API_CALL
            A[T.get_thread_binding()] = 1.0

    return k


API_NAMES = [
    "alloc_barrier",
    "mbarrier_arrive",
    "mbarrier_wait_parity",
    "mbarrier_expect_tx",
    "fence_proxy_async",
    "set_max_nreg",
    "warpgroup_arrive",
    "warpgroup_wait",
    "cluster_sync",
    "cluster_arrive",
    "cluster_wait",
]


@pytest.mark.parametrize("name", API_NAMES)
def test_not_supported_on_cpu(name):
    with pytest.raises(tilelang.CompileError) as info:
        tilelang.compile(_api_kernel(name), target="cpu")
    message = str(info.value)
    assert message.startswith(f"{THIS_FILE}:{_line_of('API_CALL')}: ") or (
        f"{THIS_FILE}:{_line_of('API_CALL')}:" in message
    ), message
    assert f"T.{name} is not supported on the cpu target" in message


@pytest.mark.parametrize("name", ["mbarrier_arrive", "set_max_nreg", "cluster_sync"])
@pytest.mark.parametrize("target", ["rocm", "metal"])
def test_not_supported_on_rocm_metal(name, target):
    if target == "rocm":
        from tilelang.backends.rocm import pipeline as other

        spec = {"kind": "rocm", "arch": "gfx90a"}
    else:
        from tilelang.backends.metal import pipeline as other

        spec = {"kind": "metal"}
    with pytest.raises(errors.CompileError) as info:
        other.lower(_api_kernel(name), spec)
    assert f"T.{name} is not supported on the {target} target" in str(info.value)
    assert f":{_line_of('API_CALL')}:" in str(info.value)


@pytest.mark.parametrize("name", [n for n in API_NAMES if n not in ("set_max_nreg",)])
def test_sm80_rejects_hopper_instructions(name):
    with pytest.raises(errors.CompileError) as info:
        _lower(_api_kernel(name), "sm_80")
    message = str(info.value)
    assert f":{_line_of('API_CALL')}:" in message
    assert f"T.{name} is not supported on CUDA sm_80" in message


@pytest.mark.parametrize("name", ["set_max_nreg", "warpgroup_arrive", "warpgroup_wait"])
def test_sm90_without_a_rejects_arch_specific(name):
    with pytest.raises(errors.CompileError, match=rf"T.{name} is not supported on CUDA sm_90 "):
        _lower(_api_kernel(name), "sm_90")
    assert "tl::" in str(_lower(_api_kernel(name), "sm_90a"))


def test_sm90_accepts_mbarriers_and_clusters():
    for name in ("mbarrier_arrive", "cluster_sync", "fence_proxy_async", "alloc_barrier"):
        _lower(_api_kernel(name), "sm_90")


def _trace_error(body, threads=128):
    @T.prim_func
    def k(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=threads):
            body()  # BAD_CALL
            A[0] = 1.0

    return k


@pytest.mark.parametrize(
    "body,match",
    [
        (lambda: T.alloc_barrier(0), "arrive_count must be an integer >= 1"),
        (lambda: T.alloc_barrier([]), "arrive_count must be an integer >= 1"),
        (lambda: T.alloc_barrier([4, -1]), "arrive_count must be an integer >= 1"),
        (lambda: T.set_max_nreg(100, 1), "multiple of 8 in 24..256"),
        (lambda: T.set_max_nreg(16, 0), "multiple of 8 in 24..256"),
        (lambda: T.set_max_nreg(64, 2), "is_inc must be 0 or 1"),
        (lambda: T.warpgroup_wait(8), "num_mma must be an integer in 0..7"),
        (
            lambda: T.mbarrier_arrive(T.alloc_shared((2,), "float32")[0]),
            "is not a barrier",
        ),
        (lambda: T.mbarrier_arrive(3), "mbarrier must be a barrier from T.alloc_barrier"),
        (lambda: T.mbarrier_arrive(T.alloc_barrier(1), cta_id=1), "cta_id"),
        (lambda: T.mbarrier_expect_tx(T.alloc_barrier(1), -4), "tx must be a non-negative"),
        (lambda: T.ws(2).__enter__(), r"only 128 threads \(1 warpgroups\)"),
        (lambda: T.ws(), "warpgroup indices"),
    ],
)
def test_bad_arguments_name_the_line(body, match):
    with pytest.raises(errors.TraceError, match=match) as info:
        _trace_error(body)
    assert f"{THIS_FILE}:{_line_of('BAD_CALL')}" in str(info.value)


def test_cluster_launch_checks_name_the_line():
    """A cluster launch lowers on sm_90+ (its shape reaches the kernel as the
    ``tl::cluster_dims`` marker, test_cluster_multicast.py); a grid that is not a whole number
    of clusters is refused at the user's line."""
    with pytest.raises(errors.TraceError, match="not a multiple of the cluster") as e:

        @T.prim_func
        def k(A: T.Tensor((128,), "float32")):
            with T.ClusterKernel(3, cluster_dims=(2, 1, 1), threads=128):  # CLUSTER_LAUNCH
                A[0] = 1.0

    assert f"{THIS_FILE}:{_line_of('CLUSTER_LAUNCH')}" in str(e.value)

    @T.prim_func
    def one(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128, cluster_dims=1):
            A[T.get_thread_binding()] = T.block_rank_in_cluster() + 5

    text = str(_lower(one))
    assert "tl::block_rank_in_cluster" in text
    with pytest.raises(tilelang.CompileError, match="T.block_rank_in_cluster is not supported"):
        tilelang.compile(one, target="cpu")
    with pytest.raises(errors.CompileError, match="not supported on CUDA sm_80"):
        _lower(one, "sm_80")


def _ws_with(body_kind):
    @T.prim_func
    def k(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256):
            S = T.alloc_shared((128,), "float32")
            with T.ws(1):
                if body_kind == "copy":
                    T.copy(A, S)  # WS_COPY
                elif body_kind == "parallel":
                    for i in T.Parallel(128):  # WS_PARALLEL
                        B[i] = A[i]
                elif body_kind == "sync":
                    T.sync_threads()  # WS_SYNC
                else:
                    for i in T.Pipelined(4, num_stages=2):  # WS_PIPE
                        B[i] = A[i]

    return k


@pytest.mark.parametrize(
    "kind,what,tag",
    [
        ("sync", "T.sync_threads", "WS_SYNC"),
        ("pipe", "T.Pipelined", "WS_PIPE"),
    ],
)
def test_block_wide_ops_inside_ws_are_refused(kind, what, tag):
    """They are partitioned over all threads: in a warpgroup scope part would never run
    (T.copy/T.fill/T.gemm/T.reduce_* and T.Parallel are re-planned over the scope's threads:
    test_ws_copy_and_parallel_run_on_the_warpgroup, test_ws_thread_range_gemm.py)."""
    with pytest.raises(errors.CompileError, match=rf"{what} inside a T.ws scope") as e:
        _lower(_ws_with(kind))
    # a loop is named by the first line of its body
    lines = (_line_of(tag), _line_of(tag) + 1) if kind in ("parallel", "pipe") else (_line_of(tag),)
    assert any(f"{THIS_FILE}:{n}: " in str(e.value) for n in lines), str(e.value)


@pytest.mark.parametrize("kind", ["copy", "parallel"])
def test_ws_copy_and_parallel_run_on_the_warpgroup(kind):
    """A T.copy / T.Parallel in ``T.ws(1)`` is planned over threads 128..255 (emulated)."""
    from tilelang.testing.cuda_emulator import emulate

    a = np.random.default_rng(0).standard_normal(128).astype(np.float32)
    low = _lower(_ws_with(kind))
    _, b = emulate(low, a, np.zeros(128, np.float32), race_check=True)
    np.testing.assert_array_equal(b, a if kind == "parallel" else np.zeros(128, np.float32))


def test_ws_per_thread_code_on_cpu():
    """Per-thread code in a ``T.ws`` scope runs on the CPU backend on that warpgroup's
    threads; the explicit mbarrier API there is refused naming the line."""

    @T.prim_func
    def k(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            with T.ws(1):
                A[T.get_thread_binding()] = 1.0

    a = torch.zeros(256)
    tilelang.compile(k, target="cpu")(a)
    np.testing.assert_array_equal(a.numpy(), (np.arange(256) >= 128).astype(np.float32))

    @T.prim_func
    def waits(A: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            bar = T.alloc_barrier(arrive_count=128)
            with T.ws(1):
                T.barrier_wait(bar, 0)  # WS_CPU
                A[T.get_thread_binding()] = 1.0

    with pytest.raises(tilelang.CompileError, match="not supported on the CPU backend") as e:
        tilelang.compile(waits, target="cpu")
    assert f":{_line_of('WS_CPU')}:" in str(e.value)


# ---------------------------------------------------------------------------- SASS
def _nvcc_or_skip():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")


def _ops(sass):
    return set(re.findall(r"\b((?:SYNCS|USETMAXREG|UCGABAR|FENCE|BAR)[\.\w]*)", sass))


def test_sass_of_ws_gemm_has_syncs_and_setmaxnreg():
    _nvcc_or_skip()
    from test_tma import _sass

    art = pipeline.build(make_ws_gemm(1000, 1000, 1000), SM90A, compiler="nvcc")
    assert 'extern "C" __global__ void __launch_bounds__(256, 1) main_kernel(' in art.kernel_source
    assert "hopper.h" in art.meta["extra_headers"]
    ops = _ops(_sass(art))
    assert {"SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT"} <= ops
    # ptxas drops setmaxnreg (warning C7508) without the register cap at entry
    assert {"USETMAXREG.DEALLOC.CTAPOOL", "USETMAXREG.TRY_ALLOC.CTAPOOL"} <= ops


def test_sass_of_cluster_fence_and_named_barriers():
    _nvcc_or_skip()
    from test_tma import _sass

    @T.prim_func
    def k(A: T.Tensor((128,), "float32")):
        with T.Kernel(2, threads=128):
            T.cluster_arrive_relaxed()
            T.cluster_wait()
            T.cluster_sync()
            T.fence_proxy_async()
            T.named_barrier_arrive(1, 128)
            T.named_barrier_sync(2, 128)
            A[T.get_thread_binding()] = 1.0

    art = pipeline.build(k, SM90A, compiler="nvcc")
    assert "__launch_bounds__(128)" in art.kernel_source  # no setmaxnreg: TIRx's bounds
    ops = _ops(_sass(art))
    assert {"UCGABAR_ARV", "UCGABAR_WAIT", "FENCE.VIEW.ASYNC.S", "BAR.ARV"} <= ops


def test_register_cap_only_on_kernels_calling_setmaxnreg():
    from tilelang.backends.cuda.hopper_source import with_register_cap

    code = (
        'extern "C" __global__ void __launch_bounds__(128) a_kernel(int* x);\n'
        'extern "C" __global__ void __launch_bounds__(128) a_kernel(int* x) { f(); }\n'
        'extern "C" __global__ void __launch_bounds__(384) b_kernel(int* x) {\n'
        "  tl::set_max_nreg<240, 1>();\n}\n"
    )
    out = with_register_cap(code)
    assert out.count("__launch_bounds__(128) a_kernel") == 2
    assert "__launch_bounds__(384, 1) b_kernel" in out


# ----------------------------------------------------------------------------- GPU
def _load(func):
    from tilelang.backends.cuda import load_kernel

    return load_kernel(pipeline.build(func, {"kind": "cuda"}))


@pytest.mark.cuda
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(
    "shape,stages",
    [((1024, 1024, 1024), 3), ((1000, 776, 520), 3), ((77, 130, 45), 2), ((512, 256, 2048), 4)],
)
def test_ws_gemm_matches_torch_gpu(shape, stages, interleaved):
    """Producer warpgroup (setmaxnreg.dec) and consumer (setmaxnreg.inc) on full/empty
    mbarrier rings, against torch in float64."""
    import torch

    M, N, K = shape
    kernel = _load(make_ws_gemm(M, N, K, stages=stages, interleaved=interleaved))
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (1000, 776, 520), (77, 130, 45)])
def test_wgmma_gemm_matches_torch_gpu(shape):
    import torch

    M, N, K = shape
    kernel = _load(make_wgmma_gemm(M, N, K))
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("M,K,stages", [(1000, 999, 2), (4096, 512, 3)])
def test_ws_matvec_matches_torch_gpu(M, K, stages):
    import torch

    kernel = _load(make_matvec(M, K, stages=stages))
    a = torch.randn((M, K), device="cuda", dtype=torch.float32)
    x = torch.randn((K,), device="cuda", dtype=torch.float32)
    y = torch.full((M,), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y.double(), a.double() @ x.double(), rtol=1e-4, atol=1e-3)


@pytest.mark.cuda
def test_cluster_barriers_and_named_barriers_run_gpu():
    """Cluster barriers of a one-CTA cluster and named barriers complete (no hang), and the
    named barrier orders the producer warp's shared write before the consumers' reads."""
    import torch

    @T.prim_func
    def k(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256):
            S = T.alloc_shared((256,), "float32")
            tx = T.get_thread_binding()
            T.cluster_sync()
            S[tx] = A[tx] + T.cast(T.block_rank_in_cluster(), "float32") + 1.0
            T.named_barrier_sync(1, 256)
            B[tx] = S[255 - tx]
            T.cluster_arrive()
            T.cluster_wait()

    a = torch.randn(256, device="cuda")
    b = torch.zeros(256, device="cuda")
    _load(k)(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(b.double(), (a.double() + 1.0).flip(0))
