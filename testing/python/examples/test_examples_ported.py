"""Ports of upstream TileLang's user examples (cast, grouped GEMM, ...): each runs on the CPU
against a float64 torch reference with shapes that are not tile multiples, through the CUDA
emulator (sm_90a lowering, scalar GEMM), builds with nvcc for sm_90a, and runs its ``main``
on a GPU when one is present."""

import shutil

import ml_dtypes
import numpy as np
import pytest
import torch
from example_loader import load_example as _load

from tilelang.backends.cuda import pipeline
from tilelang.testing import cuda_emulator as emulate_mod

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _emulate(func, *arrays):
    """Run on the CUDA emulator, failing on shared-memory races (a missing barrier)."""
    lowered = pipeline.lower(func, SM90A, {"tl.gemm_scalar": True})
    return emulate_mod.emulate(lowered, *[a.copy() for a in arrays], race_check=True)


def _nvcc_build(func):
    artifact = pipeline.build(func, {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"})
    assert artifact.meta["kernel_names"]


# ---------------------------------------------------------------- per-token fp8 cast

CAST = "cast/example_per_token_cast_to_fp8.py"
FP8_MAX = 448.0


def _check_cast(x, x_fp8, scale, group_size):
    """float64 checks: the scales are amax/448 per group; every fp8 code is the float64
    quotient x/scale rounded to a neighbouring e4m3 value (within one fp8 step)."""
    x = np.asarray(x, np.float64)
    m, n = x.shape
    groups = -(-n // group_size)
    padded = np.zeros((m, groups * group_size))
    padded[:, :n] = x
    amax = np.maximum(np.abs(padded.reshape(m, groups, group_size)).max(2), 1e-4)
    np.testing.assert_allclose(np.asarray(scale, np.float64), amax / FP8_MAX, rtol=1e-6)
    full = np.repeat(np.asarray(scale, np.float64), group_size, axis=1)[:, :n]
    quotient = np.clip(x / full, -FP8_MAX, FP8_MAX)
    codes = np.asarray(x_fp8).astype(np.float64)
    # e4m3: 3 mantissa bits (relative step 1/8), subnormal step 2**-9; the kernel divides
    # in float32, so a quotient a float32 ulp from a rounding tie may go either way
    step = np.maximum(2.0 ** (np.floor(np.log2(np.maximum(np.abs(quotient), 2**-6))) - 3), 2**-9)
    assert np.all(np.abs(codes - quotient) <= step / 2 + 1e-6 * np.abs(quotient))
    assert np.abs(codes).max() <= FP8_MAX


def _cast_cpu(m, n, blk_m, group_size, dtype, x):
    x_fp8, scale = _load(CAST).per_token_cast_to_fp8(m, n, blk_m, group_size, dtype)(x)
    assert x_fp8.dtype == torch.float8_e4m3fn and scale.shape == (m, -(-n // group_size))
    _check_cast(x.double().numpy(), x_fp8.float().numpy(), scale.numpy(), group_size)


@pytest.mark.parametrize(
    "m,n,blk_m,group_size,dtype",
    [(37, 300, 8, 128, "bfloat16"), (5, 77, 4, 32, "float16"), (16, 128, 8, 128, "float32")],
)
def test_cast_cpu(m, n, blk_m, group_size, dtype):
    """Normal-range fp8 codes: |x| >= 0.01 keeps every quotient x/scale above e4m3's
    smallest normal (2**-6) -- see test_cast_cpu_subnormal_codes for the rest."""
    x = torch.randn(m, n, dtype=torch.float64) * 3
    x = (x.sign() * x.abs().clamp(min=0.01)).to(getattr(torch, dtype))
    x[0, :] = 0  # an all-zero row: amax clamps to 1e-4 instead of dividing by zero
    _cast_cpu(m, n, blk_m, group_size, dtype, x)


@pytest.mark.parametrize("m,n,blk_m", [(37, 300, 8), (3, 130, 4)])
def test_cast_eager_style_cpu(m, n, blk_m):
    """Upstream's current eager form (T.const shapes, T.empty outputs) gives the same bytes
    as the out_idx form and passes the float64 checks."""
    module = _load(CAST)
    x = torch.randn(m, n, dtype=torch.float64) * 2
    x = (x.sign() * x.abs().clamp(min=0.01)).float()
    x_fp8, scale = module.per_token_cast_to_fp8_eager(x, blk_m)
    assert x_fp8.dtype == torch.float8_e4m3fn and scale.shape == (m, -(-n // 128))
    _check_cast(x.double().numpy(), x_fp8.float().numpy(), scale.numpy(), 128)
    other_fp8, other_scale = module.per_token_cast_to_fp8(m, n, blk_m, 128, "float32")(x)
    assert torch.equal(x_fp8.view(torch.uint8), other_fp8.view(torch.uint8))
    assert torch.equal(scale, other_scale)


def test_cast_cpu_subnormal_codes():
    x = torch.full((2, 64), 1.0, dtype=torch.float32)
    x[:, 1:9] = torch.tensor([0.01488, 0.0146, 0.00293, 0.001, 3e-5, 1e-4, 2e-5, 4e-5]) / 448
    _cast_cpu(2, 64, 2, 64, "float32", x)


def test_cast_cuda_emulated():
    module = _load(CAST)
    m, n, group_size = 21, 150, 64
    func = module.per_token_cast_to_fp8.get_tir(m, n, 8, group_size, "float16")
    x = (np.random.default_rng(3).standard_normal((m, n)) * 5).astype(np.float16)
    out = _emulate(
        func,
        x,
        np.full((m, n), np.nan, ml_dtypes.float8_e4m3fn),
        np.full((m, -(-n // group_size)), np.nan, np.float32),
    )
    _check_cast(x.astype(np.float64), out[1].astype(np.float64), out[2], group_size)


@needs_nvcc
def test_cast_nvcc_sm90a():
    _nvcc_build(_load(CAST).per_token_cast_to_fp8.get_tir(4096, 7168, 8, 128, "bfloat16"))


@pytest.mark.cuda
@needs_gpu
def test_cast_gpu():
    module = _load(CAST)
    module.main(M=4096, N=7000, device="cuda")
    x = torch.randn(1000, 1000, device="cuda")
    x_fp8, scale = module.per_token_cast_to_fp8_eager(x, 8)
    _check_cast(x.double().cpu().numpy(), x_fp8.float().cpu().numpy(), scale.cpu().numpy(), 128)


# ---------------------------------------------------------------- grouped GEMM

GROUPED = "grouped_gemm/example_grouped_gemm_fwd.py"


def _grouped_case(sizes, K, N, trans_b, block_M, seed):
    module = _load(GROUPED)
    torch.manual_seed(seed)
    inputs = module.construct_inputs(list(sizes), K, N, trans_b, block_M)
    ref = module.torch_gmm(inputs[0].double(), inputs[1].double(), list(sizes), trans_b)
    return module, inputs, ref


@pytest.mark.parametrize(
    "sizes,K,N,trans_b",
    [((37, 1, 70), 40, 50, False), ((5, 0, 33, 17), 72, 24, True), ((16,), 16, 16, False)],
)
def test_grouped_gemm_cpu(sizes, K, N, trans_b):
    """Groups smaller than, equal to and larger than a row tile; an empty group; K and N
    not multiples of the tiles; both B layouts."""
    module, inputs, ref = _grouped_case(sizes, K, N, trans_b, 16, seed=sum(sizes) + K)
    kernel = module.grouped_gemm(tuple(sizes), K, N, 16, 16, 16, trans_b)
    c = kernel(*inputs)
    assert c.shape == (sum(sizes), N)
    np.testing.assert_allclose(c.double().numpy(), ref.numpy(), rtol=2e-3, atol=2e-2)


def test_grouped_gemm_main_cpu():
    _load(GROUPED).main((20, 70, 3), K=48, N=40, block_M=32, block_N=32, block_K=16, device="cpu")


@pytest.mark.parametrize("trans_b", [False, True])
def test_grouped_gemm_cuda_emulated(trans_b):
    sizes, K, N = (19, 0, 40), 40, 24
    module, inputs, ref = _grouped_case(sizes, K, N, trans_b, 16, seed=7)
    func = module.grouped_gemm.get_tir(sizes, K, N, 16, 16, 16, trans_b, threads=32)
    a, b, *meta = (t.numpy() for t in inputs)
    c = np.full((sum(sizes), N), np.nan, np.float16)
    out = _emulate(func, a, b, c, *meta)[2]
    np.testing.assert_allclose(out.astype(np.float64), ref.numpy(), rtol=2e-3, atol=2e-2)


@needs_nvcc
def test_grouped_gemm_nvcc_sm90a():
    func = _load(GROUPED).grouped_gemm.get_tir((128, 300, 77), 1024, 4096, 64, 128, 32)
    _nvcc_build(func)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("trans_b", [False, True])
def test_grouped_gemm_gpu(trans_b):
    _load(GROUPED).main((64, 300, 1, 1000), K=1024, N=1000, trans_b=trans_b, device="cuda")


# ---------------------------------------------------------------- attention sink

SINK = "attention_sink/example_mha_sink_fwd_bhsd.py"


def _sink_inputs(b, h, sq, skv, d, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).half()
    k, v = (torch.randn(b, h, skv, d, generator=g).half() for _ in range(2))
    sinks = (torch.randn(h, generator=g) + 3).half()  # large enough to change every row
    return q, k, v, sinks


@pytest.mark.parametrize(
    "b,h,sq,skv,d,window,block",
    [
        (2, 3, 37, 37, 32, None, 16),  # queries == keys, tails in both
        (1, 2, 21, 90, 16, None, 16),  # a KV prefix longer than the queries
        (1, 2, 50, 75, 32, 32, 16),  # sliding window: early key blocks skipped
        (1, 1, 1, 40, 16, 16, 16),  # one decode query
    ],
)
def test_attention_sink_cpu(b, h, sq, skv, d, window, block):
    module = _load(SINK)
    q, k, v, sinks = _sink_inputs(b, h, sq, skv, d, seed=sq + skv)
    kernel = module.flashattn(b, h, sq, skv, d, window, block_M=block, block_N=block)
    out = kernel(q, k, v, sinks)
    ref = module.ref_program(q, k, v, sinks, window)
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=1e-2, atol=5e-3)
    # the sink matters: without it the rows would be normalised differently
    no_sink = module.ref_program(q, k, v, torch.full_like(sinks, -float("inf")), window)
    assert (no_sink - ref).abs().max() > 5e-2


def test_attention_sink_bad_args():
    flashattn = _load(SINK).flashattn
    with pytest.raises(ValueError, match="seq_kv"):
        flashattn.get_tir(1, 1, 64, 32, 16)
    with pytest.raises(ValueError, match="window_size"):
        flashattn.get_tir(1, 1, 64, 64, 16, 40, block_N=32)


def test_attention_sink_main_cpu():
    _load(SINK).main(1, 2, 40, 70, 32, 32, block_M=32, block_N=32, device="cpu")


@pytest.mark.parametrize("window", [None, 16])
def test_attention_sink_cuda_emulated(window):
    module = _load(SINK)
    b, h, sq, skv, d = 1, 2, 19, 45, 16
    q, k, v, sinks = _sink_inputs(b, h, sq, skv, d, seed=5)
    func = module.flashattn.get_tir(b, h, sq, skv, d, window, block_M=16, block_N=16, threads=32)
    arrays = [t.numpy() for t in (q, k, v)]
    out = np.full((b, h, sq, d), np.nan, np.float16)
    res = _emulate(func, *arrays, out, sinks.numpy())[3]
    ref = module.ref_program(q, k, v, sinks, window)
    np.testing.assert_allclose(res.astype(np.float64), ref.numpy(), rtol=1e-2, atol=5e-3)


@needs_nvcc
def test_attention_sink_nvcc_sm90a():
    func = _load(SINK).flashattn.get_tir(1, 8, 1024, 1024, 128, None, block_M=128, block_N=128,
                                         num_stages=2, threads=256)  # fmt: skip
    _nvcc_build(func)


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("window", [None, 128])
def test_attention_sink_gpu(window):
    _load(SINK).main(2, 8, 1000, 1500, 128, window, block_M=64, block_N=64, device="cuda")


# ---------------------------------------------------------------- block-sparse attention

BSA = "blocksparse_attention/example_tilelang_block_sparse_attn.py"


def _bsa_case(b, h, s, d, block, is_causal, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=g).half() for _ in range(3))
    n = -(-s // block)
    mask = torch.rand(b, h, n, n, generator=g) < 0.5
    mask[0, 0, -1, :] = False  # a query block with no key block at all: output 0
    mask[0, -1, 0, 0] = True
    if is_causal:
        mask = mask.tril()
    return q, k, v, mask


@pytest.mark.parametrize(
    "b,h,s,d,block,is_causal",
    [(1, 2, 70, 32, 16, True), (2, 2, 45, 16, 16, False), (1, 1, 33, 16, 16, True)],
)
def test_blocksparse_attention_cpu(b, h, s, d, block, is_causal):
    module = _load(BSA)
    q, k, v, mask = _bsa_case(b, h, s, d, block, is_causal, seed=s + d)
    out = module.blocksparse_flashattn(b, h, s, d, is_causal, block)(q, k, v, mask)
    ref = module.ref_program(q, k, v, mask, block, is_causal)
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=1e-2, atol=5e-3)
    dense = module.ref_program(q, k, v, torch.ones_like(mask), block, is_causal)
    assert (dense - ref).abs().max() > 0.1  # the mask really removed scores


def test_blocksparse_attention_main_cpu():
    module = _load(BSA)
    module.main(1, 2, 100, 32, topk=2, is_causal=True, block=32, device="cpu")
    module.main(1, 1, 100, 32, topk=1, is_causal=False, block=32, device="cpu")


@pytest.mark.parametrize("is_causal", [True, False])
def test_blocksparse_attention_cuda_emulated(is_causal):
    module = _load(BSA)
    b, h, s, d, block = 1, 2, 40, 16, 16
    q, k, v, mask = _bsa_case(b, h, s, d, block, is_causal, seed=11)
    func = module.blocksparse_flashattn.get_tir(b, h, s, d, is_causal, block, threads=32)
    out = np.full((b, h, s, d), np.nan, np.float16)
    res = _emulate(func, q.numpy(), k.numpy(), v.numpy(), mask.numpy(), out)[4]
    ref = module.ref_program(q, k, v, mask, block, is_causal)
    np.testing.assert_allclose(res.astype(np.float64), ref.numpy(), rtol=1e-2, atol=5e-3)


@needs_nvcc
def test_blocksparse_attention_nvcc_sm90a():
    _nvcc_build(_load(BSA).blocksparse_flashattn.get_tir(1, 8, 1024, 128, True, 64))


@pytest.mark.cuda
@needs_gpu
@pytest.mark.parametrize("is_causal", [True, False])
def test_blocksparse_attention_gpu(is_causal):
    _load(BSA).main(2, 8, 1000, 128, topk=4, is_causal=is_causal, block=64, device="cuda")


# ---------------------------------------------------------------- stream-K GEMM

STREAMK = "gemm_streamk/example_tilelang_gemm_streamk.py"


@pytest.mark.parametrize(
    "M,N,K,programs",
    [
        (70, 300, 200, 8),  # 7 stream-K tiles + one data-parallel round
        (33, 40, 100, 3),  # 2 tiles of 7 iterations shared by 3 programs: pieces everywhere
        (16, 64, 40, 4),  # tiles == programs: data-parallel only
        (50, 260, 70, 2),  # two-tile stream-K, several data-parallel rounds
        (20, 20, 20, 16),  # more programs than iterations: most programs idle
    ],
)
def test_streamk_cpu(M, N, K, programs):
    module = _load(STREAMK)
    g = torch.Generator().manual_seed(M + N + K)
    a = (torch.rand(M, K, generator=g) * 2 - 1).half()
    b = (torch.rand(N, K, generator=g) * 2 - 1).half()
    c = torch.zeros(M, N)
    module.tl_matmul_streamk(M, N, K, programs, 16, 32, 16)(a, b, c)
    ref = a.double() @ b.double().T
    np.testing.assert_allclose(c.double().numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


def test_streamk_schedule_covers_every_iteration():
    schedule = _load(STREAMK).streamk_schedule
    for M, N, K, programs in [(70, 300, 200, 8), (33, 40, 100, 3), (1000, 1000, 999, 132)]:
        sk_tiles, ipt, full, partial, rounds = schedule(M, N, K, 16, 32, 16, programs)
        total = -(-M // 16) * -(-N // 32)
        assert full * programs + partial == sk_tiles * ipt
        assert sk_tiles + rounds * programs >= total > sk_tiles + (rounds - 1) * programs


def test_streamk_bad_args():
    with pytest.raises(ValueError, match="num_programs"):
        _load(STREAMK).tl_matmul_streamk.get_tir(16, 16, 16, 0)


def test_streamk_main_cpu():
    _load(STREAMK).main(40, 100, 64, num_programs=5, block_N=32, device="cpu")


@pytest.mark.parametrize("threads", [32, 64])
def test_streamk_cuda_emulated(threads):
    """With two warps, the race check fails when the stream-K ``while`` loop's shared
    tiles get no barriers (the H200 failure: insert_sync took the loop for divergent)."""
    module = _load(STREAMK)
    M, N, K, programs = 33, 40, 100, 3
    rng = np.random.default_rng(4)
    a = (rng.random((M, K)) * 2 - 1).astype(np.float16)
    b = (rng.random((N, K)) * 2 - 1).astype(np.float16)
    func = module.tl_matmul_streamk.get_tir(M, N, K, programs, 16, 32, 16, threads=threads)
    out = _emulate(func, a, b, np.zeros((M, N), np.float32))[2]
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_streamk_cuda_emulated_mma_race_free():
    """The code the H200 runs (ldmatrix + mma.sync, two warps): no shared-memory race."""
    module = _load(STREAMK)
    M, N, K, programs = 33, 40, 100, 3
    rng = np.random.default_rng(5)
    a = (rng.random((M, K)) * 2 - 1).astype(np.float16)
    b = (rng.random((N, K)) * 2 - 1).astype(np.float16)
    func = module.tl_matmul_streamk.get_tir(M, N, K, programs, 16, 32, 16, threads=64)
    lowered = pipeline.lower(func, SM90A)
    c = np.zeros((M, N), np.float32)
    out = emulate_mod.emulate(lowered, a, b, c, race_check=True)[2]
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@needs_nvcc
def test_streamk_nvcc_sm90a():
    _nvcc_build(_load(STREAMK).tl_matmul_streamk.get_tir(256, 1024, 512, 132))


@pytest.mark.cuda
@needs_gpu
def test_streamk_gpu():
    _load(STREAMK).main(1000, 1000, 1000, device="cuda")


# ---------------------------------------------------------------- fused MoE

MOE = "fusedmoe/example_fusedmoe_tilelang.py"


@pytest.mark.parametrize(
    "tokens,dhidden,dexpert,experts,top_k",
    [(70, 100, 72, 5, 2), (9, 48, 40, 6, 1), (33, 64, 32, 3, 3)],
)
def test_fusedmoe_cpu(tokens, dhidden, dexpert, experts, top_k):
    """Groups of every size (some empty with 6 experts and 9 tokens), dims not tile
    multiples, top-1 to top-3."""
    module = _load(MOE)
    torch.manual_seed(tokens + dhidden)
    inputs = module.make_inputs(tokens, dhidden, dexpert, experts)
    out = module.moe_forward(*inputs, top_k, block_token=16, block_dhidden=32, block_dexpert=16)
    ref = module.ref_program(*inputs, top_k)
    np.testing.assert_allclose(out.double().numpy(), ref.numpy(), rtol=2e-2, atol=1e-2)


def test_fusedmoe_main_cpu():
    _load(MOE).main(40, 64, 48, 4, 2, device="cpu")


def test_fusedmoe_cuda_emulated():
    module = _load(MOE)
    torch.manual_seed(2)
    tokens, dhidden, dexpert, experts, top_k, bt = 21, 40, 24, 3, 2, 16
    x, router, W_gate, W_up, W_down = module.make_inputs(tokens, dhidden, dexpert, experts)
    rows, weights, tables = module.route(x, router, top_k, experts, bt)
    func = module.moe_forward_tilelang_routed.get_tir(
        len(rows), experts, experts, dhidden, dexpert, bt, 16, 16, threads=32
    )
    arrays = [x[rows].numpy(), W_gate.numpy(), W_up.numpy(), W_down.numpy(),
              weights.half().numpy(), *(t.numpy() for t in tables)]  # fmt: skip
    work = np.zeros((len(rows), dexpert), np.float16)
    out = np.full((len(rows), dhidden), np.nan, np.float16)
    res = torch.from_numpy(_emulate(func, *arrays, work, out)[-1].astype(np.float32))
    got = torch.zeros(tokens, dhidden, dtype=torch.float64).index_add_(0, rows, res.double())
    ref = module.ref_program(x, router, W_gate, W_up, W_down, top_k)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=2e-2, atol=1e-2)


@needs_nvcc
def test_fusedmoe_nvcc_sm90a():
    func = _load(MOE).moe_forward_tilelang_routed.get_tir(4096, 8, 8, 2048, 1024)
    _nvcc_build(func)


@pytest.mark.cuda
@needs_gpu
def test_fusedmoe_gpu():
    _load(MOE).main(2000, 1024, 512, 16, 4, device="cuda")
