"""Every warp / scalar / random T.* op through the ``hip`` and ``metal`` targets: it either
lowers to source the target's compiler takes (no CUDA-only name left in it; hipcc builds it
when installed) or fails while lowering with "T.<name> is not supported on the <target>
target" at the user's line -- never a code-generation or vendor-compiler error."""

from __future__ import annotations

import re
import shutil

import pytest
from source_lines import line_of
from test_tilelang_language_warp import FLOAT_OPS, INT_OPS, _apply

import tilelang
import tilelang.language as T
from tilelang import errors

#: CUDA-only spellings that must not reach HIP / MSL source
_CUDA_ONLY = re.compile(
    r"__shfl\w*_sync|tl::warp_reduce|__any_sync|__all_sync|__ballot_sync|__activemask|"
    r"__match_\w+|tl::match_all_sync|__syncwarp|prim\.assume"
)
_METAL_ONLY_CUDA = re.compile(r"__syncthreads_\w+|__builtin_assume|__ldg")  # HIP has these

_NAMES = {
    "sum": "warp_reduce_sum", "max": "warp_reduce_max", "min": "warp_reduce_min",
    "bitand": "warp_reduce_bitand", "bitor": "warp_reduce_bitor", "xor": "shfl_xor",
    "xor_w8": "shfl_xor", "down": "shfl_down", "down_w8": "shfl_down", "up": "shfl_up",
    "up_w4": "shfl_up", "bcast": "shfl_sync", "any": "any_sync", "all": "all_sync",
    "ballot": "ballot_sync", "match": "match_any_sync", "match_all": "match_all_sync",
    "match_all_const": "match_all_sync", "count": "syncthreads_count",
    "and": "syncthreads_and", "or": "syncthreads_or", "active": "activemask",
    "sync_warp": "sync_warp", "ldg": "__ldg",
}  # fmt: skip
_WARP = set(FLOAT_OPS) | set(INT_OPS) | {"sync_warp"}
#: (target, op) pairs that lower; every other warp op is refused on that target
_ROCM_LOWERED = {*FLOAT_OPS, "bitand", "bitor", "count", "and", "or", "sync_warp"}
_ROCM_LOWERED |= {"ldg", "assume", "rng", "lane", "warp_idx", "elect", "let", "index"}
_METAL_LOWERED = {"ldg", "assume", "rng", "lane", "warp_idx", "elect", "let", "index"}
OPS = sorted(_WARP | _METAL_LOWERED)


def _apply_any(op, v, tid, i, dtype):
    if op in _WARP - {"sync_warp"}:
        return _apply(op, v)
    if op == "sync_warp":
        T.sync_warp()
        return v
    if op == "ldg":
        return v + T.cast(T.__ldg(i[tid]), dtype)
    if op == "assume":
        T.assume(tid < 96)
        return v
    if op == "rng":
        T.rng_init(7, tid)
        return v + T.cast(T.rng_rand() & 7, dtype)
    if op == "lane":
        return v + T.cast(T.get_lane_idx() + T.get_warp_idx_sync(), dtype)
    if op == "warp_idx":
        return v + T.cast(T.get_warp_idx() + T.get_warp_group_idx(), dtype)
    if op == "elect":
        return v + T.cast(T.shuffle_elect(64), dtype)
    if op == "let":
        return T.Select(tid < 5, v, v + T.cast(T.align_up(tid, 8), dtype))
    if op == "index":
        return v + T.cast(T.index_to_coordinates(tid, (8, 12))[1], dtype)
    raise AssertionError(op)


def kernel(op):
    dtype = "int32" if op in INT_OPS else "float32"
    n = 96

    @T.prim_func
    def main(x: T.Tensor((n,), dtype), y: T.Tensor((n,), dtype), i: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n):
            tid = T.get_thread_binding(0)
            val = T.alloc_local([1], dtype)
            val[0] = x[tid]
            out = T.alloc_local([1], dtype)
            out[0] = _apply_any(op, val[0], tid, i, dtype)
            y[tid] = out[0]

    return main


@pytest.mark.parametrize("target", ["hip", "metal"])
@pytest.mark.parametrize("op", OPS)
def test_op_lowers_or_is_refused(op, target, monkeypatch):
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    kind = "rocm" if target == "hip" else "metal"
    lowered_set = _ROCM_LOWERED if kind == "rocm" else _METAL_LOWERED
    func = kernel(op)
    if op in lowered_set:
        source = tilelang.lower(func, target=target).stages["source"]
        assert not _CUDA_ONLY.search(source), _CUDA_ONLY.search(source).group()
        if kind == "metal":
            assert not _METAL_ONLY_CUDA.search(source)
        return
    with pytest.raises(errors.CompileError) as info:
        tilelang.lower(func, target=target)
    message = str(info.value)
    assert f"T.{_NAMES[op]} is not supported on the {kind} target" in message
    assert f"test_tilelang_language_vendor_ops.py:{line_of(kernel, 'out[0] = _apply_any')}" in (
        message
    )


def test_rocm_source_spells_hip_intrinsics(monkeypatch):
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    source = tilelang.lower(kernel("sum"), target="hip").stages["source"]
    assert source.count("__shfl_xor(") >= 5  # the butterfly: offsets 16, 8, 4, 2, 1
    source = tilelang.lower(kernel("down_w8"), target="hip").stages["source"]
    assert re.search(r"__shfl_down\([^;]*, 3, 8\)", source)
    source = tilelang.lower(kernel("assume"), target="hip").stages["source"]
    assert "__builtin_assume" in source


def test_rocm_refuses_16bit_non_xor_shuffle(monkeypatch):
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)

    @T.prim_func
    def main(x: T.Tensor((64,), "float16"), y: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=64):
            tid = T.get_thread_binding(0)
            y[tid] = T.shfl_down(x[tid], 1)

    with pytest.raises(errors.CompileError, match="T.shfl_down is not supported on the rocm"):
        tilelang.lower(main, target="hip")


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="needs hipcc")
@pytest.mark.parametrize(
    "op", ["sum", "max", "bitor", "xor_w8", "up_w4", "bcast", "sync_warp", "ldg", "assume", "count"]
)
def test_hipcc_builds_lowered_warp_ops(op):
    artifact = tilelang.lower(kernel(op), target="hip")
    assert "__global__" in artifact.stages["source"]


def _new_surface_kernels():
    from test_tilelang_language_atomic_ext import addx_kernel
    from test_tilelang_language_builtin_ext import (
        binding_1d,
        dp4a_kernel,
        ptr_kernel,
        scale_kernel,
        storage_sync_kernel,
        tf32_gemm,
    )
    from test_tilelang_language_reducer import rows_kernel, two_loops_kernel

    return {
        "atomic_addx2": lambda: addx_kernel(37, 12, 2, "float32", 2),
        "atomic_addx4": lambda: addx_kernel(37, 12, 4, "float32", 2),
        "alloc_buffer": lambda: scale_kernel(37, 23),
        "access_ptr": lambda: ptr_kernel(7, 13, 3),
        "dp4a": lambda: dp4a_kernel(19),
        "tfloat32": lambda: tf32_gemm(45, 37, 50),
        "tvm_storage_sync": lambda: storage_sync_kernel(48),
        "thread_binding": lambda: binding_1d(96),
        "reducer": lambda: rows_kernel(13, 37, "max", init=1.0),
        "reducer_int": lambda: two_loops_kernel(45, "int32"),
    }


@pytest.mark.parametrize("target", ["hip", "metal"])
@pytest.mark.parametrize("name", sorted(_new_surface_kernels()))
def test_new_surface_lowers_or_is_refused(name, target, monkeypatch):
    """The other new T.* names: HIP / MSL source, or a CompileError naming the target."""
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    kind = "rocm" if target == "hip" else "metal"
    func = _new_surface_kernels()[name]()
    try:
        source = tilelang.lower(func, target=target).stages["source"]
    except errors.CompileError as err:
        assert f"is not supported on the {kind} target" in str(err), str(err)
        return
    assert ("__global__" if kind == "rocm" else "kernel void") in source
    assert not _CUDA_ONLY.search(source)
