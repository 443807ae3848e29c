"""Tile ops on a *part* of a fragment touch exactly that part (issue 12: ``T.fill(f[0:32,
0:32], 0)`` on a (32, 64) fragment used to zero all 64 columns on CUDA).

Each kernel loads ``A`` into a fragment, applies the op to a region (static or at a loop
variable's offset, shapes that are not tile multiples) and stores the fragment(s); the
result is checked against float64 numpy in the CUDA emulator (sm_80, sm_90a; 32/128/256
threads), on the CPU backend, in the ROCm/Metal emulators and, marked ``cuda``, on a GPU.
"""

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline as cuda_pipeline

F32 = "float32"
ARCHS = ["sm_80", "sm_90a"]
THREADS = [32, 128, 256]


# ------------------------------------------------------------------ kernels and references
def fill_kernel(m, n, rows, cols, threads, clear=False):
    """``f = A; T.fill(f[rows, cols], 2.5)`` (or ``T.clear``); ``B = f``."""

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), B: T.Tensor((m, n), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            if clear:
                T.clear(f[rows[0] : rows[1], cols[0] : cols[1]])
            else:
                T.fill(f[rows[0] : rows[1], cols[0] : cols[1]], 2.5)
            T.copy(f, B)

    def ref(a):
        out = a.copy()
        out[rows[0] : rows[1], cols[0] : cols[1]] = 0.0 if clear else 2.5
        return out

    return main, ref


def fill_symbolic_kernel(m, n, step, height, cols, threads):
    """``for k: T.fill(f[k * step : k * step + height, cols], k + 1)``: a loop-variable
    offset (the regions of successive k overlap when ``height > step``)."""
    count = (m - height) // step + 1

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), B: T.Tensor((m, n), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            for k in T.serial(count):
                T.fill(f[k * step : k * step + height, cols[0] : cols[1]], T.cast(k + 1, F32))
            T.copy(f, B)

    def ref(a):
        out = a.copy()
        for k in range(count):
            out[k * step : k * step + height, cols[0] : cols[1]] = k + 1
        return out

    return main, ref


def copy_kernel(m, n, src, dst, threads, other_shape=None):
    """``f = A; g = B; T.copy(f[src], g[dst]); C = g``; ``g`` is ``(m, n)`` (then the same
    layout as ``f``) or ``other_shape`` (another layout: an exchange through shared)."""
    gm, gn = other_shape or (m, n)

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), B: T.Tensor((gm, gn), F32), C: T.Tensor((gm, gn), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            g = T.alloc_fragment((gm, gn), F32)
            T.copy(A, f)
            T.copy(B, g)
            T.copy(f[src[0] : src[1], src[2] : src[3]], g[dst[0] : dst[1], dst[2] : dst[3]])
            T.copy(g, C)

    def ref(a, b):
        out = b.copy()
        out[dst[0] : dst[1], dst[2] : dst[3]] = a[src[0] : src[1], src[2] : src[3]]
        return out

    return main, ref


def global_copy_kernel(m, n, region, threads, to_fragment):
    """A fragment region to/from the top-left corner of a global tile ``C``."""
    r0, r1, c0, c1 = region
    h, w = r1 - r0, c1 - c0

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), B: T.Tensor((h, w), F32), C: T.Tensor((m, n), F32),
             D: T.Tensor((h, w), F32)):  # fmt: skip
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            if to_fragment:
                T.copy(B, f[r0:r1, c0:c1])
            else:
                T.copy(f[r0:r1, c0:c1], D)
            T.copy(f, C)

    def ref(a, b, d):
        c = a.copy()
        if to_fragment:
            c[r0:r1, c0:c1] = b
        else:
            d = a[r0:r1, c0:c1].copy()
        return c, d

    return main, ref


def symbolic_copy_kernel(m, n, step, height, threads):
    """``for k: T.copy(f[k * step : k * step + height, :], D[k * height : ..., :])``."""
    count = (m - height) // step + 1

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), D: T.Tensor((count * height, n), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            for k in T.serial(count):
                T.copy(
                    f[k * step : k * step + height, 0:n], D[k * height : k * height + height, 0:n]
                )

    def ref(a):
        return np.concatenate([a[k * step : k * step + height] for k in range(count)])

    return main, ref


def row_copy_kernel(m, n, c0, c1, threads):
    """Per row ``k`` (a loop variable): ``T.copy(B[k, 0:w], f[k, c0:c1])`` (a load into a
    one-row part) and ``T.copy(f[k, c0:c1], D[k, 0:w])`` back out of it, rows reversed."""
    w = c1 - c0

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), B: T.Tensor((m, w), F32), C: T.Tensor((m, n), F32),
             D: T.Tensor((m, w), F32)):  # fmt: skip
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            for k in T.serial(m):
                T.copy(B[k, 0:w], f[k, c0:c1])
            for k in T.serial(m):
                T.copy(f[m - 1 - k, c0:c1], D[k, 0:w])
            T.copy(f, C)

    def ref(a, b):
        c = a.copy()
        c[:, c0:c1] = b
        return c, c[::-1, c0:c1].copy()

    return main, ref


def atomic_kernel(m, n, region, threads):
    """``T.atomic_add(D, f[region])`` into a global tile of the region's shape."""
    r0, r1, c0, c1 = region

    @T.prim_func
    def main(A: T.Tensor((m, n), F32), D: T.Tensor((r1 - r0, c1 - c0), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((m, n), F32)
            T.copy(A, f)
            T.atomic_add(D, f[r0:r1, c0:c1])

    def ref(a, d):
        return d + a[r0:r1, c0:c1]

    return main, ref


def gemm_fill_kernel(m, n, k, rows, cols, threads):
    """``C = A @ B`` in a gemm accumulator (mma / wgmma layout); ``T.fill(C[rows, cols],
    0)``; ``D = C``."""

    @T.prim_func
    def main(A: T.Tensor((m, k), "float16"), B: T.Tensor((k, n), "float16"),
             D: T.Tensor((m, n), F32)):  # fmt: skip
        with T.Kernel(1, threads=threads) as _:
            a_s = T.alloc_shared((m, k), "float16")
            b_s = T.alloc_shared((k, n), "float16")
            c = T.alloc_fragment((m, n), F32)
            T.copy(A, a_s)
            T.copy(B, b_s)
            T.clear(c)
            T.gemm(a_s, b_s, c)
            T.fill(c[rows[0] : rows[1], cols[0] : cols[1]], 0)
            T.copy(c, D)

    def ref(a, b):
        out = a @ b
        out[rows[0] : rows[1], cols[0] : cols[1]] = 0
        return out

    return main, ref


def vector_fill_kernel(n, lo, hi, threads):
    """A 1-d fragment (one element per thread, or replicated when threads exceed it)."""

    @T.prim_func
    def main(A: T.Tensor((n,), F32), B: T.Tensor((n,), F32)):
        with T.Kernel(1, threads=threads) as _:
            f = T.alloc_fragment((n,), F32)
            T.copy(A, f)
            T.fill(f[lo:hi], -1.0)
            T.copy(f, B)

    def ref(a):
        out = a.copy()
        out[lo:hi] = -1.0
        return out

    return main, ref


# ------------------------------------------------------------------ runners
def _emulate_cuda(func, arch, *arrays):
    from tilelang.testing.cuda_emulator import emulate

    lowered = cuda_pipeline.lower(func, {"kind": "cuda", "arch": arch})
    return emulate(lowered, *[np.array(a, np.float32) for a in arrays])


def _emulate_cuda_raw(func, arch, *arrays):
    from tilelang.testing.cuda_emulator import emulate

    return emulate(cuda_pipeline.lower(func, {"kind": "cuda", "arch": arch}), *arrays)


def _run_cpu(func, *arrays):
    kernel = tilelang.compile(func, target="cpu")
    tensors = [torch.from_numpy(np.array(a, np.float32)) for a in arrays]
    kernel(*tensors)
    return [t.numpy() for t in tensors]


def _emulate_vendor(func, backend, *arrays):
    if backend == "rocm":
        from tilelang.backends.rocm import pipeline
        from tilelang.testing.rocm_emulator import emulate

        target = {"kind": "rocm", "arch": "gfx90a"}
    else:
        from tilelang.backends.metal import pipeline
        from tilelang.testing.metal_emulator import emulate

        target = {"kind": "metal"}
    lowered = pipeline.lower(func, target)
    return emulate(lowered, *[np.array(a, np.float32) for a in arrays])


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6, atol=1e-6)


FILL_CASES = {
    "left_half": (32, 64, (0, 32), (0, 32)),  # the reproducer
    "inner": (32, 64, (5, 27), (3, 45)),
    "rows_only": (48, 40, (16, 20), (0, 40)),
    "odd_shape": (30, 50, (7, 29), (11, 37)),
    "one_row": (24, 72, (9, 10), (0, 72)),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("case", sorted(FILL_CASES))
@pytest.mark.parametrize("clear", [False, True], ids=["fill", "clear"])
def test_fill_region_emulated(case, threads, arch, clear, rng):
    m, n, rows, cols = FILL_CASES[case]
    func, ref = fill_kernel(m, n, rows, cols, threads, clear)
    a = rng.standard_normal((m, n))
    _, out = _emulate_cuda(func, arch, a, np.zeros((m, n)))
    _close(out, ref(a.astype(np.float32).astype(np.float64)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(64, 48, 16, 16), (45, 33, 7, 12)], ids=["tiles", "odd"])
def test_fill_symbolic_region_emulated(shape, threads, arch, rng):
    m, n, step, height = shape
    func, ref = fill_symbolic_kernel(m, n, step, height, (2, n - 3), threads)
    a = rng.standard_normal((m, n))
    _, out = _emulate_cuda(func, arch, a, np.zeros((m, n)))
    _close(out, ref(a.astype(np.float32).astype(np.float64)))


@pytest.mark.parametrize("threads", [128, 256])
def test_fill_region_of_gemm_accumulator_emulated(threads, rng):
    """The mma.sync accumulator layout (sm_80; the emulator has no wgmma fences, so the
    sm_90a wgmma accumulator is checked by the GPU twin)."""
    arch = "sm_80"
    m, n, k = 64, 64, 32
    func, ref = gemm_fill_kernel(m, n, k, (16, 41), (8, 33), threads)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    _, _, d = _emulate_cuda_raw(func, arch, a, b, np.zeros((m, n), np.float32))
    want = ref(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(d.astype(np.float64), want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("threads", [32, 128])
@pytest.mark.parametrize("n", [50, 200])
def test_fill_region_of_1d_fragment_emulated(n, threads, rng):
    func, ref = vector_fill_kernel(n, 7, 43, threads)
    a = rng.standard_normal(n)
    _, out = _emulate_cuda(func, "sm_80", a, np.zeros(n))
    _close(out, ref(a.astype(np.float32).astype(np.float64)))


COPY_CASES = {
    "same_part": ((32, 64), (4, 20, 0, 32), (4, 20, 0, 32), None),
    "other_part": ((32, 64), (0, 8, 0, 16), (8, 16, 16, 32), None),
    "other_layout": ((30, 50), (3, 17, 5, 29), (1, 15, 0, 24), (16, 24)),
}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("case", sorted(COPY_CASES))
def test_copy_fragment_regions_emulated(case, threads, arch, rng):
    (m, n), src, dst, other = COPY_CASES[case]
    func, ref = copy_kernel(m, n, src, dst, threads, other)
    a, b = rng.standard_normal((m, n)), rng.standard_normal(other or (m, n))
    out = _emulate_cuda(func, arch, a, b, np.zeros_like(b))[2]
    _close(out, ref(*(x.astype(np.float32).astype(np.float64) for x in (a, b))))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("to_fragment", [False, True], ids=["store", "load"])
def test_copy_fragment_region_global_emulated(to_fragment, threads, arch, rng):
    m, n, region = 30, 50, (3, 20, 7, 40)
    func, ref = global_copy_kernel(m, n, region, threads, to_fragment)
    h, w = region[1] - region[0], region[3] - region[2]
    a, b = rng.standard_normal((m, n)), rng.standard_normal((h, w))
    _, _, c, d = _emulate_cuda(func, arch, a, b, np.zeros((m, n)), np.zeros((h, w)))
    want_c, want_d = ref(*(x.astype(np.float32).astype(np.float64) for x in (a, b)), 0 * b)
    _close(c, want_c)
    _close(d, want_d)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", [32, 128])
def test_copy_symbolic_region_emulated(threads, arch, rng):
    func, ref = symbolic_copy_kernel(40, 24, 8, 12, threads)
    a = rng.standard_normal((40, 24))
    _, d = _emulate_cuda(func, arch, a, np.zeros((4 * 12, 24)))
    _close(d, ref(a.astype(np.float32).astype(np.float64)))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", [32, 128])
def test_copy_row_regions_emulated(threads, arch, rng):
    m, n, c0, c1 = 13, 40, 3, 30
    func, ref = row_copy_kernel(m, n, c0, c1, threads)
    a, b = rng.standard_normal((m, n)), rng.standard_normal((m, c1 - c0))
    _, _, c, d = _emulate_cuda(func, arch, a, b, np.zeros((m, n)), np.zeros((m, c1 - c0)))
    want_c, want_d = ref(*(x.astype(np.float32).astype(np.float64) for x in (a, b)))
    _close(c, want_c)
    _close(d, want_d)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("threads", [32, 128])
def test_atomic_add_region_emulated(threads, arch, rng):
    region = (2, 19, 5, 37)
    func, ref = atomic_kernel(30, 50, region, threads)
    a, d = rng.standard_normal((30, 50)), rng.standard_normal((17, 32))
    _, out = _emulate_cuda(func, arch, a, d)
    _close(out, ref(*(x.astype(np.float32).astype(np.float64) for x in (a, d))))


def test_cumsum_region_is_an_error():
    @T.prim_func
    def main(A: T.Tensor((32, 64), F32), B: T.Tensor((32, 64), F32)):
        with T.Kernel(1, threads=128) as _:
            f = T.alloc_fragment((32, 64), F32)
            T.copy(A, f)
            T.cumsum(f[0:16, 0:64], dim=1)
            T.copy(f, B)

    with pytest.raises(errors.CompileError, match=r"T.cumsum.*whole fragments.*\bf\b") as info:
        cuda_pipeline.lower(main, {"kind": "cuda", "arch": "sm_80"})
    assert "test_fragment_regions.py" in str(info.value)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ARCHS)
def test_region_kernels_build_with_nvcc(arch):
    """The guarded register writes compile (the GPU twin's kernels, built here)."""
    from tilelang.backends.cuda import build_cuda

    kernels = [
        fill_symbolic_kernel(45, 33, 7, 12, (2, 30), 128)[0],
        copy_kernel(32, 64, (0, 8, 0, 16), (8, 16, 16, 32), 128)[0],
        gemm_fill_kernel(64, 64, 32, (16, 41), (8, 33), 128)[0],
        atomic_kernel(30, 50, (2, 19, 5, 37), 128)[0],
    ]
    for func in kernels:
        lowered = cuda_pipeline.lower(func, {"kind": "cuda", "arch": arch})
        build_cuda(lowered, arch=arch, compiler="nvcc")


# ------------------------------------------------------------------ CPU / ROCm / Metal twins
def _all_kernels(rng):
    """(name, func, inputs, reference outputs by argument position) of one of each kind."""
    out = []
    m, n, rows, cols = FILL_CASES["odd_shape"]
    func, ref = fill_kernel(m, n, rows, cols, 128)
    a = rng.standard_normal((m, n)).astype(np.float32)
    out.append(("fill", func, [a, np.zeros((m, n))], {1: ref(a.astype(np.float64))}))
    func, ref = fill_symbolic_kernel(45, 33, 7, 12, (2, 30), 128)
    a = rng.standard_normal((45, 33)).astype(np.float32)
    out.append(("fill_symbolic", func, [a, np.zeros((45, 33))], {1: ref(a.astype(np.float64))}))
    for case in sorted(COPY_CASES):
        (m, n), src, dst, other = COPY_CASES[case]
        func, ref = copy_kernel(m, n, src, dst, 128, other)
        a = rng.standard_normal((m, n)).astype(np.float32)
        b = rng.standard_normal(other or (m, n)).astype(np.float32)
        want = ref(a.astype(np.float64), b.astype(np.float64))
        out.append((f"copy_{case}", func, [a, b, np.zeros_like(b)], {2: want}))
    func, ref = row_copy_kernel(13, 40, 3, 30, 128)
    a = rng.standard_normal((13, 40)).astype(np.float32)
    b = rng.standard_normal((13, 27)).astype(np.float32)
    want_c, want_d = ref(a.astype(np.float64), b.astype(np.float64))
    inputs = [a, b, np.zeros((13, 40)), np.zeros((13, 27))]
    out.append(("copy_rows", func, inputs, {2: want_c, 3: want_d}))
    return out


def _check_twin(run, rng):
    for name, func, inputs, want in _all_kernels(rng):
        results = run(func, *inputs)
        for pos, expected in want.items():
            try:
                _close(results[pos], expected)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None


def test_regions_cpu_backend(rng):
    _check_twin(_run_cpu, rng)


@pytest.mark.parametrize("backend", ["rocm", "metal"])
def test_regions_vendor_emulated(backend, rng):
    _check_twin(lambda func, *arrays: _emulate_vendor(func, backend, *arrays), rng)


@pytest.mark.cuda
@pytest.mark.parametrize("threads", [128, 256])
def test_regions_gpu(threads, rng):
    """Fills, clears and copies of fragment parts on the GPU against float64 numpy."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")

    def run(func, *arrays):
        kernel = tilelang.compile(func, target="cuda")
        tensors = [torch.from_numpy(np.array(a, np.float32)).cuda() for a in arrays]
        kernel(*tensors)
        torch.cuda.synchronize()
        return [t.cpu().numpy() for t in tensors]

    _check_twin(run, rng)
    for case in sorted(FILL_CASES):
        m, n, rows, cols = FILL_CASES[case]
        func, ref = fill_kernel(m, n, rows, cols, threads, clear=True)
        a = rng.standard_normal((m, n)).astype(np.float32)
        _close(run(func, a, np.zeros((m, n)))[1], ref(a.astype(np.float64)))
    func, ref = atomic_kernel(30, 50, (2, 19, 5, 37), threads)
    a, d = (rng.standard_normal(s).astype(np.float32) for s in ((30, 50), (17, 32)))
    _close(run(func, a, d)[1], ref(a.astype(np.float64), d.astype(np.float64)))
    # the gemm accumulator's layout (wgmma on an H100/H200, mma.sync before)
    func, ref = gemm_fill_kernel(64, 64, 32, (16, 41), (8, 33), threads)
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((32, 64)).astype(np.float16)
    kernel = tilelang.compile(func, target="cuda")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    td = torch.zeros((64, 64), dtype=torch.float32, device="cuda")
    kernel(ta, tb, td)
    want = ref(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(td.cpu().numpy().astype(np.float64), want, rtol=1e-3, atol=1e-3)
