"""``T.copy(shared -> fragment)`` lowered to ``ldmatrix`` (``tilelang/ops/copy_ldmatrix_cuda.py``).

- IR level: which copies become ``tl::ptx_ldmatrix_x{1,2,4}[_trans]`` (mma A/B operand
  and accumulator fragments, linear / swizzled / chunk-rotated shared tiles, symbolic
  slices) and which keep per-thread loads (default fragments, a fragment one lane off
  the ldmatrix map, an element-wise swizzle, 8-byte aligned slices, type conversion).
- The full CUDA pipeline's kernels run by the numpy emulator (``emulate.py`` follows the
  PTX ldmatrix/mma semantics) against numpy float64 references, on random inputs with
  shapes that are not multiples of the tile (zero-filled tails).
- nvcc builds the sources for sm_80 and sm_90a (PTX has ldmatrix where expected).
- ``@pytest.mark.cuda``: the same kernels on the GPU against torch.
"""

import re
import shutil
import subprocess

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.layout import (
    Fragment,
    Layout,
    make_mma_a_fragment,
    make_mma_accumulator_fragment,
    make_mma_b_fragment,
    make_swizzled_layout,
)
from tilelang.testing.cuda_emulator import emulate

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ARCH_FLAGS = {"sm_80": ["-arch=sm_80"], "sm_90a": ["-gencode=arch=compute_90a,code=sm_90a"]}
LDSM = re.compile(r"tl::ptx_ldmatrix_x[124](?:_trans)?")


def _lower(func, arch="sm_80", pass_configs=None):
    return pipeline.lower(func, {"kind": "cuda", "arch": arch}, pass_configs)


def _ldmatrix(lowered) -> list:
    return LDSM.findall(str(lowered))


# ------------------------------------------------------------------------- layouts
def _frag(kind, bm, bn, bits=16):
    """A (bm, bn) fragment over 128 threads and the ldmatrix it should give (None: none)."""
    if kind == "mma_a":  # A stored (m, k): plain
        return make_mma_a_fragment(bm, 8, bn, 4, 1, bits), "x4"
    if kind == "mma_a_t":  # A stored (k, m): .trans
        return make_mma_a_fragment(bn, 8, bm, 4, 1, bits, transposed=True), "x4_trans"
    if kind == "mma_b":  # B stored (k, n): .trans
        return make_mma_b_fragment(16, bn, bm, 1, 4, bits), "x4_trans"
    if kind == "mma_b_t":  # B stored (n, k): plain
        return make_mma_b_fragment(16, bm, bn, 1, 4, bits, transposed=True), "x4"
    if kind == "acc":  # a 16-bit accumulator: plain
        return make_mma_accumulator_fragment(bm, bn, 2, 2), "x4"
    if kind == "replicated":  # mma A of 16 rows, one copy per warp
        return make_mma_a_fragment(bm, 32, bn, 1, 4, bits), "x4"
    if kind == "two_warps":  # spans threads 0..63 of 128
        return make_mma_a_fragment(bm, 8, bn, 2, 1, bits), "x4"
    if kind == "lanes_transposed":  # lane = row + 8 * column pair: neither ldmatrix map
        atom = Fragment(
            [16, 16],
            forward_thread_fn=lambda i, j: i % 8 + (j % 8) // 2 * 8,
            forward_index_fn=lambda i, j: (j // 8) * 4 + (i // 8) * 2 + j % 2,
        )
        return atom.repeat([1, bn // 16], False, True).repeat([bm // 16, 1], True), None
    raise ValueError(kind)


def _shared_layout(kind, bm, bn, dtype):
    if kind == "linear":
        return None
    if kind == "swizzled":
        return make_swizzled_layout(([bm, bn], dtype))
    if kind == "rotated":  # 16-byte chunks rotated by the row: rows stay 16 contiguous bytes
        return Layout([bm, bn], lambda i, j: [i, (j + 8 * i) % bn])
    if kind == "element_xor":  # elements permuted inside each 16-byte chunk: no ldmatrix
        return Layout([bm, bn], lambda i, j: [i, j - j % 8 + (j % 8) ^ (i % 8)])
    raise ValueError(kind)


# ------------------------------------------------------------------------- kernels
def roundtrip(M, N, frag, shared=None, bm=64, bn=64, dtype="float16", frag_dtype=None):
    """global -> shared -> fragment (``frag``, or the default) -> global."""
    frag_dtype = frag_dtype or dtype

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), frag_dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            S = T.alloc_shared((bm, bn), dtype)
            F = T.alloc_fragment((bm, bn), frag_dtype)
            if shared is not None:
                T.annotate_layout({S: shared})
            if frag is not None:
                T.annotate_layout({F: frag})
            T.copy(A[by * bm, bx * bn], S)
            T.copy(S, F)
            T.copy(F, B[by * bm, bx * bn])

    return main


def sliced(M, col_step, frag, shared=None, dtype="float16"):
    """A (64, 64) shared tile read as 16x16 slices ``S[16 i, col_step k]`` (symbolic begins)."""
    nk = (64 - 16) // col_step + 1

    @T.prim_func
    def main(A: T.Tensor((M, 64), dtype), B: T.Tensor((M, nk * 16), dtype)):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            S = T.alloc_shared((64, 64), dtype)
            F = T.alloc_fragment((16, 16), dtype)
            if shared is not None:
                T.annotate_layout({S: shared})
            T.annotate_layout({F: frag})
            T.copy(A[bx * 64, 0], S)
            for i in T.serial(4):
                for k in T.serial(nk):
                    T.copy(S[i * 16 : i * 16 + 16, k * col_step : k * col_step + 16], F)
                    T.copy(F, B[bx * 64 + i * 16, k * 16])

    return main


def sliced_reference(a, col_step):
    nk = (64 - 16) // col_step + 1
    return np.concatenate([a[:, k * col_step : k * col_step + 16] for k in range(nk)], axis=1)


def gemm_a_frag(M, N, K, dtype="float16", ta=False, bm=64, bn=64, bk=32, stages=2):
    """C = A @ B with A copied shared -> fragment by T.copy, then T.gemm from registers."""
    a_shape, as_ = ((K, M), (bk, bm)) if ta else ((M, K), (bm, bk))

    @T.prim_func
    def main(
        A: T.Tensor(a_shape, dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_shared = T.alloc_shared(as_, dtype)
            A_frag = T.alloc_fragment(as_, dtype)
            B_shared = T.alloc_shared((bk, bn), dtype)
            C_local = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                if ta:
                    T.copy(A[k * bk, by * bm], A_shared)
                else:
                    T.copy(A[by * bm, k * bk], A_shared)
                T.copy(B[k * bk, bx * bn], B_shared)
                T.copy(A_shared, A_frag)
                T.gemm(A_frag, B_shared, C_local, transpose_A=ta)
            T.copy(C_local, C[by * bm, bx * bn])

    return main


# ------------------------------------------------------------------------- helpers
def _random(rng, shape, dtype):
    """float64 samples and their ``dtype`` numpy array (bfloat16 through ml_dtypes)."""
    import ml_dtypes

    if dtype == "int8":
        data = rng.integers(-128, 128, shape).astype(np.int8)
        return data.astype(np.float64), data
    np_type = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    data = rng.standard_normal(shape).astype(np_type)
    return data.astype(np.float64), data


def _empty(shape, dtype):
    import ml_dtypes

    if dtype == "int8":
        return np.full(shape, -1, np.int8)
    np_type = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
    return np.full(shape, np.nan, np_type[dtype])


def _ptx(source, arch, tmp_path):
    cu = tmp_path / f"k_{arch}.cu"
    cu.write_text(source)
    return subprocess.run(
        ["nvcc", "-ptx", *ARCH_FLAGS[arch], "-o", "-", str(cu)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


# ------------------------------------------------------------------------- IR + emulator
FITTING = ["mma_a", "mma_a_t", "mma_b", "mma_b_t", "acc", "two_warps"]


@pytest.mark.parametrize("shared", ["linear", "swizzled", "rotated"])
@pytest.mark.parametrize("kind", FITTING)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_roundtrip_uses_ldmatrix_emulated(kind, shared, dtype, rng):
    """Fitting fragments read by ldmatrix (plain or .trans); tails of 100 x 72 zero-filled."""
    M, N = 100, 72
    frag, want = _frag(kind, 64, 64)
    lowered = _lower(roundtrip(M, N, frag, _shared_layout(shared, 64, 64, dtype), dtype=dtype))
    calls = _ldmatrix(lowered)
    assert calls and set(calls) == {f"tl::ptx_ldmatrix_{want}"}, calls
    ref, a = _random(rng, (M, N), dtype)
    _, b = emulate(lowered, a, _empty((M, N), dtype))
    np.testing.assert_array_equal(b.astype(np.float64), ref)


@pytest.mark.parametrize(
    "kind,shared,dtype,frag_dtype",
    [
        (None, "linear", "float16", None),  # default fragment: one element per thread
        ("lanes_transposed", "linear", "float16", None),
        ("lanes_transposed", "swizzled", "bfloat16", None),
        ("mma_a", "element_xor", "float16", None),  # 16-byte rows not contiguous
        ("mma_a", "linear", "float16", "float32"),  # converts the element type
    ],
)
def test_roundtrip_fallback_emulated(kind, shared, dtype, frag_dtype, rng):
    """Layouts that do not fit ldmatrix keep the per-thread loads, with the same results."""
    M, N = 100, 72
    frag = _frag(kind, 64, 64)[0] if kind else None
    func = roundtrip(
        M, N, frag, _shared_layout(shared, 64, 64, dtype), dtype=dtype, frag_dtype=frag_dtype
    )
    lowered = _lower(func)
    assert _ldmatrix(lowered) == []
    ref, a = _random(rng, (M, N), dtype)
    _, b = emulate(lowered, a, _empty((M, N), frag_dtype or dtype))
    np.testing.assert_array_equal(b.astype(np.float64), ref)


def test_int8_roundtrip_emulated(rng):
    """8-bit elements: 4 per register, plain ldmatrix (the int8 mma A operand layout)."""
    M, N = 70, 64
    frag, want = _frag("mma_a", 64, 64, bits=8)
    lowered = _lower(roundtrip(M, N, frag, None, dtype="int8"))
    assert set(_ldmatrix(lowered)) == {"tl::ptx_ldmatrix_x4"}
    ref, a = _random(rng, (M, N), "int8")
    _, b = emulate(lowered, a, _empty((M, N), "int8"))
    np.testing.assert_array_equal(b.astype(np.float64), ref)


@pytest.mark.parametrize(
    "col_step,shared,uses",
    [
        (16, "linear", True),
        (8, "swizzled", True),  # slices start at any 16-byte chunk of a swizzled row
        (4, "linear", False),  # 8-byte aligned column begins: per-thread loads
    ],
)
def test_symbolic_slices_emulated(col_step, shared, uses, rng):
    """Begins ``16 i`` and ``col_step k`` (loop variables): the fit holds for every value."""
    M = 128
    frag = make_mma_a_fragment(16, 32, 16, 1, 4)  # replicated over the 4 warps
    lowered = _lower(sliced(M, col_step, frag, _shared_layout(shared, 64, 64, "float16")))
    assert bool(_ldmatrix(lowered)) == uses
    ref, a = _random(rng, (M, 64), "float16")
    out = _empty((M, sliced_reference(a, col_step).shape[1]), "float16")
    _, b = emulate(lowered, a, out)
    np.testing.assert_array_equal(b.astype(np.float64), sliced_reference(ref, col_step))


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gemm_with_register_a_emulated(dtype, ta, rng):
    """T.copy(A_shared, A_frag) then T.gemm(A_frag, ...): ldmatrix (.trans for (K, M) A)
    fills the registers the mma reads directly; tails on M, N and K."""
    M, N, K = 100, 72, 40
    lowered = _lower(gemm_a_frag(M, N, K, dtype, ta))
    text = str(lowered)
    want = "tl::ptx_ldmatrix_x4_trans" if ta else "tl::ptx_ldmatrix_x4"
    assert re.search(re.escape(want) + r"\", T\.address_of\(A_shared", text)
    # the mma reads the fragment's registers directly: no extra copy of A
    assert re.search(
        r'mma_m16n8k16_\w+", T\.address_of\(C_local_local\[\d+\]\), T\.address_of\(A_frag_local\[',
        text,
    )
    a_ref, a = _random(rng, (K, M) if ta else (M, K), dtype)
    b_ref, b = _random(rng, (K, N), dtype)
    _, _, c = emulate(lowered, a, b, _empty((M, N), "float32"))
    want_c = (a_ref.T if ta else a_ref) @ b_ref
    np.testing.assert_allclose(c, want_c, rtol=1e-4, atol=1e-3)


def test_disabled_gives_per_thread_loads():
    frag, _ = _frag("mma_a", 64, 64)
    assert _ldmatrix(_lower(roundtrip(64, 64, frag))) != []
    off = _lower(roundtrip(64, 64, frag), pass_configs={"tl.disable_ldmatrix": True})
    assert _ldmatrix(off) == []


# ------------------------------------------------------------------------- nvcc
@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvcc_builds(arch, tmp_path):
    frag, _ = _frag("mma_a_t", 64, 64)
    for func, want in [
        (roundtrip(100, 72, frag, _shared_layout("swizzled", 64, 64, "float16")), ".trans"),
        (gemm_a_frag(128, 128, 64, "bfloat16"), ""),
    ]:
        art = pipeline.build(func, {"kind": "cuda", "arch": arch}, compiler="nvcc")
        src = art.get_kernel_source()
        assert LDSM.search(src[src.index('extern "C"') :])
        ptx = _ptx(src, arch, tmp_path)
        assert f"ldmatrix.sync.aligned.m8n8.x4{want}.shared.b16" in ptx


# ------------------------------------------------------------------------- GPU
def _gpu_kernel(func):
    import torch

    from tilelang.backends.cuda.runtime import load_kernel

    cap = torch.cuda.get_device_capability()
    arch = "sm_90a" if cap[0] == 9 else f"sm_{cap[0]}{cap[1]}"
    lowered_calls = _ldmatrix(_lower(func, arch))
    return load_kernel(pipeline.build(func, {"kind": "cuda", "arch": arch})), lowered_calls


@pytest.mark.cuda
@pytest.mark.parametrize(
    "kind,shared,dtype",
    [
        ("mma_a", "swizzled", "float16"),
        ("mma_b", "linear", "bfloat16"),
        ("lanes_transposed", "linear", "float16"),  # fallback
    ],
)
def test_roundtrip_gpu(kind, shared, dtype, randn):
    """global -> shared -> fragment -> global on the GPU equals the input (tails included)."""
    import torch

    M, N = 200, 136
    frag, want = _frag(kind, 64, 64)
    kern, calls = _gpu_kernel(
        roundtrip(M, N, frag, _shared_layout(shared, 64, 64, dtype), dtype=dtype)
    )
    assert bool(calls) == (want is not None)
    a = randn(M, N, dtype=dtype).cuda()
    b = torch.full_like(a, float("nan"))
    kern(a, b)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


@pytest.mark.cuda
def test_symbolic_slices_gpu(randn):
    import torch

    M, step = 256, 8
    frag = make_mma_a_fragment(16, 32, 16, 1, 4)
    kern, calls = _gpu_kernel(sliced(M, step, frag, _shared_layout("swizzled", 64, 64, "float16")))
    assert calls
    a = randn(M, 64, dtype="float16").cuda()
    ref = torch.from_numpy(sliced_reference(a.cpu().numpy(), step)).cuda()
    b = torch.full_like(ref, float("nan"))
    kern(a, b)
    torch.cuda.synchronize()
    assert torch.equal(b, ref)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,ta", [("float16", False), ("bfloat16", True)])
def test_gemm_with_register_a_gpu(dtype, ta, randn):
    """T.copy(A_shared, A_frag) (ldmatrix) + T.gemm from registers vs torch (float64)."""
    import torch

    M, N, K = 200, 136, 96
    kern, calls = _gpu_kernel(gemm_a_frag(M, N, K, dtype, ta))
    assert calls
    a = randn(*((K, M) if ta else (M, K)), dtype=dtype).cuda()
    b = randn(K, N, dtype=dtype).cuda()
    c = torch.empty(M, N, dtype=torch.float32, device="cuda")
    kern(a, b, c)
    torch.cuda.synchronize()
    ref = (a.T if ta else a).double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-3, atol=1e-3)
