"""Warp-level ops: T.shfl_*, T.warp_reduce_*, T.any_sync/all_sync/ballot_sync, T.match_any_sync,
T.activemask, T.syncthreads_count/and/or, T.sync_warp, lane/warp indices, T.shuffle_elect.

CPU: every op against a numpy float64/int64 reference (a warp = 32 consecutive threads of the
linear thread index), with 1-D and 2-D thread blocks. CUDA: the generated source builds with
nvcc for sm_80 and sm_90a; the shuffles run in the CUDA emulator; GPU tests are marked cuda.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline as cuda_pipeline

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

FLOAT_OPS = ["sum", "max", "min", "xor", "down", "up", "bcast", "xor_w8", "down_w8", "up_w4"]
INT_OPS = ["bitand", "bitor", "any", "all", "ballot", "match", "count", "and", "or", "active"]
INT_OPS += ["match_all", "match_all_const"]


def _apply(op, v):
    """The traced form of ``op`` applied to the per-thread value ``v``."""
    if op == "sum":
        return T.warp_reduce_sum(v)
    if op == "max":
        return T.warp_reduce_max(v)
    if op == "min":
        return T.warp_reduce_min(v)
    if op == "bitand":
        return T.warp_reduce_bitand(v)
    if op == "bitor":
        return T.warp_reduce_bitor(v)
    if op == "xor":
        return T.shfl_xor(v, 5)
    if op == "xor_w8":
        return T.shfl_xor(v, 9, width=8)
    if op == "down":
        return T.shfl_down(v, 3)
    if op == "down_w8":
        return T.shfl_down(v, 3, 8)
    if op == "up":
        return T.shfl_up(v, 2)
    if op == "up_w4":
        return T.shfl_up(v, 1, width=4)
    if op == "bcast":
        return T.shfl_sync(v, 7)
    if op == "any":
        return T.any_sync(v > 40)
    if op == "all":
        return T.all_sync(v > 3)
    if op == "ballot":
        # every lane executes the vote, so every lane is in the mask (CUDA leaves a lane
        # outside the mask that executes it undefined)
        return T.cast(T.ballot_sync(v > 25) >> 4, "int32")
    if op == "match":
        return T.cast(T.match_any_sync(v % 4) >> 8, "int32")
    if op == "match_all":  # warp 0 agrees mod 4, warp 1 does not (int_input)
        return T.cast(T.match_all_sync(v % 4) >> 4, "int32")
    if op == "match_all_const":
        return T.cast(T.match_all_sync(7) >> 1, "int32")
    if op == "count":
        return T.syncthreads_count(v > 25)
    if op == "and":
        return T.syncthreads_and(v > 3)
    if op == "or":
        return T.syncthreads_or(v > 48)
    if op == "active":
        return T.cast(T.activemask() >> 20, "int32")
    raise AssertionError(op)


def warp_kernel(op, dtype, threads):
    n = int(np.prod(threads))

    @T.prim_func
    def main(x: T.Tensor((n,), dtype), y: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=threads):
            tid = T.get_thread_binding(0)
            if len(threads) == 2:
                tid = tid + T.get_thread_binding(1) * threads[0]
            val = T.alloc_local([1], dtype)
            val[0] = x[tid]
            out = T.alloc_local([1], dtype)
            out[0] = _apply(op, val[0])
            y[tid] = out[0]

    return main


def reference(op, x):
    """float64 / int64 meaning of ``op`` for the per-thread values ``x`` (CUDA's)."""
    n = x.shape[0]
    t = np.arange(n)
    lane, base = t % 32, t - t % 32
    warps = [x[b : b + 32] for b in base]

    def shfl(src, ok):
        return np.where(ok, x[np.clip(base + src, 0, n - 1)], x)

    if op == "sum":
        return np.array([w.sum() for w in warps])
    if op == "max":
        return np.array([w.max() for w in warps])
    if op == "min":
        return np.array([w.min() for w in warps])
    if op == "bitand":
        return np.array([np.bitwise_and.reduce(w) for w in warps])
    if op == "bitor":
        return np.array([np.bitwise_or.reduce(w) for w in warps])
    if op in ("xor", "xor_w8"):
        d, w = (5, 32) if op == "xor" else (9, 8)
        src = lane ^ d
        return shfl(src, src < (lane - lane % w) + w)
    if op in ("down", "down_w8"):
        d, w = (3, 32) if op == "down" else (3, 8)
        return shfl(lane + d, lane % w + d < w)
    if op in ("up", "up_w4"):
        d, w = (2, 32) if op == "up" else (1, 4)
        return shfl(lane - d, lane % w >= d)
    if op == "bcast":
        return shfl(np.full(n, 7), np.ones(n, bool))
    if op == "any":
        return np.array([int((w > 40).any()) for w in warps])
    if op == "all":
        return np.array([int((w > 3).all()) for w in warps])
    if op == "ballot":
        bits = [sum(1 << j for j in range(32) if w[j] > 25) for w in warps]
        return np.array(bits) >> 4
    if op == "match":
        return (
            np.array(
                [sum(1 << j for j in range(32) if w[j] % 4 == v % 4) for w, v in zip(warps, x)]
            )
            >> 8
        )
    if op == "match_all":
        agree = [len({int(v) % 4 for v in w}) == 1 for w in warps]
        return np.array([0xFFFFFFFF >> 4 if a else 0 for a in agree])
    if op == "match_all_const":
        return np.full(n, 0xFFFFFFFF >> 1)
    if op == "count":
        return np.full(n, (x > 25).sum())
    if op == "and":
        return np.full(n, int((x > 3).all()))
    if op == "or":
        return np.full(n, int((x > 48).any()))
    if op == "active":
        return np.full(n, 0xFFFFFFFF >> 20)
    raise AssertionError(op)


def int_input(op, n, rng):
    """Per-thread ints that make both outcomes of the votes happen."""
    if op == "all":  # a warp of all-true and one with a single false
        x = rng.integers(4, 50, n)
        x[min(n - 1, 40)] = 1
        return x
    x = rng.integers(0, 50, n)
    if op == "match_all":  # warp 0: every lane agrees mod 4; warp 1: lane 41 does not
        x[:32] = 4 * rng.integers(0, 12, 32) + 1
        x[32:64] = 4 * rng.integers(0, 12, 32) + 2
        x[41] = 3
    return x


# ----------------------------------------------------------------------------------- CPU
@pytest.mark.parametrize("threads", [(96,), (16, 4)], ids=["1d", "2d"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("op", FLOAT_OPS)
def test_float_ops_cpu(op, dtype, threads, rng):
    n = int(np.prod(threads))
    x = rng.standard_normal(n)
    xt = torch.from_numpy(x).to(getattr(torch, dtype))
    y = torch.zeros_like(xt)
    tilelang.compile(warp_kernel(op, dtype, list(threads)), target="cpu")(xt, y)
    ref = reference(op, xt.double().numpy())
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-2}[dtype]
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("threads", [(96,), (16, 4)], ids=["1d", "2d"])
@pytest.mark.parametrize("op", INT_OPS)
def test_int_ops_cpu(op, threads, rng):
    n = int(np.prod(threads))
    x = int_input(op, n, rng)
    xt = torch.from_numpy(x).to(torch.int32)
    y = torch.zeros_like(xt)
    tilelang.compile(warp_kernel(op, "int32", list(threads)), target="cpu")(xt, y)
    np.testing.assert_array_equal(y.numpy().astype(np.int64), reference(op, x))


def nested_kernel(n, rounds):
    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            acc = T.alloc_var("float32")
            acc = x[tx]
            for r in T.serial(rounds):  # a uniform loop around the exchange
                acc = acc + T.shfl_xor(T.warp_reduce_max(acc) - acc, r + 1)
            T.sync_warp()
            y[tx] = acc

    return main


def test_nested_and_in_uniform_loop_cpu(rng):
    n, rounds = 64, 3
    x = rng.standard_normal(n)
    xt = torch.from_numpy(x).float()
    y = torch.zeros_like(xt)
    tilelang.compile(nested_kernel(n, rounds), target="cpu")(xt, y)
    acc = xt.double().numpy().copy()
    lane = np.arange(n) % 32
    for r in range(rounds):
        mx = np.repeat(acc.reshape(-1, 32).max(axis=1), 32)
        d = mx - acc
        acc = acc + d[(np.arange(n) - lane) + (lane ^ (r + 1))]
    np.testing.assert_allclose(y.numpy(), acc, rtol=1e-5, atol=1e-5)


def index_kernel(threads):
    n = int(np.prod(threads))

    @T.prim_func
    def main(y: T.Tensor((n, 5), "int32")):
        with T.Kernel(1, threads=threads):
            tid = T.get_thread_binding(0)
            if len(threads) == 2:
                tid = tid + T.get_thread_binding(1) * threads[0]
            y[tid, 0] = T.get_lane_idx()
            y[tid, 1] = T.get_warp_idx()
            y[tid, 2] = T.get_warp_idx_sync(16)
            y[tid, 3] = T.get_warp_group_idx(32, 2)
            y[tid, 4] = T.cast(T.shuffle_elect(48), "int32")

    return main


@pytest.mark.parametrize("threads", [[24, 8], [192]], ids=["2d", "1d"])
def test_lane_and_warp_indices_cpu(threads):
    y = torch.zeros(192, 5, dtype=torch.int32)
    tilelang.compile(index_kernel(threads), target="cpu")(y)
    t = np.arange(192)
    ref = np.stack([t % 32, t // 32, t // 16, t // 64, (t % 48 == 0).astype(int)], axis=1)
    np.testing.assert_array_equal(y.numpy(), ref)


# ------------------------------------------------------------------------------ errors
def in_parallel():
    @T.prim_func
    def main(x: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                x[i] = T.warp_reduce_sum(x[i])

    return main


def under_thread_branch():
    @T.prim_func
    def main(x: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            if tx < 40:
                x[tx] = T.shfl_down(x[tx], 1)

    return main


@pytest.mark.parametrize(
    "make,needle,words",
    [
        (in_parallel, "T.warp_reduce_sum(x[i])", "`T.warp_reduce_sum` is not supported on cpu"),
        (under_thread_branch, "T.shfl_down(x[tx], 1)", "`T.shfl_down` is not supported on cpu"),
    ],
)
def test_unsupported_cpu_forms_name_op_and_line(make, needle, words):
    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.compile(make(), target="cpu")
    msg = str(info.value)
    assert words in msg
    assert f":{line_of(make, needle)}" in msg


def test_bad_arguments_are_trace_errors():
    def bad_width():
        @T.prim_func
        def main(x: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                x[tx] = T.shfl_xor(x[tx], 1, width=6)

        return main

    def float_pred():
        @T.prim_func
        def main(x: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                x[tx] = T.any_sync(x[tx])

        return main

    def float_bitand():
        @T.prim_func
        def main(x: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                x[tx] = T.warp_reduce_bitand(x[tx])

        return main

    for make, words in [
        (bad_width, "width must be a power of two"),
        (float_pred, "requires an integer or boolean predicate"),
        (float_bitand, "T.warp_reduce_bitand: unsupported dtype float32"),
    ]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()


# ----------------------------------------------------------------------------------- CUDA
@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds_every_op(target):
    for op, dtype in [(o, "float32") for o in FLOAT_OPS] + [(o, "int32") for o in INT_OPS]:
        art = cuda_pipeline.build(warp_kernel(op, dtype, [96]), target, compiler="nvcc")
        assert art.device_binary, op
    for dtype in ("float16", "bfloat16", "float64"):
        art = cuda_pipeline.build(warp_kernel("sum", dtype, [64]), target, compiler="nvcc")
        assert art.device_binary
    art = cuda_pipeline.build(nested_kernel(64, 3), target, compiler="nvcc")
    assert art.device_binary
    art = cuda_pipeline.build(index_kernel([192]), target, compiler="nvcc")
    assert art.device_binary


@pytest.mark.parametrize("op", FLOAT_OPS + INT_OPS)
def test_ops_emulated(op, rng):
    """The CUDA lowering, run lane by lane by the emulator, against the same reference."""
    from tilelang.testing.cuda_emulator import emulate

    dtype = "float32" if op in FLOAT_OPS else "int32"
    lowered = cuda_pipeline.lower(warp_kernel(op, dtype, [96]), SM80)
    if dtype == "float32":
        x = rng.standard_normal(96).astype(np.float32)
    else:
        x = int_input(op, 96, rng).astype(np.int32)
    y = np.zeros_like(x)
    _, y = emulate(lowered, x, y)
    ref = reference(op, x.astype(np.float64 if dtype == "float32" else np.int64))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


BLOCK_VOTES = ["count", "and", "or"]
SYNC_OPS = [op for op in FLOAT_OPS + INT_OPS if op not in ("active", "match_all_const")]


def branch_kernel(op, dtype, threads, reached):
    """``warp_kernel`` with the op run only by the threads where ``reached(tid)`` holds."""

    @T.prim_func
    def main(x: T.Tensor((threads,), dtype), y: T.Tensor((threads,), dtype)):
        with T.Kernel(1, threads=threads):
            tid = T.get_thread_binding(0)
            val = T.alloc_local([1], dtype)
            val[0] = x[tid]
            if reached(tid):
                y[tid] = _apply(op, val[0])

    return main


@pytest.mark.parametrize("op", SYNC_OPS)
def test_sync_op_reached_by_part_of_its_mask_is_reported_emulated(op, rng):
    """Every ``*_sync`` warp op (and each block vote) reached by part of the lanes its mask
    names (of the block) is the GPU hang the emulator reports; reached by whole warps (the
    whole block) it runs and matches the reference on the lanes that reach it."""
    from tilelang.testing.cuda_emulator import EmulationError, emulate

    dtype = "float32" if op in FLOAT_OPS else "int32"
    n = 64
    if dtype == "float32":
        x = rng.standard_normal(n).astype(np.float32)
    else:
        x = int_input(op, n, rng).astype(np.int32)
    whole = (lambda t: t < n) if op in BLOCK_VOTES else (lambda t: t < 32)
    _, y = emulate(
        cuda_pipeline.lower(branch_kernel(op, dtype, n, whole), SM80), x, np.zeros_like(x)
    )
    reached = n if op in BLOCK_VOTES else 32
    ref = reference(op, x[:reached].astype(np.float64 if dtype == "float32" else np.int64))
    np.testing.assert_allclose(y[:reached], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y[reached:], 0)

    part = cuda_pipeline.lower(branch_kernel(op, dtype, n, lambda t: t % 32 < 20), SM80)
    what = "part of block" if op in BLOCK_VOTES else "only part of warp 0"
    with pytest.raises(EmulationError, match=what):
        emulate(part, x, np.zeros_like(x))


@pytest.mark.parametrize("kind", ["shfl_xor", "shfl_up", "any_sync", "ballot_sync"])
def test_member_mask_names_the_lanes_that_must_arrive_emulated(kind):
    """With ``mask=0xFFFF`` the low 16 lanes of a warp may call the op alone; lanes 0..7
    alone leave 8..15 of the mask out (reported)."""
    from tilelang.testing.cuda_emulator import EmulationError, emulate

    def kernel(limit):
        @T.prim_func
        def main(x: T.Tensor((32,), "int32"), y: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32):
                tid = T.get_thread_binding(0)
                if tid < limit:
                    if kind == "shfl_xor":
                        y[tid] = T.shfl_xor(x[tid], 1, mask=0xFFFF)
                    elif kind == "shfl_up":
                        y[tid] = T.shfl_up(x[tid], 1, mask=0xFFFF)
                    elif kind == "any_sync":
                        y[tid] = T.any_sync(x[tid] > 3, mask=0xFFFF)
                    else:
                        y[tid] = T.cast(T.ballot_sync(x[tid] > 3, mask=0xFFFF), "int32")

        return cuda_pipeline.lower(main, SM80)

    x = np.arange(32, dtype=np.int32)
    _, y = emulate(kernel(16), x, np.zeros_like(x))
    want = {
        "shfl_xor": x[:16] ^ 1,
        "shfl_up": np.r_[0, x[:15]],
        "any_sync": np.ones(16),
        "ballot_sync": np.full(16, sum(1 << j for j in range(4, 16))),
    }[kind]
    np.testing.assert_array_equal(y[:16], want)
    with pytest.raises(EmulationError, match=r"member mask 0xffff reached by only part"):
        emulate(kernel(8), x, np.zeros_like(x))


@pytest.mark.cuda
@pytest.mark.parametrize("op", FLOAT_OPS + INT_OPS)
def test_ops_gpu(op, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dtype = "float32" if op in FLOAT_OPS else "int32"
    x = rng.standard_normal(96) if dtype == "float32" else int_input(op, 96, rng)
    xt = torch.from_numpy(x).to(getattr(torch, dtype)).cuda()
    y = torch.zeros_like(xt)
    tilelang.compile(warp_kernel(op, dtype, [96]), target="cuda")(xt, y)
    ref = reference(op, xt.cpu().numpy().astype(np.float64 if dtype == "float32" else np.int64))
    np.testing.assert_allclose(y.cpu().double().numpy(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
def test_indices_and_nested_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cpu_reference import reference_run

    y = torch.zeros(192, 5, dtype=torch.int32, device="cuda")
    tilelang.compile(index_kernel([192]), target="cuda")(y)
    (ycpu,) = reference_run(index_kernel([192]), torch.zeros(192, 5, dtype=torch.int32))
    np.testing.assert_array_equal(y.cpu().numpy(), ycpu)
    x = torch.from_numpy(rng.standard_normal(64)).float()
    b = torch.zeros(64, device="cuda")
    _, a = reference_run(nested_kernel(64, 3), x, torch.zeros(64))
    tilelang.compile(nested_kernel(64, 3), target="cuda")(x.cuda(), b)
    np.testing.assert_allclose(b.cpu().numpy(), a, rtol=1e-5, atol=1e-5)
