"""Upstream's explicit warp-specialization schedule (``T.WSSchedule``, ``T.WSRole``,
``T.WSPipeline``, ``T.WSScope``, ``T.WSSync``, ``T.WSID``, ``T.ws_op``,
``T.annotate_ws_schedule``, ``T.annotate_ws_pipeline_depth``): the objects' checks, every
schedule error, CPU results (program order) against numpy in float64, the sm_90a
materialization (lowered structure, emulated results, SASS of nvcc builds), the sm_80
program-order form, and GPU runs against torch (marked cuda)."""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "backends" / "cuda"))
from ws_schedule_kernels import (  # noqa: E402
    chained_ws,
    copy_ws,
    gemm_ws,
    persistent_gemm,
    while_scope,
)

SM90A = {"kind": "cuda", "arch": "sm_90a"}
SM80 = {"kind": "cuda", "arch": "sm_80"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _ints(rng, shape, dtype=np.float16):
    return rng.integers(-3, 4, size=shape).astype(dtype)


def _copy_ref(a, bM=64):
    return a.astype(np.float64) * 2 + (np.arange(a.shape[0]) // bM)[:, None]


# ------------------------------------------------------------------------------ objects
def test_names_are_provided_not_refused():
    from tilelang.language.not_lowered import NOT_LOWERED

    assert T.WSID == "tl.ws_op_id" and T.WSScope.ROOT == "tl.ws_scope_root"
    for name in ("WSID", "WSRole", "WSSchedule", "WSSync", "annotate_ws_schedule", "ws_op"):
        assert name not in NOT_LOWERED
    assert {k.name for k in T.WSSyncKind} == {
        "PRODUCER_ACQUIRE",
        "PRODUCER_COMMIT",
        "CONSUMER_WAIT",
        "CONSUMER_RELEASE",
    }
    s = T.WSSync.consumer_release("p", stage=2)
    assert (s.kind, s.pipeline, s.stage) == (T.WSSyncKind.CONSUMER_RELEASE, "p", 2)
    scope = T.WSScope("loop", {"R": ["a", T.WSSync.producer_acquire("p")]})
    assert isinstance(scope.bodies["R"][0], T.WSOpRef) and scope.bodies["R"][0].id == "a"
    assert isinstance(scope.bodies["R"][1], T.WSInstr)


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: T.WSSchedule(6, [], [], []), "multiple of 4"),
        (lambda: T.WSSchedule(0, [], [], []), "num_warps"),
        (lambda: T.WSRole("r", warps_lo=2, warps_hi=2), "warps_hi"),
        (lambda: T.WSRole("r", warps_lo=0, warps_hi=1, max_nreg=30), "max_nreg"),
        (lambda: T.WSRole("", warps_lo=0, warps_hi=1), "name"),
        (lambda: T.WSSync("PRODUCER_ACQUIRE", "p"), "WSSyncKind"),
        (lambda: T.WSSync.producer_acquire("p", stage=-1), "stage"),
        (lambda: T.WSScope("s", {"R": "a"}), "must be a list"),
        (lambda: T.WSScope("s", {"R": [3]}), "op id or a T.WSSync"),
        (lambda: T.WSSchedule(4, ["r"], [], []), "roles must be a list of T.WSRole"),
        (lambda: T.WSOpRef(""), "non-empty"),
    ],
)
def test_objects_check_their_arguments(build, match):
    with pytest.raises(errors.TraceError, match=match):
        build()


def test_pipeline_and_annotation_need_tiles_inside_a_kernel():
    with pytest.raises(errors.TraceError, match="expects a T.WSSchedule"):

        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_ws_schedule({"num_warps": 4})

    with pytest.raises(errors.TraceError, match="depth"):

        @T.prim_func
        def main2(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((4,), "float32")
                T.WSPipeline("p", [s], depth=0)


# ------------------------------------------------------------------------------ CPU
@pytest.mark.parametrize("M,N,K", [(100, 72, 200), (130, 60, 90)])
def test_gemm_schedule_cpu(M, N, K):
    """Upstream-style schedule GEMM on the CPU (program order) against float64."""
    rng = np.random.default_rng()
    a, b = (
        rng.standard_normal((M, K)).astype(np.float16),
        rng.standard_normal((K, N)).astype(np.float16),
    )
    c = torch.full((M, N), float("nan"))
    tilelang.compile(gemm_ws(M, N, K), target="cpu")(torch.from_numpy(a), torch.from_numpy(b), c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("M,N", [(300, 40), (70, 24)])
def test_copy_schedule_cpu(M, N):
    a = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    b = torch.full((M, N), float("nan"))
    tilelang.compile(copy_ws(M, N), target="cpu")(torch.from_numpy(a), b)
    np.testing.assert_allclose(b.numpy(), _copy_ref(a), rtol=1e-6, atol=1e-5)


def test_while_scope_and_ws_op_cpu():
    n = 100
    x = np.random.default_rng().standard_normal(n).astype(np.float32)
    out = torch.full((32,), float("nan"))
    tilelang.compile(while_scope(n), target="cpu")(torch.from_numpy(x), out)
    padded = np.zeros(128)
    padded[:n] = x
    np.testing.assert_allclose(out.numpy(), padded.reshape(4, 32).sum(0), rtol=1e-5, atol=1e-5)


def _persistent_inputs(M, N, K):
    rng = np.random.default_rng()
    a, b = _ints(rng, (M, K)), _ints(rng, (N, K))
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


@pytest.mark.parametrize("M,N,K", [(200, 136, 100), (64, 70, 40)])
def test_upstream_aws_style_persistent_gemm_cpu(M, N, K):
    """upstream examples/aws/gemm.py's schedule shape (three roles, two pipelines, a span
    opened around a child scope, a while scope, ops every role runs) on the CPU."""
    a, b, want = _persistent_inputs(M, N, K)
    c = torch.full((M, N), float("nan"))
    tilelang.compile(persistent_gemm(M, N, K), target="cpu")(
        torch.from_numpy(a), torch.from_numpy(b), c
    )
    np.testing.assert_array_equal(c.numpy(), want)


def test_eager_jit_kernel_with_a_schedule_cpu():
    """The schedule inside an eager ``@tilelang.jit`` body (T.const / T.empty)."""

    @tilelang.jit(target="cpu")
    def scale(A, block_M, depth, tagged):
        M, N = T.const("M, N")
        A: T.Tensor((M, N), T.float32)
        B = T.empty((M, N), T.float32)
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((block_M, N), T.float32)
            A_f = T.alloc_fragment((block_M, N), T.float32)
            T.annotate_ws_schedule(
                T.WSSchedule(
                    num_warps=8,
                    roles=[
                        T.WSRole("P", warps_lo=0, warps_hi=1),
                        T.WSRole("C", warps_lo=4, warps_hi=8),
                    ],
                    pipelines=[T.WSPipeline("buf", [A_s], depth=depth)],
                    scopes=[
                        T.WSScope(
                            "loop",
                            {
                                "P": [ACQ("buf"), "in", COM("buf")],
                                "C": [WAIT("buf"), "frag", REL("buf")]
                                + (["mul"] if tagged else [])
                                + ["out"],
                            },
                        ),
                        T.WSScope(T.WSScope.ROOT, {"P": ["loop"], "C": ["loop"]}),
                    ],
                )
            )
            for i in T.Pipelined(
                T.ceildiv(M, block_M), num_stages=depth, annotations={T.WSID: "loop"}
            ):
                T.copy(A[i * block_M, 0], A_s, annotations={T.WSID: "in"})
                T.copy(A_s, A_f, annotations={T.WSID: "frag"})
                for r, c in T.Parallel(block_M, N, annotations={T.WSID: "mul"} if tagged else None):
                    A_f[r, c] = A_f[r, c] * 3.0
                T.copy(A_f, B[i * block_M, 0], annotations={T.WSID: "out"})
        return B

    a = torch.randn(150, 24)
    np.testing.assert_allclose(scale(a, 64, 2, True).numpy(), a.double().numpy() * 3, rtol=1e-6)
    with pytest.raises(errors.CompileError, match="has no T.WSID"):
        scale(a, 64, 2, False)  # the T.Parallel nest has no id


def test_scalar_and_atomic_ops_carry_ids_cpu():
    """upstream's one-role schedule over a copy and the three atomics (ids on each)."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=128):
            T.annotate_ws_schedule(
                T.WSSchedule(
                    num_warps=4,
                    roles=[T.WSRole("Worker", warps_lo=0, warps_hi=4, max_nreg=224)],
                    pipelines=[],
                    scopes=[T.WSScope(T.WSScope.ROOT, {"Worker": ["copy", "max", "min", "add"]})],
                )
            )
            T.copy(A[0], B[0], annotations={T.WSID: "copy"})
            T.atomic_max(B[1], A[1], annotations={T.WSID: "max"})
            T.atomic_min(B[2], A[2], annotations={T.WSID: "min"})
            T.atomic_add(B[3], A[3], annotations={T.WSID: "add"})

    a = np.random.default_rng().standard_normal(4).astype(np.float32)
    b = np.random.default_rng().standard_normal(4).astype(np.float32)
    out = torch.from_numpy(b.copy())
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    want = [a[0], max(a[1], b[1]), min(a[2], b[2]), np.float64(a[3]) + b[3]]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


# ------------------------------------------------------------------------------ errors
def _set(key, value):
    def edit(parts):
        parts[key] = value(parts) if callable(value) else value

    return edit


def _body(role, instrs):
    def edit(parts):
        parts["bodies"][role] = instrs

    return edit


def _roles(*spec):
    return lambda parts: [T.WSRole(n, warps_lo=lo, warps_hi=hi) for n, lo, hi in spec]


ACQ, COM = T.WSSync.producer_acquire, T.WSSync.producer_commit
WAIT, REL = T.WSSync.consumer_wait, T.WSSync.consumer_release
ERRORS = {
    "unknown_op": (
        _body("Producer", [ACQ("buf"), "copy_inn", COM("buf")]),
        "unknown op id 'copy_inn'",
    ),
    "unplaced_op": (
        _body("Consumer", [WAIT("buf"), "copy_frag", REL("buf"), "scale"]),
        "op 'copy_out'.*is not placed",
    ),
    "one_role_pipeline": (
        _body("Consumer", ["copy_frag", "scale", "copy_out"]),
        "touches pipeline 'buf'.*outside|exactly 2 roles",
    ),
    "three_role_pipeline": (
        lambda p: (
            p.__setitem__(
                "roles", _roles(("Producer", 0, 1), ("Consumer", 4, 8), ("Extra", 1, 2))(p)
            ),
            p["bodies"].__setitem__("Extra", [WAIT("buf"), REL("buf")]),
        ),
        "exactly 2 roles.*got 3",
    ),
    "commit_missing": (_body("Producer", [ACQ("buf"), "copy_in"]), "unpaired sync of 'buf'"),
    "commit_without_acquire": (
        _body("Producer", ["copy_in", COM("buf")]),
        "touches pipeline 'buf'.*outside|unpaired PRODUCER_COMMIT",
    ),
    "stage_mismatch": (
        _body("Producer", [ACQ("buf", stage=0), "copy_in", COM("buf", stage=1)]),
        "at stage 1 pairs with stage 0",
    ),
    "mixed_kinds": (
        _body("Producer", [ACQ("buf"), "copy_in", COM("buf"), WAIT("buf"), REL("buf")]),
        "one role must only acquire/commit",
    ),
    "warps_out_of_range": (
        _set("roles", _roles(("Producer", 0, 1), ("Consumer", 4, 12))),
        "out of range",
    ),
    "roles_overlap": (_set("roles", _roles(("Producer", 0, 5), ("Consumer", 4, 8))), "overlap"),
    "unknown_pipeline": (
        _body("Producer", [ACQ("bf"), "copy_in", COM("bf")]),
        "unknown pipeline 'bf'",
    ),
    "unknown_role": (
        _set("root", {"Producer": ["loop_k"], "Consumr": ["loop_k"]}),
        "unknown role 'Consumr'",
    ),
    "placed_twice": (
        _body("Producer", [ACQ("buf"), "copy_in", "copy_frag", COM("buf")]),
        "placed by several roles",
    ),
    "reordered": (
        _body("Consumer", [WAIT("buf"), "copy_frag", REL("buf"), "copy_out", "scale"]),
        "runs op 'scale' after 'copy_out' in the same iteration",
    ),
    "wrong_scope": (
        _set("root", {"Producer": ["loop_k", "copy_in"], "Consumer": ["loop_k"]}),
        "belongs to scope",
    ),
    "no_root": (_set("root", None), "no root scope"),
    "unknown_scope": (
        lambda p: p.__setitem__("extra_scopes", [T.WSScope("loop_x", {"Producer": []})]),
        "scope 'loop_x' names no loop",
    ),
    "two_pipelines_one_tile_two_scopes": (
        lambda p: p["root"].update(
            {
                "Producer": [ACQ("buf"), "loop_k", COM("buf")],
                "Consumer": [WAIT("buf"), "loop_k", REL("buf")],
            }
        ),
        "synchronizes more than one scope",
    ),
}


def _kernel_with(case):
    return copy_ws(130, 16, edit=ERRORS[case][0])


@pytest.mark.parametrize("case", sorted(ERRORS))
@pytest.mark.parametrize("target", ["cpu", "sm_90a", "sm_80"])
def test_invalid_schedules_are_errors(case, target):
    """Every broken schedule stops with a CompileError at the T.annotate_ws_schedule line
    naming the problem, on every target that checks schedules."""
    func = _kernel_with(case)
    with pytest.raises(errors.CompileError, match=ERRORS[case][1]) as info:
        if target == "cpu":
            tilelang.compile(func, target="cpu")
        else:
            pipeline.lower(func, SM90A if target == "sm_90a" else SM80)
    assert "ws_schedule_kernels.py" in str(info.value)


@pytest.mark.parametrize(
    "consumer,producer", [((4, 12, 248), (0, 1, 40)), ((4, 12, 232), (0, 1, 0))]
)
def test_register_budgets_beyond_the_register_file_are_errors(consumer, producer):
    """2 x 128 x 248 + 128 x 40 > 65536; a producer without max_nreg keeps 168 (384 threads)."""
    kw = {"consumer": consumer, "producer": producer, "num_warps": 12, "bM": 128}
    with pytest.raises(errors.CompileError, match="exceed the 65536"):
        pipeline.lower(gemm_ws(100, 72, 200, **kw), SM90A)
    f = pipeline.lower(gemm_ws(100, 72, 200, **kw), SM80)
    assert f.attrs["tl.ws_schedule"].startswith("program order")  # no setmaxnreg there


def test_unannotated_statement_is_an_error():
    with pytest.raises(errors.CompileError, match="has no T.WSID"):
        drop = lambda parts: parts["bodies"]["Consumer"].remove("copy_out")  # noqa: E731
        tilelang.compile(copy_ws(130, 16, unannotated=True, edit=drop), target="cpu")


def test_duplicate_id_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            T.copy(A, B, annotations={T.WSID: "x"})
            T.copy(B, A, annotations={T.WSID: "x"})

    with pytest.raises(errors.CompileError, match="names two statements"):
        tilelang.compile(main, target="cpu")


# ------------------------------------------------------------------------------ sm_90a
def _lower(func, target=SM90A, configs=None):
    return pipeline.lower(func, target, configs)


def test_gemm_schedule_materializes_on_sm90a():
    """Roles on the schedule's warps: consumers are warps 4..7 (thread index shifted by
    128), the producer's issuing thread is thread 0 (warp 0); setmaxnreg per role; 3-deep
    full/empty mbarrier rings; every marker consumed."""
    f = _lower(gemm_ws(100, 72, 200))
    text = str(f)
    assert f.attrs["tl.ws_schedule"].startswith("materialized: loop loop_k")
    assert 'T.launch_thread("threadIdx.x", 256)' in text
    assert "if tx >= 128 and tx < 256:" in text
    assert "tl::set_max_nreg<232, 1>" in text and "tl::set_max_nreg<40, 0>" in text
    assert "(tx + 128) % 128 + 128 == 128" in text  # thread 0 issues the TMA loads
    assert text.count('"tl::mbarrier_init",') == 6 and "tma_full_k[2]" in text
    assert "tl::tma_load_2d" in text
    assert "tl.ws_op" not in text and 'tl.ws_schedule",' not in text


@pytest.mark.parametrize(
    "consumer,producer,num_warps",
    [((4, 8, 232), (0, 1, 40), 8), ((0, 4, 0), (5, 7, 0), 8), ((4, 12, 224), (1, 2, 40), 12)],
)
def test_gemm_schedule_emulated_sm90a(consumer, producer, num_warps):
    """The materialized GEMM with tails, emulated (producer and consumers interleaved,
    TMA boxes and mbarrier phases modelled): exact against float64."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    M, N, K = 200, 72, 200
    bM = 32 * (consumer[1] - consumer[0]) // 2
    f = _lower(gemm_ws(M, N, K, bM=bM, consumer=consumer, producer=producer, num_warps=num_warps))
    assert f.attrs["tl.ws_schedule"].startswith("materialized")
    assert f'T.launch_thread("threadIdx.x", {32 * num_warps})' in str(f)
    assert ("set_max_nreg" in str(f)) == bool(consumer[2])
    rng = np.random.default_rng()
    a, b = _ints(rng, (M, K)), _ints(rng, (K, N))
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def _chained_inputs(n1):
    rng = np.random.default_rng()
    q, kt = (rng.standard_normal(s).astype(np.float16) for s in [(64, 64), (n1, 64)])
    v = rng.standard_normal((n1, 64)).astype(np.float16)
    s = (q.astype(np.float64) @ kt.astype(np.float64).T).astype(np.float16)
    return q, kt, v, s.astype(np.float64) @ v.astype(np.float64)


@pytest.mark.parametrize("n1", [256, 200])
@pytest.mark.parametrize("pv_stage,depth", [(1, 2), (2, 3)])
def test_stage_offsets_emulated_sm90a(n1, pv_stage, depth):
    """The consumer's ``v`` span one stage late: P @ V of step i - 1 runs between Q @ K^T
    and the cast of step i (``T.Pipelined(order=, stage=, group=)`` of the specialized
    loop, one mbarrier ring per copy); two stages late is not materialized (program
    order). Emulated, and on the CPU, against float64."""
    from test_gemm_wgmma_rs import emulate_rs

    f = _lower(chained_ws(n1, pv_stage=pv_stage, depth=depth))
    note = f.attrs["tl.ws_schedule"]
    if pv_stage == 1:
        assert "'tl_pipeline_stage': [-1, -1, 0, 0, 0, 1]" in note
        assert "'tl_pipeline_order': [-1, -1, 0, 1, 3, 2]" in note
        assert any("consumer software-pipelined" in n for n in f.attrs["tl.tma"])
        assert 'T.launch_thread("threadIdx.x", 256)' in str(f) and "if tx < 128:" in str(f)
    else:
        assert (
            note
            == "program order: role 'Consumer': stage offsets above 1 (only 0 and 1 are materialized)"
        )
    q, kt, v, want = _chained_inputs(n1)
    o = np.full((64, 64), np.nan, np.float32)
    (_, _, _, o), _ = emulate_rs(f, q, kt, v, o)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    oc = torch.full((64, 64), float("nan"))
    tilelang.compile(chained_ws(n1, pv_stage=pv_stage, depth=depth), target="cpu")(
        *(torch.from_numpy(x) for x in (q, kt, v)), oc
    )
    np.testing.assert_allclose(oc.numpy(), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_illegal_stage_offsets_keep_program_order_sm90a():
    """The cast of step i before P @ V of step i - 1 would overwrite its P: the ordering is
    refused (a note), the loop stays warp-specialized in program order, results exact."""
    from test_gemm_wgmma_rs import emulate_rs

    f = _lower(chained_ws(256, cast_first=True))
    assert "the stage offsets were not applied" in f.attrs["tl.ws_schedule"]
    q, kt, v, want = _chained_inputs(256)
    o = np.full((64, 64), np.nan, np.float32)
    (_, _, _, o), _ = emulate_rs(f, q, kt, v, o)
    np.testing.assert_allclose(o, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())


def test_two_pipelines_share_one_ring_emulated_sm90a():
    """A and B tiles in pipelines of their own (same roles, loop, depth): one ring."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    def split(parts):
        parts["pipelines"] = [
            T.WSPipeline("a", [parts["A_s"]], depth=3),
            T.WSPipeline("b", [parts["B_s"]], depth=3),
        ]
        parts["bodies"]["Producer"] = [ACQ("a"), "copy_A", COM("a"), ACQ("b"), "copy_B", COM("b")]
        parts["bodies"]["Consumer"] = [WAIT("a"), WAIT("b"), "gemm", REL("b"), REL("a")]

    M, N, K = 200, 72, 200
    f = _lower(gemm_ws(M, N, K, edit=split))
    assert f.attrs["tl.ws_schedule"].startswith("materialized")
    rng = np.random.default_rng()
    a, b = _ints(rng, (M, K)), _ints(rng, (K, N))
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_copy_schedule_emulated_sm90a():
    """A loop without a gemm is specialized too (the schedule asks for it)."""
    from tilelang.testing.cuda_emulator import emulate

    M, N = 300, 40
    f = _lower(copy_ws(M, N))
    assert f.attrs["tl.ws_schedule"].startswith("materialized")
    assert "tl::tma_load_2d" in str(f) and "tl::fence_proxy_async_shared" in str(f)
    a = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    emulate(f, a, out)
    np.testing.assert_allclose(out, _copy_ref(a), rtol=1e-6, atol=1e-5)


def test_upstream_aws_style_persistent_gemm_emulated_sm90a():
    """Two pipelines: program order on sm_90a (recorded), emulated exact."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    M, N, K = 200, 136, 100
    a, b, want = _persistent_inputs(M, N, K)
    f = _lower(persistent_gemm(M, N, K))
    note = f.attrs["tl.ws_schedule"]
    assert (
        note == "program order: the pipelines synchronize different scopes or have different depths"
    )
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
    np.testing.assert_array_equal(c, want)


def test_other_schedules_run_in_program_order_sm90a():
    """A schedule the materialization does not cover (here: the producer's acquire/commit
    pairs at two stages) runs in program order, recorded on the function; emulated exact."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    def two_stages(parts):
        parts["bodies"]["Consumer"] = [WAIT("smem", stage=1), "gemm", REL("smem", stage=1)]
        parts["bodies"]["Producer"] = [ACQ("smem", 0), "copy_A", COM("smem", 0), ACQ("smem", 1)]
        parts["bodies"]["Producer"] += ["copy_B", COM("smem", 1)]

    M, N, K = 100, 72, 200
    f = _lower(gemm_ws(M, N, K, edit=two_stages))
    note = f.attrs["tl.ws_schedule"]
    assert note.startswith("program order") and "syncs at several stages" in note
    rng = np.random.default_rng()
    a, b = _ints(rng, (M, K)), _ints(rng, (K, N))
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def _upstream_test_kernel(guarded=False, schedule=True, ids=True):
    """upstream's MaterializeWSSchedule test kernel (a 64 x 64 float16 tile per step, 4
    steps); ``guarded``: the producer copy under ``if i < 3`` (a per-op guard)."""

    def wid(name):
        return {T.WSID: name} if ids else None

    @T.prim_func
    def main(A: T.Tensor((256, 64), T.float16), B: T.Tensor((256, 64), T.float16)):
        with T.Kernel(1, threads=128):
            A_shared = T.alloc_shared((64, 64), T.float16)
            A_frag = T.alloc_fragment((64, 64), T.float16)
            if schedule:
                T.annotate_ws_schedule(
                    T.WSSchedule(
                        num_warps=8,
                        roles=[
                            T.WSRole("Producer", warps_lo=0, warps_hi=1, max_nreg=40),
                            T.WSRole("Consumer", warps_lo=4, warps_hi=8, max_nreg=224),
                        ],
                        pipelines=[T.WSPipeline("buf", [A_shared], depth=2)],
                        scopes=[
                            T.WSScope(
                                "loop_k",
                                {
                                    "Producer": [ACQ("buf"), "copy_in", COM("buf")],
                                    "Consumer": [WAIT("buf"), "copy_frag", REL("buf"), "copy_out"],
                                },
                            ),
                            T.WSScope(
                                T.WSScope.ROOT, {"Producer": ["loop_k"], "Consumer": ["loop_k"]}
                            ),
                        ],
                    )
                )
            for i in T.Pipelined(4, num_stages=2, annotations=wid("loop_k")):
                if guarded:
                    if i < 3:
                        T.copy(A[i * 64, 0], A_shared, annotations=wid("copy_in"))
                else:
                    T.copy(A[i * 64, 0], A_shared, annotations=wid("copy_in"))
                T.copy(A_shared, A_frag, annotations=wid("copy_frag"))
                T.copy(A_frag, B[i * 64, 0], annotations=wid("copy_out"))

    return main


@pytest.mark.parametrize("guarded", [False, True])
def test_upstream_test_kernel_emulated_sm90a(guarded):
    """Materialized; with the guard (a per-op ``if``) it runs in program order instead."""
    from tilelang.testing.cuda_emulator import emulate

    f = _lower(_upstream_test_kernel(guarded))
    note = f.attrs["tl.ws_schedule"]
    assert note.startswith("program order: loop loop_k" if guarded else "materialized"), note
    a = np.random.default_rng().standard_normal((256, 64)).astype(np.float16)
    out = np.full((256, 64), np.nan, np.float16)
    emulate(f, a, out)
    rows = 192 if guarded else 256  # (the guarded last step stores a reused stage)
    np.testing.assert_array_equal(out[:rows], a[:rows])


def test_ids_without_a_schedule_change_nothing():
    plain = str(_lower(_upstream_test_kernel(schedule=False, ids=False)))
    assert str(_lower(_upstream_test_kernel(schedule=False, ids=True))) == plain
    assert "tma_empty" not in plain  # (no gemm: the automatic pass leaves it alone)


def test_sm80_runs_in_program_order_with_the_depth():
    """Below sm_90 the schedule is honoured as program order; its pipeline's depth sets the
    loop's stage count (cp.async ring of 4 versions); emulated it is exact."""
    from tilelang.testing.cuda_emulator import emulate

    M, N = 300, 40
    f = _lower(copy_ws(M, N, depth=4), SM80)
    assert f.attrs["tl.ws_schedule"].startswith("program order: needs CUDA sm_90")
    assert "A_s_mb" in str(f) and "(4, 64, 40)" in str(f)
    a = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    emulate(f, a, out)
    np.testing.assert_allclose(out, _copy_ref(a), rtol=1e-6, atol=1e-5)


def test_annotate_ws_pipeline_depth():
    """The hint sets the enclosing pipelined loop's stage count; outside one it is an error."""

    def make(inside=True, depth=3):
        @T.prim_func
        def main(A: T.Tensor((300, 40), "float32"), B: T.Tensor((300, 40), "float32")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((64, 40), "float32")
                A_f = T.alloc_fragment((64, 40), "float32")
                if not inside:
                    T.annotate_ws_pipeline_depth({A_s: depth})
                for i in T.Pipelined(5, num_stages=2):
                    if inside:
                        T.annotate_ws_pipeline_depth({A_s: depth})
                    T.copy(A[i * 64, 0], A_s)
                    T.copy(A_s, A_f)
                    T.copy(A_f, B[i * 64, 0])

        return main

    assert "(3, 64, 40)" in str(_lower(make(), SM80))
    a = np.random.default_rng().standard_normal((300, 40)).astype(np.float32)
    b = torch.full((300, 40), float("nan"))
    tilelang.compile(make(), target="cpu")(torch.from_numpy(a), b)
    np.testing.assert_array_equal(b.numpy(), a)
    with pytest.raises(errors.CompileError, match="inside a T.Pipelined loop"):
        tilelang.compile(make(inside=False), target="cpu")
    with pytest.raises(errors.TraceError, match="depth"):
        make(depth=0)


# ------------------------------------------------------------------------------ SASS
def _sass(art):
    from test_tma import _sass as sass

    return sass(art)


@needs_nvcc
@pytest.mark.parametrize("nreg", [True, False])
def test_gemm_schedule_sass(nreg):
    """UTMALDG + SYNCS (mbarrier) + HGMMA, no LDGSTS; USETMAXREG only with max_nreg."""
    kw = {} if nreg else {"consumer": (4, 8, 0), "producer": (0, 1, 0)}
    art = pipeline.build(
        gemm_ws(1000, 1000, 1000, bM=128, bN=128, bK=64, **kw), SM90A, compiler="nvcc"
    )
    sass = _sass(art)
    assert "UTMALDG" in sass and "HGMMA" in sass and "LDGSTS" not in sass
    assert "SYNCS.ARRIVE.TRANS64" in sass and "SYNCS.PHASECHK.TRANS64" in sass
    assert ("USETMAXREG" in sass) == nreg


@needs_nvcc
def test_stage_offset_schedule_sass():
    sass = _sass(pipeline.build(chained_ws(1024), SM90A, compiler="nvcc"))
    assert "UTMALDG" in sass and "HGMMA" in sass and "SYNCS.PHASECHK.TRANS64" in sass
    assert "USETMAXREG" in sass and "LDGSTS" not in sass


@needs_nvcc
def test_copy_schedule_sass():
    sass = _sass(pipeline.build(copy_ws(300, 40), SM90A, compiler="nvcc"))
    assert "UTMALDG" in sass and "SYNCS.PHASECHK.TRANS64" in sass and "USETMAXREG" in sass


# ------------------------------------------------------------------------------ GPU
def _gpu_compile(func):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return tilelang.compile(func, target="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1000, 776, 520), (77, 130, 45), (1024, 1024, 1024)])
@pytest.mark.parametrize("placement", ["producer_first", "consumer_first", "two_consumer_groups"])
def test_gemm_schedule_matches_torch_gpu(shape, placement):
    M, N, K = shape
    kw = {
        "producer_first": {},
        "consumer_first": {"consumer": (0, 4, 232), "producer": (5, 6, 40)},
        "two_consumer_groups": {
            "consumer": (4, 12, 224),
            "producer": (1, 2, 40),
            "num_warps": 12,
            "bM": 128,
        },
    }[placement]
    kernel = _gpu_compile(gemm_ws(M, N, K, **kw))
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((K, N), device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,depth", [(300, 40, 2), (4096, 64, 3)])
def test_copy_schedule_matches_torch_gpu(M, N, depth):
    kernel = _gpu_compile(copy_ws(M, N, depth=depth))
    a = torch.randn((M, N), device="cuda", dtype=torch.float32)
    b = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, b)
    torch.cuda.synchronize()
    rows = torch.arange(M, device="cuda").div(64, rounding_mode="floor")[:, None]
    torch.testing.assert_close(b.double(), a.double() * 2 + rows.double(), rtol=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------ ROCm / Metal
@pytest.mark.parametrize("backend", ["rocm", "metal"])
def test_rocm_metal_run_in_program_order(backend):
    """ROCm and Metal lower the markers to nothing: the straight-line program (emulated)."""
    import importlib

    lower = importlib.import_module(f"tilelang.backends.{backend}.pipeline").lower
    emulate = importlib.import_module(f"tilelang.testing.{backend}_emulator").emulate
    M, N = 300, 40
    f = lower(copy_ws(M, N))
    assert "tl.ws_" not in str(f)
    a = np.random.default_rng().standard_normal((M, N)).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    emulate(f, a, out)
    np.testing.assert_allclose(out, _copy_ref(a), rtol=1e-6, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1000, 776, 520), (300, 200, 96)])
def test_upstream_aws_style_persistent_gemm_gpu(shape):
    """Three roles, two pipelines, a persistent while scope: program order on the GPU."""
    M, N, K = shape
    kernel = _gpu_compile(persistent_gemm(M, N, K, workers=7))
    a = torch.randn((M, K), device="cuda", dtype=torch.float16)
    b = torch.randn((N, K), device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-3, atol=1e-2)


@pytest.mark.cuda
def test_upstream_test_kernel_gpu():
    kernel = _gpu_compile(_upstream_test_kernel())
    a = torch.randn((256, 64), device="cuda", dtype=torch.float16)
    b = torch.full((256, 64), float("nan"), device="cuda", dtype=torch.float16)
    kernel(a, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("n1", [1024, 200])
def test_stage_offsets_gpu(n1):
    kernel = _gpu_compile(chained_ws(n1))
    q, kt, v, want = _chained_inputs(n1)
    o = torch.full((64, 64), float("nan"), device="cuda")
    kernel(*(torch.from_numpy(x).cuda() for x in (q, kt, v)), o)
    torch.cuda.synchronize()
    np.testing.assert_allclose(o.cpu().numpy(), want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
