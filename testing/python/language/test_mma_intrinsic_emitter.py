"""Upstream's ``TensorCoreIntrinEmitter`` (``tilelang.cuda.intrinsics``): hand-written
ldmatrix + mma.sync gemms on the CPU backend, the CUDA emulator (sm_80 lowering) and a GPU.

Each kernel loads one block tile of A/B into shared memory, then every warp runs
``ldmatrix_a`` / ``ldmatrix_b`` / ``mma`` per k-step and ``stmatrix`` at the end; results are
compared with a float64 (int64) reference on fresh random inputs, M and N not multiples of
the block tile (the T.Parallel copies guard the tails). K is a multiple of the chunk: the
emitter works on whole k-steps.
"""

import shutil

import ml_dtypes
import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.cuda.intrinsics import (
    TensorCoreIntrinEmitter,
    get_mma_micro_size,
    get_swizzle_layout,
    make_mma_swizzle_layout,
)
from tilelang.testing import cuda_emulator

SM80 = {"kind": "cuda", "arch": "sm_80"}


def make_gemm(M, N, K, dtype, accum, *, a_trans=False, b_trans=True, warps=(2, 2),
              warp_tiles=(32, 32), chunk=32, is_m_first=False, store="shared4", swizzle=True):  # fmt: skip
    """A gemm kernel written with the emitter (``store``: shared4 / shared2 / global)."""
    brw, bcw = warps
    wrt, wct = warp_tiles
    block_m, block_n = brw * wrt, bcw * wct
    emitter = TensorCoreIntrinEmitter(
        a_dtype=dtype, b_dtype=dtype, accum_dtype=accum, a_transposed=a_trans,
        b_transposed=b_trans, block_row_warps=brw, block_col_warps=bcw, warp_row_tiles=wrt,
        warp_col_tiles=wct, chunk=chunk, is_m_first=is_m_first,
    )  # fmt: skip
    micro_n = emitter.micro_size_y
    a_shape, a_tile = ((K, M), (chunk, block_m)) if a_trans else ((M, K), (block_m, chunk))
    b_shape, b_tile = ((N, K), (block_n, chunk)) if b_trans else ((K, N), (chunk, block_n))
    local_c = emitter.warp_rows * emitter.warp_cols * emitter.local_size_out
    c_tile = (block_m // 16, block_n // micro_n, 16, micro_n) if store == "shared4" else (block_m, block_n)  # fmt: skip

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), accum)):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=emitter.threads) as (
            bx,
            by,
        ):
            A_s = T.alloc_shared(a_tile, dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            C_s = T.alloc_shared(c_tile, accum)
            A_l = T.alloc_local((emitter.warp_rows * emitter.local_size_a,), dtype)
            B_l = T.alloc_local((emitter.warp_cols * emitter.local_size_b,), dtype)
            C_l = T.alloc_local((local_c,), accum)
            if swizzle:
                T.annotate_layout(
                    {A_s: make_mma_swizzle_layout(A_s), B_s: make_mma_swizzle_layout(B_s)}
                )
            T.clear(C_l)
            for ko in T.serial(K // chunk):
                if a_trans:
                    for k, i in T.Parallel(chunk, block_m):
                        A_s[k, i] = A[ko * chunk + k, by * block_m + i]
                else:
                    for i, k in T.Parallel(block_m, chunk):
                        A_s[i, k] = A[by * block_m + i, ko * chunk + k]
                if b_trans:
                    for j, k in T.Parallel(block_n, chunk):
                        B_s[j, k] = B[bx * block_n + j, ko * chunk + k]
                else:
                    for k, j in T.Parallel(chunk, block_n):
                        B_s[k, j] = B[ko * chunk + k, bx * block_n + j]
                for ki in T.serial(chunk // emitter.micro_size_k):
                    emitter.ldmatrix_a(A_l, A_s, ki)
                    emitter.ldmatrix_b(B_l, B_s, ki)
                    emitter.mma(A_l, B_l, C_l)
            if store == "global":
                emitter.stmatrix(C_l, C, pid_m=by, pid_n=bx)
            else:
                emitter.stmatrix(C_l, C_s)
                for i, j in T.Parallel(block_m, block_n):
                    if store == "shared4":
                        C[by * block_m + i, bx * block_n + j] = C_s[
                            i // 16, j // micro_n, i % 16, j % micro_n
                        ]
                    else:
                        C[by * block_m + i, bx * block_n + j] = C_s[i, j]

    return gemm


def _inputs(rng, M, N, K, dtype, a_trans, b_trans):
    if dtype == "int8":
        a = rng.integers(-128, 128, (K, M) if a_trans else (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (N, K) if b_trans else (K, N)).astype(np.int8)
    else:
        a = rng.standard_normal((K, M) if a_trans else (M, K)).astype(np.float32)
        b = rng.standard_normal((N, K) if b_trans else (K, N)).astype(np.float32)
    return a, b


def _reference(a, b, a_trans, b_trans):
    wide = np.int64 if a.dtype == np.int8 else np.float64
    a64 = a.astype(wide).T if a_trans else a.astype(wide)
    b64 = b.astype(wide).T if b_trans else b.astype(wide)
    return a64 @ b64


def _torch(x, dtype):
    t = torch.from_numpy(x)
    return t if dtype == "int8" else t.to(getattr(torch, dtype))


def _check(out, ref, dtype):
    if dtype == "int8":
        np.testing.assert_array_equal(np.asarray(out, np.int64), ref)
    else:
        np.testing.assert_allclose(np.asarray(out, np.float64), ref, rtol=1e-3, atol=1e-3)


# (M, N, K, dtype, options): each case a different path of the emitter
CASES = [
    pytest.param(70, 90, 64, "float16", {}, id="f16-NT"),
    pytest.param(50, 40, 64, "bfloat16", {"a_trans": True, "b_trans": False}, id="bf16-TN"),
    pytest.param(33, 70, 32, "float16", {"b_trans": False, "warp_tiles": (16, 24)}, id="f16-n8"),
    pytest.param(40, 30, 64, "float16", {"is_m_first": True, "store": "shared2"}, id="f16-mfirst"),
    pytest.param(64, 64, 64, "float16", {"store": "global", "swizzle": False}, id="f16-global"),
    pytest.param(45, 70, 64, "int8", {}, id="i8-NT"),
    pytest.param(45, 40, 64, "int8", {"a_trans": True, "b_trans": False}, id="i8-TN"),
    pytest.param(20, 30, 32, "int8", {"warps": (1, 2), "warp_tiles": (16, 8)}, id="i8-n8"),
]


def _source_dtype(dtype):
    return {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int8": np.int8}[dtype]


@pytest.mark.parametrize("M,N,K,dtype,opts", CASES)
def test_emitter_gemm_cpu(M, N, K, dtype, opts, rng):
    accum = "int32" if dtype == "int8" else "float32"
    a_trans, b_trans = opts.get("a_trans", False), opts.get("b_trans", True)
    a, b = _inputs(rng, M, N, K, dtype, a_trans, b_trans)
    kernel = tilelang.compile(make_gemm(M, N, K, dtype, accum, **opts), target="cpu")
    ta, tb = _torch(a, dtype), _torch(b, dtype)
    c = torch.zeros(M, N, dtype=torch.int32 if dtype == "int8" else torch.float32)
    kernel(ta, tb, c)
    ref = _reference(ta.double().numpy() if dtype != "int8" else a, tb.double().numpy() if dtype != "int8" else b, a_trans, b_trans)  # fmt: skip
    _check(c.numpy(), ref, dtype)


@pytest.mark.parametrize("M,N,K,dtype,opts", CASES)
def test_emitter_gemm_cuda_emulated(M, N, K, dtype, opts, rng):
    """The sm_80 lowering (ldmatrix / mma.sync helpers) run by the CUDA emulator."""
    accum = "int32" if dtype == "int8" else "float32"
    a_trans, b_trans = opts.get("a_trans", False), opts.get("b_trans", True)
    a, b = _inputs(rng, M, N, K, dtype, a_trans, b_trans)
    a, b = a.astype(_source_dtype(dtype)), b.astype(_source_dtype(dtype))
    func = make_gemm(M, N, K, dtype, accum, **opts)
    c = np.zeros((M, N), np.int32 if dtype == "int8" else np.float32)
    out = cuda_emulator.emulate(pipeline.lower(func, SM80), a, b, c)[2]
    _check(out, _reference(a, b, a_trans, b_trans), dtype)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(
    "dtype,opts",
    [
        ("float16", {"a_trans": True, "b_trans": False}),
        ("bfloat16", {"warp_tiles": (16, 24)}),
        ("int8", {}),
    ],
)
def test_emitter_builds_with_nvcc(arch, dtype, opts):
    accum = "int32" if dtype == "int8" else "float32"
    func = make_gemm(100, 70, 64, dtype, accum, **opts)
    artifact = pipeline.build(func, {"kind": "cuda", "arch": arch, "compiler": "nvcc"})
    source = artifact.kernel_source
    assert "tl::ptx_ldmatrix_x4" in source and "tl::mma_m16n8k" in source


@pytest.mark.cuda
@pytest.mark.parametrize("M,N,K,dtype,opts", CASES)
def test_emitter_gemm_gpu(M, N, K, dtype, opts, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    accum = "int32" if dtype == "int8" else "float32"
    a_trans, b_trans = opts.get("a_trans", False), opts.get("b_trans", True)
    a, b = _inputs(rng, M, N, K, dtype, a_trans, b_trans)
    kernel = tilelang.compile(make_gemm(M, N, K, dtype, accum, **opts), target="cuda")
    ta, tb = _torch(a, dtype).cuda(), _torch(b, dtype).cuda()
    c = torch.zeros(M, N, dtype=torch.int32 if dtype == "int8" else torch.float32, device="cuda")
    kernel(ta, tb, c)
    ref = _reference(ta.cpu().double().numpy() if dtype != "int8" else a, tb.cpu().double().numpy() if dtype != "int8" else b, a_trans, b_trans)  # fmt: skip
    _check(c.cpu().numpy(), ref, dtype)


# ---------------------------------------------------------------------------------------
# helpers and errors
# ---------------------------------------------------------------------------------------
def test_micro_size_and_swizzle():
    assert get_mma_micro_size("float16") == (16, 16, 16)
    assert get_mma_micro_size("int8") == (16, 16, 32)
    # a 64-element fp16 row (128 B): 16-byte chunk c of row r moves to chunk c ^ (r % 8)
    for r in range(16):
        for c in range(64):
            tile, row, col = get_swizzle_layout(r, c, 64, "float16")
            assert (tile, row) == (0, r)
            assert col == ((c // 8) ^ (r % 8)) * 8 + c % 8
    # a 32-element fp16 row (64 B): 4 chunks, permuted by (r % 8) // 2
    assert [get_swizzle_layout(r, 0, 32, "float16")[2] for r in range(8)] == [
        0,
        0,
        8,
        8,
        16,
        16,
        24,
        24,
    ]
    with pytest.raises(ValueError, match="multiple of 32 bytes"):
        get_swizzle_layout(0, 0, 8, "float16")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"a_dtype": "float16", "b_dtype": "float16", "accum_dtype": "float16"},
            "accum_dtype=float16",
        ),
        ({"a_dtype": "float16", "b_dtype": "bfloat16", "accum_dtype": "float32"}, "differ"),
        ({"a_dtype": "float32", "b_dtype": "float32", "accum_dtype": "float32"}, "not supported"),
        ({"accum_dtype": "float32", "warp_row_tiles": 24}, "warp_row_tiles=24"),
        (
            {"accum_dtype": "float32", "warp_row_tiles": 16, "warp_col_tiles": 12},
            "warp_col_tiles=12",
        ),
        ({"accum_dtype": "float32", "chunk": 8}, "chunk=8"),
        ({"accum_dtype": "float32", "chunk": 40, "warp_row_tiles": 16}, "chunk=40"),
        (
            {"accum_dtype": "float32", "num_elems_per_byte": 2, "warp_row_tiles": 16},
            "num_elems_per_byte",
        ),
    ],
)
def test_emitter_rejects_unsupported_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TensorCoreIntrinEmitter(**kwargs)


def test_emitter_rejects_fragment_operands():
    emitter = TensorCoreIntrinEmitter(accum_dtype="float32", warp_row_tiles=16, warp_col_tiles=16)

    with pytest.raises(Exception, match="A_local_buf A_f is in 'local.fragment'") as info:

        @T.prim_func
        def bad(A: T.Tensor((32, 32), "float16")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((32, 32), "float16")
                A_f = T.alloc_fragment((32, 32), "float16")
                emitter.ldmatrix_a(A_f, A_s, 0)

    assert "test_mma_intrinsic_emitter.py" in str(info.value)  # names the user's line
    with pytest.raises(NotImplementedError, match="local.fragment"):
        emitter.make_mma_load_layout(None)


def test_emitter_rejects_mismatched_accumulator_dtype():
    emitter = TensorCoreIntrinEmitter(accum_dtype="float32", warp_row_tiles=16, warp_col_tiles=16)

    with pytest.raises(Exception, match="C_local_buf C_l is float16, expected float32"):

        @T.prim_func
        def bad(A: T.Tensor((32, 32), "float16")):
            with T.Kernel(1, threads=128):
                A_l = T.alloc_local((8,), "float16")
                B_l = T.alloc_local((8,), "float16")
                C_l = T.alloc_local((8,), "float16")
                emitter.mma(A_l, B_l, C_l)


def test_cpu_rejects_partial_warps():
    """The CPU form of the warp-collective helpers needs whole warps (clear error, not a
    silent wrong answer)."""
    emitter = TensorCoreIntrinEmitter(
        accum_dtype="float32", block_row_warps=1, block_col_warps=1, warp_row_tiles=16,
        warp_col_tiles=16,
    )  # fmt: skip

    @T.prim_func
    def bad(A: T.Tensor((16, 16), "float16")):
        with T.Kernel(1, threads=48):
            A_s = T.alloc_shared((16, 16), "float16")
            A_l = T.alloc_local((8,), "float16")
            emitter.ldmatrix_a(A_l, A_s, 0)

    with pytest.raises(tilelang.errors.CompileError, match="multiple of 32"):
        tilelang.compile(bad, target="cpu")


def test_upstream_only_emitters_are_clear_errors():
    with pytest.raises(
        ModuleNotFoundError, match="tilelang.cuda.intrinsics.macro.wgmma_macro_generator"
    ):
        import tilelang.cuda.intrinsics.macro.wgmma_macro_generator  # noqa: F401


def test_cpu_rejects_thread_dependent_condition():
    """A warp-collective helper that only some threads reach: a clear error on the CPU."""
    emitter = TensorCoreIntrinEmitter(
        accum_dtype="float32", block_row_warps=1, block_col_warps=1, warp_row_tiles=16,
        warp_col_tiles=16,
    )  # fmt: skip

    @T.prim_func
    def bad(A: T.Tensor((16, 16), "float16")):
        with T.Kernel(1, threads=64):
            A_s = T.alloc_shared((16, 16), "float16")
            A_l = T.alloc_local((8,), "float16")
            tx = T.get_thread_binding()
            if tx < 32:
                emitter.ldmatrix_a(A_l, A_s, 0)

    with pytest.raises(tilelang.errors.CompileError, match="depends on the thread index"):
        tilelang.compile(bad, target="cpu")


# PTX fragment tables (PTX ISA "Matrix Fragments for mma.m16n8k*"), element i of lane 4 g + t:
# bits -> (A (m, k), B (k, n) of one n8 half, A/B elements per lane per n8 half)
_PTX = {
    32: (lambda g, t, i: (g + 8 * (i % 2), t + 4 * (i // 2)), lambda g, t, i: (t + 4 * i, g), 4, 2),
    16: (
        lambda g, t, i: (g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)),
        lambda g, t, i: (2 * t + i % 2 + 8 * (i // 2), g),
        8,
        4,
    ),
    8: (
        lambda g, t, i: (g + 8 * (i // 4 % 2), 4 * t + i % 4 + 16 * (i // 8)),
        lambda g, t, i: (4 * t + i % 4 + 16 * (i // 4), g),
        16,
        8,
    ),
}


@pytest.mark.parametrize(
    "bits,size", [(32, "16x8_to_mma_32x4"), (16, "16x16_to_mma_32x8"), (8, "16x32_to_mma_32x16")]
)
def test_operand_layouts_match_ptx(bits, size):
    """Upstream's shared -> (lane, element) maps (``mma_layout``) agree with PTX's tables,
    in (spatial, k) order (``sr``), swapped (``rs`` / ``_trans``), for A and both n8 halves of B."""
    from tilelang.cuda.intrinsics.layout import mma_layout

    a_map, b_map, a_elems, b_elems = _PTX[bits]
    sr_a, sr_b = (
        getattr(mma_layout, f"shared_{size}_layout_sr_a"),
        getattr(mma_layout, f"shared_{size}_layout_sr_b"),
    )
    rs_a, rs_b = (
        getattr(mma_layout, f"shared_{size}_layout_rs_a"),
        getattr(mma_layout, f"shared_{size}_layout_rs_b"),
    )
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(a_elems):
            m, k = a_map(g, t, i)
            assert sr_a(m, k) == (lane, i) and rs_a(k, m) == (lane, i)
        for half in range(2):
            for i in range(b_elems):
                k, n = b_map(g, t, i)
                assert sr_b(n + 8 * half, k) == (lane, half * b_elems + i)
                assert rs_b(k, n + 8 * half) == (lane, half * b_elems + i)
    # the forward maps (lane, element) -> (spatial, k) invert them
    shape = {32: "32x4_to_shared_16x8", 16: "32x8_to_shared_16x16", 8: "32x16_to_shared_16x32"}[
        bits
    ]
    load_a = getattr(mma_layout, f"mma_load_a_{shape}_layout")
    load_b = getattr(mma_layout, f"mma_load_b_{shape}_layout")
    for lane in range(32):
        for i in range(a_elems):
            assert sr_a(*load_a(lane, i)) == (lane, i)
        for i in range(2 * b_elems):
            assert sr_b(*load_b(lane, i)) == (lane, i)


def test_cpu_clear_of_per_thread_registers(rng):
    """``T.clear`` / ``T.fill`` of a ``T.alloc_local`` that thread-dependent code writes (as
    the emitter's accumulators are): every thread resets its own copy on the CPU backend."""
    threads, n = 64, 4

    @T.prim_func
    def acc(A: T.Tensor((threads * n,), "float32"), B: T.Tensor((threads * n,), "float32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            L = T.alloc_local((n,), "float32")
            for it in T.serial(3):
                if it == 2:
                    T.fill(L, 2.5)
                else:
                    T.clear(L)
                for r in T.serial(n):
                    L[r] += A[tx * n + r] * (it + 1)
            for r in T.serial(n):
                B[tx * n + r] = L[r]

    a = torch.from_numpy(rng.standard_normal(threads * n))
    b = torch.full((threads * n,), float("nan"), dtype=torch.float32)
    tilelang.compile(acc, target="cpu")(a.float(), b)
    torch.testing.assert_close(b.double(), 2.5 + a.float().double() * 3, rtol=1e-6, atol=1e-6)
