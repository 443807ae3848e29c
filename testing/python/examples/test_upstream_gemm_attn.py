"""Upstream GEMM / attention / convolution programs that needed tilelang fixes, and the fixes.

Ported examples (each: a CPU run against a float64 torch reference on shapes that are not
tile multiples, an nvcc sm_90a build, a GPU run of ``main`` marked ``cuda``):
``gemm_fp8/example_tilelang_gemm_fp8.py`` (fp8 tensors in shared memory on the CPU),
``gemm/example_gemm_persistent.py`` (``T.Persistent``, ``.compile(M=...)``),
``dequantize_gemm/example_dequant_gemm_w4a8.py`` (``expr.dtype``,
``tvm.tirx.reinterpret(dtype, value)``, a fragment read as ``F[i, j // 2]``),
``flash_decoding/example_gqa_decode_varlen_logits.py`` (a per-row fragment read in a
``(row, block)`` loop), ``convolution/example_convolution_autotune.py`` (``T.im2col``,
autotune ``.compile`` with ``T.const`` keywords). The two CUDA layout fixes are checked
through the CUDA emulator (sm_90a lowering, scalar GEMM).
"""

import math
import shutil

import numpy as np
import pytest
import torch
from example_loader import load_example as _load

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emulate_mod

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

FP8 = "gemm_fp8/example_tilelang_gemm_fp8.py"
PERSISTENT = "gemm/example_gemm_persistent.py"
W4A8 = "dequantize_gemm/example_dequant_gemm_w4a8.py"
DECODE = "flash_decoding/example_gqa_decode_varlen_logits.py"
CONV = "convolution/example_convolution_autotune.py"


def _emulate(func, *arrays):
    """Run the sm_90a lowering on the CUDA emulator (failing on shared-memory races)."""
    lowered = pipeline.lower(func, SM90A, {"tl.gemm_scalar": True})
    return emulate_mod.emulate(lowered, *[a.copy() for a in arrays], race_check=True)


def _nvcc_build(func):
    artifact = pipeline.build(func, SM90A, compiler="nvcc")
    assert artifact.meta["kernel_names"]
    return artifact


# ---------------------------------------------------------------- fp8 GEMM


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("two_acc", [False, True])
@pytest.mark.parametrize(
    "shape,block", [((77, 50, 300), (64, 64, 32)), ((130, 33, 96), (64, 32, 64))]
)
def test_fp8_gemm_cpu(dtype, two_acc, shape, block):
    """fp8 operands staged in fp8 shared tiles: float32 results equal the float64 product
    of the fp8 values up to float32 accumulation rounding."""
    c, ref = _load(FP8).run(*shape, dtype=dtype, two_acc=two_acc, block=block, device="cpu")
    assert c.dtype == torch.float32 and c.shape == ref.shape
    np.testing.assert_allclose(
        c.double().numpy(), ref.numpy(), rtol=0, atol=2e-6 * ref.abs().max().item()
    )


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_fragment_and_shared_codes_cpu(dtype):
    """Casts into fp8 shared and fragment tensors round like torch; copies between fp8
    tensors and the padding constant keep the codes."""
    n, block = 300, 128
    fp8 = getattr(torch, dtype)

    @tilelang.jit(out_idx=[1, 2])
    def roundtrip(n, block):
        @T.prim_func
        def main(
            X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), dtype), Z: T.Tensor((n,), "float32")
        ):
            with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
                s = T.alloc_shared((block,), dtype)
                f = T.alloc_fragment((block,), dtype)
                for i in T.Parallel(block):
                    s[i] = T.cast(T.if_then_else(bx * block + i < n, X[bx * block + i], 0.0), dtype)
                T.copy(s, f)
                T.copy(f, Y[bx * block])
                for i in T.Parallel(block):
                    if bx * block + i < n:
                        Z[bx * block + i] = T.cast(f[i], "float32") * 2.0

        return main

    x = torch.randn(n, dtype=torch.float64) * 40
    x[:5] = torch.tensor([0.0, -0.0, 1e-3, 1e4, -1e4])
    y, z = roundtrip(n, block)(x.float())
    expected = x.float().to(fp8)
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8))
    np.testing.assert_array_equal(z.double().numpy(), 2 * expected.double().numpy())


@needs_nvcc
def test_fp8_gemm_nvcc_sm90a():
    module = _load(FP8)
    for two_acc in (False, True):
        a = torch.zeros(256, 512, dtype=torch.float8_e4m3fn)
        func = module.matmul.get_tir(
            a,
            torch.zeros(256, 512, dtype=torch.float8_e4m3fn),
            128,
            128,
            64,
            "float8_e4m3fn",
            "float32",
            two_acc,
        )
        _nvcc_build(func)


@pytest.mark.cuda
@needs_gpu
def test_fp8_gemm_gpu():
    _load(FP8).main(1024, 1024, 8192)


# ---------------------------------------------------------------- persistent GEMM


@pytest.mark.parametrize(
    "m,n,k,block,sm,group",
    [
        (150, 300, 40, (32, 64, 32), 4, 3),
        (200, 136, 72, (64, 64, 32), 5, 8),
        (97, 61, 50, (32, 32, 32), 1, 2),
    ],
)
@pytest.mark.parametrize("persistent", [True, False])
def test_persistent_gemm_cpu(m, n, k, block, sm, group, persistent):
    """Every output tile is visited once by T.Persistent (groups of ``group`` along N,
    several waves, tiles past the grid skipped) and by the hand-written schedule."""
    module = _load(PERSISTENT)
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(k, n, dtype=torch.float16)
    c = module.matmul_persistent(a, b, *block, 128, 2, persistent, sm, group)
    ref = a.double() @ b.double()
    np.testing.assert_allclose(c.double().numpy(), ref.numpy(), rtol=2e-3, atol=2e-2)


def test_persistent_dynamic_rows_cpu():
    """A symbolic tile count: the number of waves is a run-time value (no early break)."""

    @tilelang.jit(out_idx=[-1])
    def gemm(n, k, bm, bn, bk, sm):
        m = T.dynamic("m")

        @T.prim_func
        def main(
            A: T.Tensor((m, k), "float32"),
            B: T.Tensor((k, n), "float32"),
            C: T.Tensor((m, n), "float32"),
        ):
            with T.Kernel(sm, threads=128) as bid:
                As = T.alloc_shared((bm, bk), "float32")
                Bs = T.alloc_shared((bk, bn), "float32")
                Cl = T.alloc_fragment((bm, bn), "float32")
                for bx, by in T.Persistent([T.ceildiv(m, bm), T.ceildiv(n, bn)], sm, bid):
                    T.clear(Cl)
                    for kk in T.Pipelined(T.ceildiv(k, bk), num_stages=2):
                        T.copy(A[bx * bm, kk * bk], As)
                        T.copy(B[kk * bk, by * bn], Bs)
                        T.gemm(As, Bs, Cl)
                    T.copy(Cl, C[bx * bm, by * bn])

        return main

    kernel = gemm(136, 72, 32, 32, 32, 3)
    for m in (200, 33):
        a, b = torch.randn(m, 72, dtype=torch.float64), torch.randn(72, 136, dtype=torch.float64)
        c = kernel(a.float(), b.float())
        np.testing.assert_allclose(c.double().numpy(), (a @ b).numpy(), rtol=1e-5, atol=1e-4)


def test_persistent_compile_with_const_keywords_cpu():
    """``.compile(M=..., N=..., K=...)`` binds the T.const shapes (upstream's main)."""
    _load(PERSISTENT).main(200, 136, 72, block=(64, 64, 32), threads=128, num_stages=2, sm_num=5)


def test_persistent_empty_domain_is_an_error():
    with pytest.raises(errors.TraceError, match="T.Persistent needs a non-empty domain"):

        @T.prim_func
        def bad(A: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bid:
                for _ in T.Persistent([], 1, bid):
                    A[0] = 1.0


@needs_nvcc
def test_persistent_gemm_nvcc_sm90a():
    module = _load(PERSISTENT)
    for persistent in (True, False):
        a, b = (
            torch.zeros(1024, 512, dtype=torch.float16),
            torch.zeros(512, 2048, dtype=torch.float16),
        )
        _nvcc_build(module.matmul_persistent.get_tir(a, b, 128, 256, 64, 256, 3, persistent, 132))


@pytest.mark.cuda
@needs_gpu
def test_persistent_gemm_gpu():
    _load(PERSISTENT).main(4096, 4096, 4096)


# ---------------------------------------------------------------- W4A8 dequantize GEMM


@pytest.mark.parametrize("m,n,k", [(50, 70, 200), (128, 256, 256), (33, 40, 130)])
def test_w4a8_cpu(m, n, k):
    ct, ref = _load(W4A8).run(m, n, k, device="cpu")
    assert ct.dtype == torch.int32
    np.testing.assert_array_equal(ct.double().numpy(), ref.numpy())


def test_w4a8_cuda_emulated(rng):
    """The unpack loop reads ``B_local[i, j // 2]``: layout inference places both
    iterations of a byte on the thread holding it (the emulator checks every read)."""
    module = _load(W4A8)
    m, n, k = 40, 48, 256
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    qb = rng.integers(0, 256, (n, k // 2)).astype(np.uint8)
    out = _emulate(module.matmul_int8xint4.get_tir(m, n, k), a, qb, np.zeros((n, m), np.int32))
    ref = module.ref_program(torch.from_numpy(a), torch.from_numpy(qb)).numpy()
    np.testing.assert_array_equal(out[2].astype(np.float64), ref)


def test_expr_dtype_and_tvm_reinterpret_cpu():
    """``expr.dtype`` names a scalar expression's type; ``tvm.tirx.reinterpret`` takes
    TVM's (dtype, value) order (and TIRx's) and reads the same bits."""
    from tilelang.tvm import tirx

    seen = {}

    @tilelang.jit(out_idx=[1, 2])
    def bits(n):
        @T.prim_func
        def main(
            X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "int32"), Z: T.Tensor((n,), "float32")
        ):
            with T.Kernel(1, threads=32) as _:
                for i in T.Parallel(n):
                    seen["load"] = X[i].dtype
                    seen["sum"] = (X[i] + X[i]).dtype
                    Y[i] = tirx.reinterpret(T.int32, X[i])
                    Z[i] = tirx.reinterpret(tirx.reinterpret(X[i], T.int32), T.float32)

        return main

    x = torch.randn(37) * 1e3
    y, z = bits(37)(x)
    assert seen == {"load": "float32", "sum": "float32"} and seen["load"] == T.float32
    np.testing.assert_array_equal(y.numpy(), x.numpy().view(np.int32))
    np.testing.assert_array_equal(z.numpy(), x.numpy())


def test_uint_names_uint32():
    """TVM's "uint" is uint32, as "int" is int32 (upstream's lop3 helpers pass "uint")."""
    assert T.dtype("uint") == "uint32" == T.uint and T.dtype("int") == "int32" == T.int


def test_tvm_reinterpret_of_python_number_is_an_error():
    from tilelang.tvm import tirx

    with pytest.raises(TypeError, match="must be an expression"):
        tirx.reinterpret("int32", 1.5)


@needs_nvcc
def test_w4a8_nvcc_sm90a():
    _nvcc_build(_load(W4A8).matmul_int8xint4.get_tir(512, 512, 512))


@pytest.mark.cuda
@needs_gpu
def test_w4a8_gpu():
    _load(W4A8).main(512, 512, 512)


# ---------------------------------------------------------------- GQA decode with logits


def _check_decode(o, s, o_ref, s_ref):
    np.testing.assert_allclose(o.double().numpy(), o_ref.numpy(), atol=2e-3, rtol=1e-2)
    for b, blocks in enumerate(s_ref):
        np.testing.assert_allclose(
            s[b, :, : blocks.shape[1]].double().numpy(), blocks.numpy(), atol=1e-3, rtol=1e-2
        )


@pytest.mark.parametrize("sink", [False, True])
@pytest.mark.parametrize("lens,block_n", [([300, 64, 130], 64), ([77, 200], 128)])
def test_gqa_decode_varlen_logits_cpu(sink, lens, block_n):
    o, s, o_ref, s_ref = _load(DECODE).run(
        len(lens), 8, 2, lens, 64, block_N=block_n, test_sink=sink, device="cpu"
    )
    _check_decode(o, s, o_ref, s_ref)


def test_gqa_decode_varlen_logits_cuda_emulated():
    """The (row, block) rescaling loop reads per-row fragments of the reductions: it runs
    on the rows' threads (a free layout would read other threads' registers)."""
    module = _load(DECODE)
    batch, heads, kv_heads, lens, dim, block_n = 2, 8, 2, [100, 40], 64, 64
    cu = np.zeros(batch + 1, np.int32)
    cu[1:] = np.cumsum(lens)
    total = int(cu[-1])
    q = torch.randn(batch, heads, dim, dtype=torch.float16)
    k = torch.randn(total, kv_heads, dim, dtype=torch.float16)
    v = torch.randn(total, kv_heads, dim, dtype=torch.float16)
    sink = torch.randn(heads)
    func = module.flashattn.get_tir(
        batch, heads, kv_heads, max(lens), total, dim, True, block_N=block_n
    )
    out_o = np.zeros((batch, heads, dim), np.float16)
    out_s = np.zeros((batch, heads, math.ceil(max(lens) / block_n)), np.float16)
    out = _emulate(func, q.numpy(), k.numpy(), v.numpy(), cu, sink.numpy(), out_o, out_s)
    o_ref, s_ref = module.ref_attention(q, k, v, torch.tensor(lens), block_n, sink)
    _check_decode(torch.from_numpy(out[5]), torch.from_numpy(out[6]), o_ref, s_ref)


@needs_nvcc
def test_gqa_decode_varlen_logits_nvcc_sm90a():
    _nvcc_build(_load(DECODE).flashattn.get_tir(1, 32, 8, 8192, 8192, 128, True))


@pytest.mark.cuda
@needs_gpu
def test_gqa_decode_varlen_logits_gpu():
    _load(DECODE).main(2, 32, 8, 8192, 128)


# ---------------------------------------------------------------- im2col convolution

CONV_CONFIG = {
    "block_M": 64,
    "block_N": 32,
    "block_K": 32,
    "num_stages": 2,
    "thread_num": 128,
    "enable_rasteration": False,
}


@pytest.mark.parametrize(
    "n,c,h,w,f,k,s,d,p",
    [
        (2, 12, 9, 7, 20, 3, 2, 1, 1),
        (1, 8, 11, 13, 24, 3, 1, 2, 2),
        (3, 16, 6, 6, 8, 1, 1, 1, 0),
        (2, 32, 10, 10, 32, 3, 1, 1, 1),
    ],
)
def test_convolution_im2col_cpu(n, c, h, w, f, k, s, d, p):
    out, ref = _load(CONV).run(n, c, h, w, f, k, s, d, p, config=CONV_CONFIG, device="cpu")
    assert out.shape == ref.shape
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize(
    "n,c,h,w,k,s,d,p,step", [(2, 5, 7, 6, 3, 2, 1, 1, (1, 0)), (1, 3, 5, 9, 2, 1, 2, 3, (0, 1))]
)
def test_im2col_tile_cpu(n, c, h, w, k, s, d, p, step):
    """One im2col tile against numpy: taps row-major over (kh, kw, c), zero in the padding
    and past the last pixel or tap."""
    block_m, block_k = 16, 8
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (w + 2 * p - d * (k - 1) - 1) // s + 1

    @tilelang.jit(out_idx=[1])
    def tile(m_step, k_step):
        @T.prim_func
        def main(X: T.Tensor((n, h, w, c), "float32"), Y: T.Tensor((block_m, block_k), "float32")):
            with T.Kernel(1, threads=32) as _:
                col = T.alloc_shared((block_m, block_k), "float32")
                T.im2col(X, col, m_step, k_step, k, s, d, p)
                T.copy(col, Y)

        return main

    x = torch.randn(n, h, w, c, dtype=torch.float64)
    got = tile(*step)(x.float()).double().numpy()
    padded = np.pad(x.numpy(), ((0, 0), (p, p), (p, p), (0, 0)))
    want = np.zeros((block_m, block_k))
    for m in range(block_m):
        pixel = step[0] * block_m + m
        for kk in range(block_k):
            tap = step[1] * block_k + kk
            if pixel >= n * oh * ow or tap >= k * k * c:
                continue
            b, y, xw = pixel // (oh * ow), pixel // ow % oh, pixel % ow
            kh, kw, ch = tap // (k * c), tap // c % k, tap % c
            want[m, kk] = padded[b, y * s + kh * d, xw * s + kw * d, ch]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize(
    "n,c,h,w,f,k,s,d,p", [(1, 12, 7, 6, 20, 3, 2, 1, 1), (2, 8, 5, 5, 16, 3, 1, 2, 2)]
)
def test_convolution_im2col_cuda_emulated(n, c, h, w, f, k, s, d, p):
    """The im2col gather inside the pipelined k-loop, lowered for sm_90a."""
    module = _load(CONV)
    a = torch.randn(n, h, w, c, dtype=torch.float16)
    b = torch.randn(k, k, c, f, dtype=torch.float16)
    func = module.convolution.jit_impl.get_tir(a, b, s, d, p, **CONV_CONFIG)
    ref = module.ref_program(s, p, d)(a.double(), b.double()).numpy()
    out = _emulate(func, a.numpy(), b.numpy(), np.zeros(ref.shape, np.float16))
    np.testing.assert_allclose(out[2].astype(np.float64), ref, rtol=2e-3, atol=2e-2)


def test_im2col_bad_arguments():
    with pytest.raises(errors.TraceError, match="T.im2col: img must be a 4-D NHWC tensor"):

        @T.prim_func
        def bad(X: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=32) as _:
                col = T.alloc_shared((16, 8), "float32")
                T.im2col(X, col, 0, 0, 3, 1, 1, 1)


@needs_nvcc
def test_convolution_nvcc_sm90a():
    module = _load(CONV)
    config = module.get_heuristic_config()
    a = torch.zeros(128, 64, 64, 128, dtype=torch.float16)
    b = torch.zeros(3, 3, 128, 128, dtype=torch.float16)
    _nvcc_build(module.convolution.jit_impl.get_tir(a, b, 1, 1, 1, **config))


@pytest.mark.cuda
@needs_gpu
def test_convolution_gpu():
    _load(CONV).main()


# ---------------------------------------------------------------- tilelang.tools.Analyzer


class _Device:
    bandwidth = [750, 2_000_000]  # MB/s
    compute_capability = "80"


@pytest.mark.parametrize("m,n,k,bm,bn,bk", [(256, 128, 96, 64, 64, 32), (200, 72, 50, 64, 32, 16)])
def test_analyzer_gemm_counts(m, n, k, bm, bn, bk):
    """FLOPs are 2*bm*bn*bk per k-step and block; global bytes are the A and B tiles per
    k-step and the C tile once, per block (padded tiles, as upstream counts)."""
    from tilelang.tools import Analyzer

    @T.prim_func
    def gemm(
        A: T.Tensor((m, k), "float16"),
        B: T.Tensor((k, n), "float16"),
        C: T.Tensor((m, n), "float32"),
    ):
        with T.Kernel(T.ceildiv(n, bn), T.ceildiv(m, bm), threads=128) as (bx, by):
            As = T.alloc_shared((bm, bk), "float16")
            Bs = T.alloc_shared((bk, bn), "float16")
            Cl = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cl)
            for kk in T.Pipelined(T.ceildiv(k, bk), num_stages=2):
                T.copy(A[by * bm, kk * bk], As)
                T.copy(B[kk * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cl)
            T.copy(Cl, C[by * bm, bx * bn])

    blocks, steps = math.ceil(n / bn) * math.ceil(m / bm), math.ceil(k / bk)
    result = Analyzer.analysis(gemm, _Device())
    assert result.total_flops == 2 * bm * bn * bk * steps * blocks
    assert result.total_global_bytes == blocks * (steps * (bm * bk + bk * bn) * 2 + bm * bn * 4)
    peak = round(108 * 128 * 1.41 * 2 / 1e3, 1)
    assert result.expected_tflops == peak and result.expected_bandwidth_GBps == 2000
    expected = max(result.total_global_bytes / 2e12, result.total_flops / (peak * 1e12))
    assert result.estimated_time == pytest.approx(expected)


def test_analyzer_symbolic_shape_is_an_error():
    from tilelang.tools import Analyzer

    n = T.dynamic("n")

    @T.prim_func
    def copy(A: T.Tensor((n, 64), "float32"), B: T.Tensor((n, 64), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=128) as bx:
            s = T.alloc_shared((32, 64), "float32")
            T.copy(A[bx * 32, 0], s)
            T.copy(s, B[bx * 32, 0])

    with pytest.raises(errors.CompileError, match="Analyzer: the blockIdx.x extent"):
        Analyzer.analysis(copy, _Device())


# ---------------------------------------------------------------- autotuner: early_stop, pass_configs


def _autotune_kernels():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autotuner"))
    try:
        import tl_autotune_kernels
    finally:
        sys.path.pop(0)
    return tl_autotune_kernels


@pytest.fixture
def tune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TILELANG_AUTO_TUNING_PROGRESS", "0")
    tilelang.cache.clear_cache()
    yield
    tilelang.cache.clear_cache()


@pytest.mark.parametrize("early_stop", [False, True])
def test_autotune_early_stop(tune_cache, monkeypatch, early_stop):
    """With early_stop, a config whose 3-call probe exceeds best * factor is not timed in
    full; the best config is the same either way."""
    from tilelang.profiler import Profiler

    calls = []

    def fake_bench(self, func=None, *args, n_repeat=0, **kwargs):
        work = self.kernel.config_work
        calls.append((work, n_repeat))
        return {1: 1.0, 7: 1.5, 96: 10.0}[work]

    monkeypatch.setattr(Profiler, "do_bench", fake_bench)
    kernels = _autotune_kernels()
    original = tilelang.autotuner.param.CompileArgs.compile_program

    def tagged(self, func, pass_configs=None):
        kernel = original(self, func, pass_configs)
        kernel.config_work = _WORK[func.__chandle__()]
        return kernel

    _WORK = {}
    real_fn = kernels.repeated_sum

    def traced(n=16384, work=1, **kw):
        func = real_fn(n, work, **kw)
        _WORK[func.__chandle__()] = work
        return func

    monkeypatch.setattr(tilelang.autotuner.param.CompileArgs, "compile_program", tagged)
    tuned = tilelang.autotune(
        configs=[{"work": 1}, {"work": 96}, {"work": 7}],
        warmup=2,
        rep=7,
        skip_check=True,
        early_stop=early_stop,
        early_stop_factor=1.2,
    )(tilelang.jit(out_idx=[-1], target="cpu")(traced))
    result = tuned.tune(1000)
    assert result.config == {"work": 1}
    full = sorted(w for w, n in calls if n != 3)
    assert full == ([1] if early_stop else [1, 7, 96])
    assert sorted(w for w, n in calls if n == 3) == ([7, 96] if early_stop else [])


def test_autotune_early_stop_factor_below_one_is_an_error(tune_cache):
    kernels = _autotune_kernels()
    tuner = tilelang.autotuner.AutoTuner.from_kernel(kernels.repeated_sum, [{"work": 1}])
    with pytest.raises(ValueError, match="early_stop_factor must be >= 1.0"):
        tuner.run(early_stop=True, early_stop_factor=0.5)


def test_autotune_per_config_pass_configs(tune_cache):
    """A config's ``pass_configs`` compile that candidate (over the jit's); the rest of the
    config goes to the function; ``enable_grouped_compile`` is accepted."""
    kernels = _autotune_kernels()
    configs = [
        {"work": 1, "pass_configs": {tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}},
        {"work": 96, "pass_configs": {tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: False}},
    ]
    tuner = (
        tilelang.autotuner.AutoTuner.from_kernel(kernels.repeated_sum, configs)
        .set_compile_args(out_idx=[-1], target="cpu")
        .set_profile_args(warmup=1, rep=3, skip_check=True)
    )
    tuner.set_kernel_parameters((3000,))
    result = tuner.run(enable_grouped_compile=True, group_compile_size=2)
    assert result.config == configs[0]
    assert result.kernel.pass_configs == configs[0]["pass_configs"]
    x = torch.randn(3000)
    torch.testing.assert_close(result.kernel(x), x)


# ---------------------------------------------------------------- gemm_sp: a clear refusal


def test_gemm_sp_imports_fail_clearly():
    """Upstream's 2:4 sparse example helpers import ``_TORCH_DTYPE_TO_STR`` (provided) and
    the sparse metadata layouts (a ModuleNotFoundError saying sparse GEMM is not lowered)."""
    from tilelang.language.dtypes import _TORCH_DTYPE_TO_STR

    assert _TORCH_DTYPE_TO_STR[torch.float16] == "float16"
    assert _TORCH_DTYPE_TO_STR[torch.float8_e4m3fn] == "float8_e4m3fn"
    assert all(
        T.dtype(name).as_torch() is t
        for t, name in _TORCH_DTYPE_TO_STR.items()
        if name != "float4_e2m1fn"
    )
    with pytest.raises(ModuleNotFoundError, match="does not lower sparse tensor-core GEMMs"):
        from tilelang.cuda.intrinsics.sparse_layout import get_e_factor  # noqa: F401
    with pytest.raises(AttributeError, match="T.gemm_sp is not supported"):
        T.gemm_sp  # noqa: B018
