"""Upstream T.* names used by its examples and language tests: T.PersistentTileScheduler,
the fast-math spellings (T.__exp...), T.__ffs, T.parallel, T.PrimExpr / T.Var, T.pdl_*,
the register hints, T.fp8, and the clear error of the names no target lowers.

CPU: each against numpy in float64 / int64 on fresh inputs. CUDA: the generated source
builds with nvcc for sm_80 and sm_90a.
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
from tilelang.language.not_lowered import NOT_LOWERED

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


# ----------------------------------------------------------------- persistent scheduler
def reference_coords(m_tiles, n_tiles, swizzle, column_major, cluster):
    """(m, n) of every linear tile id, by walking the panels in Python."""
    m_rows = -(-m_tiles // cluster)
    fast_n, slow_n = (m_rows, n_tiles) if column_major else (n_tiles, m_rows)
    out = []
    for first in range(0, slow_n, swizzle):
        width = min(swizzle, slow_n - first)
        for fast in range(fast_n):
            for s in range(width):
                out.append((fast, first + s) if column_major else (first + s, fast))
    return out


def scheduler_kernel(m_tiles, n_tiles, workers, swizzle, column_major, cluster, max_iters):
    @T.prim_func
    def main(out: T.Tensor((workers, max_iters, 3), "int32")):
        with T.Kernel(workers, threads=1) as w:
            sched = T.PersistentTileScheduler(
                m_tiles,
                n_tiles,
                num_workers=workers,
                swizzle_size=swizzle,
                column_major=column_major,
                cluster_size=cluster,
                name="sched",
            )
            sched.init(w)
            while sched.valid():
                it = sched.current_iter
                out[w, it, 0] = sched.m_idx
                out[w, it, 1] = sched.n_idx
                out[w, it, 2] = sched.linear_idx
                sched.next_tile()

    return main


@pytest.mark.parametrize(
    "m_tiles,n_tiles,workers,swizzle,column_major,cluster",
    [
        (5, 7, 3, 1, True, 1),
        (5, 7, 4, 3, True, 1),
        (6, 5, 4, 2, False, 1),
        (7, 3, 2, 4, False, 2),
        (9, 4, 5, 3, True, 2),
    ],
)
def test_persistent_scheduler_walk_cpu(m_tiles, n_tiles, workers, swizzle, column_major, cluster):
    coords = reference_coords(m_tiles, n_tiles, swizzle, column_major, cluster)
    max_iters = -(-len(coords) // workers)
    out = torch.full((workers, max_iters, 3), -1, dtype=torch.int32)
    kernel = scheduler_kernel(m_tiles, n_tiles, workers, swizzle, column_major, cluster, max_iters)
    tilelang.compile(kernel, target="cpu")(out)
    ref = np.full((workers, max_iters, 3), -1)
    for tile, (m, n) in enumerate(coords):
        ref[tile % workers, tile // workers] = (m, n, tile)
    np.testing.assert_array_equal(out.numpy(), ref)
    # every tile of the (cluster-row) grid is visited exactly once
    visited = {(int(m), int(n)) for m, n, t in out.numpy().reshape(-1, 3) if t >= 0}
    assert len(visited) == len(coords) == -(-m_tiles // cluster) * n_tiles


def persistent_add(m, n, bm, bn, workers):
    @T.prim_func
    def main(a: T.Tensor((m, n), "float32"), b: T.Tensor((m, n), "float32")):
        with T.Kernel(workers, threads=32) as w:
            sched = T.PersistentTileScheduler(
                T.ceildiv(m, bm), T.ceildiv(n, bn), num_workers=workers, swizzle_size=2
            )
            sched.init(w)
            while sched.valid():
                for i, j in T.Parallel(bm, bn):
                    r = sched.m_idx * bm + i
                    c = sched.n_idx * bn + j
                    if r < m and c < n:
                        b[r, c] = a[r, c] * 2.0 + T.cast(sched.current_iter, "float32")
                sched.next_tile()

    return main


def _persistent_add_reference(a, m, n, bm, bn, workers):
    coords = reference_coords(-(-m // bm), -(-n // bn), 2, True, 1)
    ref = np.empty_like(a)
    for tile, (ti, tj) in enumerate(coords):
        ref[ti * bm : (ti + 1) * bm, tj * bn : (tj + 1) * bn] = (
            a[ti * bm : (ti + 1) * bm, tj * bn : (tj + 1) * bn] * 2.0 + tile // workers
        )
    return ref


def test_persistent_scheduler_drives_a_tiled_kernel_cpu(rng):
    m, n, bm, bn, workers = 37, 29, 8, 16, 3
    a = rng.standard_normal((m, n))
    at = torch.from_numpy(a).float()
    b = torch.zeros_like(at)
    tilelang.compile(persistent_add(m, n, bm, bn, workers), target="cpu")(at, b)
    ref = _persistent_add_reference(a, m, n, bm, bn, workers)
    np.testing.assert_allclose(b.double().numpy(), ref, rtol=1e-6, atol=1e-6)


def test_persistent_scheduler_coord_is_stateless():
    sched = T.PersistentTileScheduler(5, 3, num_workers=2, swizzle_size=2, stateful=False)
    ref = reference_coords(5, 3, 2, True, 1)
    for tile, (m, n) in enumerate(ref):
        fm, fn = sched.coord(tile)
        assert (int(_fold(fm)), int(_fold(fn))) == (m, n)


def _fold(expr):
    """A decoded coordinate of constant tile ids folds to a constant."""
    return expr if isinstance(expr, int) else expr.value


def test_persistent_scheduler_errors():
    with pytest.raises(tilelang.TileLangError, match="swizzle_size must be an int >= 1"):
        T.PersistentTileScheduler(4, 4, num_workers=2, swizzle_size=0, stateful=False)
    with pytest.raises(tilelang.TileLangError, match="stateful=False"):
        T.PersistentTileScheduler(4, 4, num_workers=2, stateful=False).m_idx  # noqa: B018
    if not torch.cuda.is_available():
        with pytest.raises(tilelang.TileLangError, match="pass num_workers="):
            T.PersistentTileScheduler(4, 4, stateful=False)


# ------------------------------------------------------------------------ fast math
FAST = ["__exp", "__exp10", "__log", "__log2", "__log10", "__sin", "__cos", "__tan"]
NUMPY = {
    "__exp": np.exp,
    "__exp10": lambda x: 10.0**x,
    "__log": np.log,
    "__log2": np.log2,
    "__log10": np.log10,
    "__sin": np.sin,
    "__cos": np.cos,
    "__tan": np.tan,
}


def fast_math_kernel(n):
    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((len(FAST), n), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                y[0, i] = getattr(T, "__exp")(x[i])
                y[1, i] = getattr(T, "__exp10")(x[i])
                y[2, i] = getattr(T, "__log")(x[i])
                y[3, i] = getattr(T, "__log2")(x[i])
                y[4, i] = getattr(T, "__log10")(x[i])
                y[5, i] = getattr(T, "__sin")(x[i])
                y[6, i] = getattr(T, "__cos")(x[i])
                y[7, i] = getattr(T, "__tan")(x[i])

    return main


def test_fast_math_cpu(rng):
    n = 53
    x = rng.uniform(0.1, 1.4, n)
    xt = torch.from_numpy(x).float()
    y = torch.zeros(len(FAST), n)
    tilelang.compile(fast_math_kernel(n), target="cpu")(xt, y)
    xf = xt.double().numpy()
    for k, name in enumerate(FAST):
        np.testing.assert_allclose(y[k].double().numpy(), NUMPY[name](xf), rtol=2e-5, err_msg=name)


# ----------------------------------------------------------------- __ffs, T.parallel
def ffs_kernel(n, dtype):
    @T.prim_func
    def main(x: T.Tensor((n,), dtype), y: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=32):
            for i in T.parallel(n):
                y[i] = getattr(T, "__ffs")(x[i])

    return main


def _ffs(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return 0 if v == 0 else (v & -v).bit_length()


@pytest.mark.parametrize("dtype,bits", [("int32", 32), ("uint32", 32), ("int64", 64)])
def test_ffs_cpu(dtype, bits, rng):
    n = 70
    lo, hi = (-(2**31), 2**31) if bits == 32 else (-(2**62), 2**62)
    x = rng.integers(lo, hi, n, dtype=np.int64)
    x[:3] = [0, 1, -(2**31) if bits == 32 else -(2**63)]
    x[3:8] = [v << rng.integers(0, bits - 1) for v in (1, 1, 3, 5, 7)]
    x = x if dtype == "int64" else (x & 0xFFFFFFFF).astype(np.int64)
    torch_dtype = {"int32": torch.int32, "uint32": torch.uint32, "int64": torch.int64}[dtype]
    if dtype == "int32":
        xt = torch.from_numpy(x.astype(np.uint32).view(np.int32))
    elif dtype == "uint32":
        xt = torch.from_numpy(x.astype(np.uint32)).to(torch_dtype)
    else:
        xt = torch.from_numpy(x)
    y = torch.zeros(n, dtype=torch.int32)
    tilelang.compile(ffs_kernel(n, dtype), target="cpu")(xt, y)
    np.testing.assert_array_equal(y.numpy(), [_ffs(int(v), bits) for v in x])


def test_ffs_of_python_ints():
    assert [getattr(T, "__ffs")(v).value for v in (0, 1, 12, 1 << 40)] == [0, 1, 3, 41]


def test_parallel_with_start_and_stop_cpu(rng):
    n = 45

    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.parallel(3, n):
                y[i] = x[i] + x[i - 3]

    x = rng.standard_normal(n)
    xt = torch.from_numpy(x).float()
    y = torch.zeros(n)
    tilelang.compile(main, target="cpu")(xt, y)
    ref = np.zeros(n)
    ref[3:] = xt.double().numpy()[3:] + xt.double().numpy()[:-3]
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=1e-6, atol=1e-6)


# ------------------------------------------- PrimExpr / Var, pdl, hints (no-op semantics)
def test_primexpr_and_var_isinstance(rng):
    n = 16
    seen = {}

    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n) as bx:
            tx = T.get_thread_binding()
            seen["expr"] = isinstance(x[tx] + 1.0, T.PrimExpr)
            seen["int"] = isinstance(3, T.PrimExpr)
            seen["var"] = isinstance(bx, T.Var)
            T.pdl_sync()
            T.annotate_producer_reg_dealloc(40)
            T.annotate_consumer_reg_alloc(232)
            y[tx] = x[tx] * 3.0
            T.pdl_trigger()

    assert seen == {"expr": True, "int": False, "var": True}
    x = rng.standard_normal(n)
    xt = torch.from_numpy(x).float()
    y = torch.zeros(n)
    tilelang.compile(main, target="cpu")(xt, y)
    np.testing.assert_allclose(y.double().numpy(), 3.0 * xt.double().numpy(), rtol=1e-6)


def test_reg_hint_bad_count_names_the_line():
    def make():
        @T.prim_func
        def main(x: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                T.annotate_consumer_reg_alloc(250)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        make()
    assert "multiple of 8" in str(info.value)
    assert f":{line_of(make, 'T.annotate_consumer_reg_alloc(250)')}" in str(info.value)


def test_fp8_module():
    assert T.fp8.determine_fp8_type() == "float8_e4m3fn"
    assert T.fp8.determine_fp8_type("e5m2") == "float8_e5m2"
    assert T.fp8.determine_torch_fp8_type("e5m2") is torch.float8_e5m2
    with pytest.raises(ValueError, match="fp8_format"):
        T.fp8.determine_fp8_type("e3m4")


# ------------------------------------------------------------------------ T.atomic_or
def atomic_or_kernel(n, dtype, slots, memory_order=None):
    @T.prim_func
    def main(x: T.Tensor((n,), dtype), acc: T.Tensor((slots,), dtype)):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for t in T.Parallel(64):
                i = bx * 64 + t
                if i < n:
                    T.atomic_or(acc[i % slots], x[i], memory_order=memory_order)
            T.atomic_or(acc[0], 1 << 30)  # thread-independent: idempotent

    return main


@pytest.mark.parametrize("dtype", ["int32", "uint32"])
@pytest.mark.parametrize("memory_order", [None, "release", "seq_cst"])
def test_atomic_or_cpu(dtype, memory_order, rng):
    n, slots = 150, 5
    bits = 31
    x = np.left_shift(np.ones(n, np.uint64), rng.integers(0, bits, n).astype(np.uint64))
    x[rng.random(n) < 0.7] = 0  # sparse bits: the OR does not saturate
    init = np.left_shift(np.ones(slots, np.uint64), rng.integers(0, bits, slots).astype(np.uint64))
    torch_dtype = {"int32": torch.int32, "uint32": torch.uint32}[dtype]
    xt = torch.from_numpy(x.astype(np.int64)).to(torch_dtype)
    acc = torch.from_numpy(init.astype(np.int64)).to(torch_dtype)
    tilelang.compile(atomic_or_kernel(n, dtype, slots, memory_order), target="cpu")(xt, acc)
    ref = init.copy()
    for i in range(n):
        ref[i % slots] |= x[i]
    ref[0] |= np.uint64(1 << 30)
    got = acc.to(torch.int64).numpy().astype(np.uint64)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
    "dst,value,order,words",
    [
        ("f", "1", None, "float32; atomic_or takes int32, uint32 elements"),
        ("a2", "1", None, "dst must be one element"),
        ("a", "1", "strong", "memory_order must be one of"),
    ],
)
def test_atomic_or_errors_name_the_line(dst, value, order, words):
    def make():
        @T.prim_func
        def main(a: T.Tensor((8,), "int32"), f: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                operands = {"a": a[1], "a2": a[0:2], "f": f[0]}
                T.atomic_or(operands[dst], 1, memory_order=order)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        make()
    assert words in str(info.value)
    assert f":{line_of(make, 'T.atomic_or(operands[dst], 1, memory_order=order)')}" in str(
        info.value
    )


def test_atomic_or_is_refused_on_metal():
    from tilelang.backends.metal import pipeline as metal_pipeline

    with pytest.raises(
        tilelang.TileLangError, match="T.atomic_or is not supported on the metal target"
    ):
        metal_pipeline.lower(atomic_or_kernel(100, "int32", 3), {"kind": "metal"})


def test_atomic_or_rocm_source():
    from tilelang.backends.rocm import build as rocm_build
    from tilelang.backends.rocm import pipeline as rocm_pipeline

    target = {"kind": "rocm", "arch": "gfx90a"}
    kernel = atomic_or_kernel(100, "uint32", 3, "acq_rel")
    if rocm_build.find_toolchain() is None:
        lowered = rocm_pipeline.lower(kernel, target)
        assert str(lowered).count("atomicOr") == 2
        return
    source = rocm_pipeline.build(kernel, target).kernel_source
    assert source.count("atomicOr(") == 2 and source.count("__threadfence()") == 2


@needs_nvcc
def test_atomic_or_cuda_source_fences_by_memory_order():
    for order, fences in [(None, 0), ("acquire", 1), ("release", 1), ("acq_rel", 2)]:
        art = cuda_pipeline.build(atomic_or_kernel(100, "int32", 3, order), SM80, compiler="nvcc")
        assert art.device_binary
        source = art.kernel_source
        assert source.count("atomicOr(") == 2
        assert source.count("__threadfence()") == fences * 1, order


# ---------------------------------------------------------------- names no target lowers
@pytest.mark.parametrize("name", sorted(NOT_LOWERED))
def test_not_lowered_names_explain_themselves(name):
    with pytest.raises(AttributeError) as info:
        getattr(T, name)
    msg = str(info.value)
    assert f"T.{name} is not supported on any tilelang target" in msg
    assert "cpu" in msg and "cuda" in msg and "has no attribute" not in msg


def test_not_lowered_name_in_a_kernel_names_the_line():
    def make():
        @T.prim_func
        def main(x: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.tcgen05_mma_arrive(x)

        return main

    with pytest.raises(AttributeError) as info:
        make()
    assert isinstance(info.value, tilelang.TileLangError)
    assert "T.tcgen05_mma_arrive is not supported on any tilelang target" in str(info.value)
    assert f":{line_of(make, 'T.tcgen05_mma_arrive(x)')}" in str(info.value)


def test_unknown_name_is_still_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_op'"):
        T.no_such_op  # noqa: B018


# ----------------------------------------------------------------------------- CUDA
@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    kernels = [
        scheduler_kernel(5, 7, 4, 3, True, 1, 9),
        persistent_add(37, 29, 8, 16, 3),
        fast_math_kernel(53),
        ffs_kernel(70, "int32"),
        ffs_kernel(70, "int64"),
        atomic_or_kernel(100, "uint32", 3, "seq_cst"),
    ]
    for kernel in kernels:
        art = cuda_pipeline.build(kernel, target, compiler="nvcc")
        assert art.device_binary


@pytest.mark.cuda
def test_scheduler_fast_math_ffs_atomic_or_on_gpu(rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    m, n, bm, bn, workers = 37, 29, 8, 16, 3
    a = rng.standard_normal((m, n))
    at = torch.from_numpy(a).float().cuda()
    b = torch.zeros_like(at)
    tilelang.compile(persistent_add(m, n, bm, bn, workers), target="cuda")(at, b)
    ref = _persistent_add_reference(at.double().cpu().numpy(), m, n, bm, bn, workers)
    np.testing.assert_allclose(b.double().cpu().numpy(), ref, rtol=1e-6, atol=1e-6)

    x = rng.uniform(0.1, 1.4, 53)
    y = torch.zeros(len(FAST), 53, device="cuda")
    tilelang.compile(fast_math_kernel(53), target="cuda")(torch.from_numpy(x).float().cuda(), y)
    for k, name in enumerate(FAST):
        ref = NUMPY[name](torch.from_numpy(x).float().double().numpy())
        np.testing.assert_allclose(y[k].double().cpu().numpy(), ref, rtol=2e-5, err_msg=name)

    v = rng.integers(-(2**31), 2**31, 70, dtype=np.int64)
    v[0] = 0
    vt = torch.from_numpy(v.astype(np.uint32).view(np.int32)).cuda()
    out = torch.zeros(70, dtype=torch.int32, device="cuda")
    tilelang.compile(ffs_kernel(70, "int32"), target="cuda")(vt, out)
    np.testing.assert_array_equal(out.cpu().numpy(), [_ffs(int(e), 32) for e in v])

    bits = np.left_shift(1, rng.integers(0, 30, 150))
    bits[rng.random(150) < 0.7] = 0
    acc = torch.zeros(5, dtype=torch.int32, device="cuda")
    xt = torch.from_numpy(bits).to(torch.int32).cuda()
    tilelang.compile(atomic_or_kernel(150, "int32", 5, "acq_rel"), target="cuda")(xt, acc)
    ref = np.zeros(5, np.int64)
    for i in range(150):
        ref[i % 5] |= bits[i]
    ref[0] |= 1 << 30
    np.testing.assert_array_equal(acc.cpu().numpy(), ref)


# ---------------------------------------------------------------------------- T.__fns
def fns_reference(mask: int, base: int, offset: int) -> int:
    """PTX fns.b32, step by step."""
    if offset == 0:
        return base if (mask >> base) & 1 else 0xFFFFFFFF
    pos, count, inc = base, abs(offset) - 1, 1 if offset > 0 else -1
    while 0 <= pos < 32:
        if (mask >> pos) & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


def fns_kernel(n, offset):
    @T.prim_func
    def main(
        mask: T.Tensor((n,), "uint32"), base: T.Tensor((n,), "int32"), y: T.Tensor((n,), "uint32")
    ):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                y[i] = getattr(T, "__fns")(mask[i], base[i], offset)

    return main


@pytest.mark.parametrize("offset", [-5, -2, -1, 0, 1, 3, 7])
def test_fns_cpu(offset, rng):
    n = 96
    mask = rng.integers(0, 2**32, n, dtype=np.uint64)
    mask[:3] = [0, 0xFFFFFFFF, 0xAAAAAAAA]
    mask[3:40] &= rng.integers(0, 2**32, 37, dtype=np.uint64)  # sparser masks
    base = rng.integers(0, 32, n)
    y = torch.zeros(n, dtype=torch.uint32)
    mt = torch.from_numpy(mask.astype(np.int64)).to(torch.uint32)
    tilelang.compile(fns_kernel(n, offset), target="cpu")(mt, torch.from_numpy(base).int(), y)
    ref = [fns_reference(int(m), int(b), offset) for m, b in zip(mask, base)]
    np.testing.assert_array_equal(y.to(torch.int64).numpy() & 0xFFFFFFFF, ref)


def test_fns_needs_a_static_offset():
    with pytest.raises(tilelang.TileLangError, match="offset must be an int known when tracing"):
        fns_kernel_dynamic()


def fns_kernel_dynamic():
    @T.prim_func
    def main(mask: T.Tensor((4,), "uint32"), off: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                mask[i] = getattr(T, "__fns")(mask[i], 0, off[i])

    return main


@needs_nvcc
def test_fns_nvcc():
    for offset in (-2, 0, 3):
        assert cuda_pipeline.build(fns_kernel(64, offset), SM80, compiler="nvcc").device_binary


@pytest.mark.parametrize("kind", ["rocm", "metal"])
def test_vendor_backends_build(kind):
    """The scheduler, fast math, __ffs and __fns build for ROCm and Metal."""
    from tilelang.backends.metal import pipeline as metal_pipeline
    from tilelang.backends.rocm import build as rocm_build
    from tilelang.backends.rocm import pipeline as rocm_pipeline

    pipe, target = (
        (rocm_pipeline, {"kind": "rocm", "arch": "gfx90a"})
        if kind == "rocm"
        else (metal_pipeline, {"kind": "metal"})
    )
    step = pipe.lower if kind == "rocm" and rocm_build.find_toolchain() is None else pipe.build
    for kernel in (
        persistent_add(37, 29, 8, 16, 3),
        fast_math_kernel(53),
        ffs_kernel(70, "int32"),
        fns_kernel(64, -2),
        fns_kernel(64, 3),
    ):
        assert step(kernel, target) is not None
