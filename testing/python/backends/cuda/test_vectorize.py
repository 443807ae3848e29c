"""16-byte vector accesses on CUDA (``tilelang/transform/vectorize.py``), without a GPU.

The lowered IR is checked for ``tl::copy_vec`` (one vector load/store) where the accesses
are contiguous and provably aligned and for none where they are not; the numpy emulator
runs both the vector form and the scalar fallback (``aligned=False``: misaligned base
pointers) on tails; nvcc's PTX shows ``ld/st.global.v4`` and ``ld/st.shared.v4``.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

TARGET = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def add_via_shared(M, N, bM=64, bN=128, dtype="float16"):
    """C = A + B with A staged in shared memory (a tile copy and a T.Parallel nest)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bN), dtype)
            T.copy(A[by * bM, bx * bN], As)
            for i, j in T.Parallel(bM, bN):
                C[by * bM + i, bx * bN + j] = As[i, j] + B[by * bM + i, bx * bN + j]

    return main


def add_direct(M, N, bM=32, bN=256, dtype="float16"):
    """C = A + B straight on global memory, indices ``base + j`` (benchmark/elementwise.py)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                y, x = by * bM + i, bx * bN + j
                C[y, x] = A[y, x] + B[y, x]

    return main


def scale_in_place(M, N, bM=32, bN=64):
    """A shared tile scaled in place, then read back through another shared tile."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            As = T.alloc_shared((bM, bN), "float32")
            Ss = T.alloc_shared((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], As)
            for i, j in T.Parallel(bM, bN):
                As[i, j] = As[i, j] * 2.0
            for i, j in T.Parallel(bM, bN):
                Ss[i, j] = As[i, j] + 1.0  # a store, then a load of the same tile
                C[by * bM + i, bx * bN + j] = Ss[i, j] * 3.0

    return main


def fragment_roundtrip(M, N, bM=16, dtype="float32"):
    """A row block through a fragment: fragment <-> global copies and a register loop."""

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM, N), dtype)
            T.copy(X[bx * bM, 0], x)
            for i, j in T.Parallel(bM, N):
                x[i, j] = x[i, j] * 2.0 + 1.0
            T.copy(x, Y[bx * bM, 0])

    return main


def _vector_targets(lowered):
    """{tensor name: bytes} of every ``tl::copy_vec``/``tl::zero_vec`` operand."""
    text = lowered.script()
    found = {}
    for nbytes, args in re.findall(r'"tl::(?:copy|zero)_vec<(\d+)>", (.*?), ty=T.void', text):
        for name in re.findall(r"T\.address_of\((\w+)\[", args):
            found.setdefault(name, set()).add(int(nbytes))
    return found


def _random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_copy_and_parallel_use_16_byte_vectors():
    lowered = pipeline.lower(add_via_shared(1024, 1024), TARGET)
    found = _vector_targets(lowered)
    for name in ("A", "As", "B", "C"):
        assert found.get(name) == {16}, (name, found)
    text = lowered.script()
    # global base pointers are only element aligned: the vector forms are chosen at run time
    assert 'T.call_extern("tl::is_aligned", A.data, 16' in text
    assert 'T.call_extern("tl::is_aligned", B.data, 16' in text


@pytest.mark.parametrize("M,N", [(256, 512), (70, 1000)])
def test_global_offsets_get_vector_layouts(M, N):
    """``bx * bN + j`` is unit stride in j: the loop layout gives threads 16-byte vectors."""
    lowered = pipeline.lower(add_direct(M, N), TARGET)
    found = _vector_targets(lowered)
    assert all(found.get(name) == {16} for name in "ABC"), found
    a, b = _random((M, N), np.float16, 7), _random((M, N), np.float16, 8)
    c = np.full_like(a, np.nan)
    a, b, c = emulate(lowered, a, b, c)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("M,N", [(1000, 1000), (64, 128), (70, 200)])
def test_vector_forms_emulated_with_tails(M, N, aligned):
    a, b = _random((M, N), np.float16, 1), _random((M, N), np.float16, 2)
    c = np.full_like(a, np.nan)
    lowered = pipeline.lower(add_via_shared(M, N), TARGET)
    a, b, c = emulate(lowered, a, b, c, aligned=aligned)
    np.testing.assert_array_equal(c, a + b)


def test_unaligned_rows_stay_scalar():
    """N = 1001: no row starts at a multiple of 8 elements, so global accesses stay scalar."""
    M, N = 100, 1001
    lowered = pipeline.lower(add_via_shared(M, N), TARGET)
    found = _vector_targets(lowered)
    assert not {"A", "B", "C"} & set(found), found
    assert found.get("As") == {16}  # the shared tile itself is still read in vectors
    a, b = _random((M, N), np.float16, 3), _random((M, N), np.float16, 4)
    c = np.full_like(a, np.nan)
    a, b, c = emulate(lowered, a, b, c)
    np.testing.assert_array_equal(c, a + b)


def test_store_then_load_of_one_tile_keeps_lane_order():
    M, N = 96, 192
    lowered = pipeline.lower(scale_in_place(M, N), TARGET)
    found = _vector_targets(lowered)
    assert "Ss" not in found  # stored then loaded in the same lane: no vector moves past it
    assert found.get("As") == {16} and found.get("C") == {16}
    a = _random((M, N), np.float32, 5)
    c = np.full_like(a, np.nan)
    a, c = emulate(lowered, a, c)
    np.testing.assert_allclose(c, (a * 2 + 1) * 3, rtol=1e-6)


@pytest.mark.parametrize("M,N", [(100, 256), (37, 512)])
def test_fragment_copies_use_vectors(M, N):
    lowered = pipeline.lower(fragment_roundtrip(M, N), TARGET)
    found = _vector_targets(lowered)
    assert found.get("X") == {16} and found.get("Y") == {16}, found
    for aligned in (True, False):
        x = _random((M, N), np.float32, 6)
        y = np.full_like(x, np.nan)
        x, y = emulate(lowered, x, y, aligned=aligned)
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


def test_no_barrier_inside_a_copy_loop():
    """Iterations of one tile copy never need a barrier between them (nested loops)."""
    lowered = pipeline.lower(add_via_shared(1024, 1024), TARGET)
    text = lowered.script()
    loops = re.findall(r"for c_i[ts] in T.unroll\(0, 8\):\n((?:\s{20,}.*\n)+)", text)
    assert loops and all("__syncthreads" not in body for body in loops)


@needs_nvcc
def test_ptx_has_vector_loads_and_stores(tmp_path):
    from tilelang.backends.cuda.build import build_cuda

    art = build_cuda(pipeline.lower(add_via_shared(1024, 1024), TARGET), compiler="nvcc")
    cu = tmp_path / "k.cu"
    cu.write_text(art.get_kernel_source())
    ptx = subprocess.run(
        ["nvcc", "-ptx", "-gencode=arch=compute_90a,code=sm_90a", "-o", "-", str(cu)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for op in (r"ld\.global(\.nc)?\.v4", r"st\.global\.v4", r"ld\.shared\.v4", r"st\.shared\.v4"):
        assert re.search(op, ptx), op


def gemm_serial(M, N, K, bM=128, bN=128, bK=64):
    """A GEMM whose tile copies are not pipelined: synchronous copies into swizzled tiles."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.serial(T.ceildiv(K, bK)):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * bM, bx * bN])

    return main


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_copy_with_lanes_into_swizzled_tile_builds(arch):
    """Vector load + per-lane swizzled stores: the scalar form gets its own loop variables
    (TIRx rejected the kernel with 'Duplicate loop variable')."""
    func = gemm_serial(256, 256, 256)
    lowered = pipeline.lower(func, {"kind": "cuda", "arch": arch})
    assert "B" in _vector_targets(lowered)
    pipeline.build(func, {"kind": "cuda", "arch": arch}, compiler="nvcc")


@pytest.mark.cuda
@pytest.mark.parametrize("offset", [0, 1, 8])
def test_vector_and_scalar_forms_on_gpu(offset):
    """Inputs/outputs at an element offset of ``offset`` from 16-byte aligned memory: the
    offset 1 views are misaligned, so the kernel takes its scalar form (tl::is_aligned)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    import tilelang

    M, N = 200, 1000
    kernels = [
        tilelang.compile(add_via_shared(M, N), target="cuda"),
        tilelang.compile(add_direct(M, N), target="cuda"),
    ]

    def view(t):
        flat = torch.empty(M * N + 8, device="cuda", dtype=t.dtype)
        out = flat[offset : offset + M * N].view(M, N)
        out.copy_(t)
        return out

    a = view(torch.randn(M, N, device="cuda", dtype=torch.float16))
    b = view(torch.randn(M, N, device="cuda", dtype=torch.float16))
    for kernel in kernels:
        c = view(torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16))
        kernel(a, b, c)
        torch.testing.assert_close(c, a + b, rtol=0, atol=0)
