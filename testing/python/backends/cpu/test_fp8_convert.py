"""CPU backend float -> fp8 casts round to nearest even, subnormals included, like
ml_dtypes (in range) and torch (saturation / overflow / NaN codes)."""

import ml_dtypes
import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T

FP8 = ["float8_e4m3fn", "float8_e5m2"]
MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


@tilelang.jit
def cast_kernel(n, src, dst, block=64):
    @T.prim_func
    def main(X: T.Tensor((n,), src), Y: T.Tensor((n,), dst)):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    Y[bx * block + i] = T.cast(X[bx * block + i], dst)

    return main


def _cast(x: torch.Tensor, dst: str) -> np.ndarray:
    """The kernel's fp8 codes (uint8) for ``x``."""
    y = torch.zeros(x.numel(), dtype=getattr(torch, dst))
    cast_kernel(x.numel(), str(x.dtype).removeprefix("torch."), dst)(x, y)
    return y.view(torch.uint8).numpy()


def _ml_codes(x64: np.ndarray, dst: str) -> np.ndarray:
    return x64.astype(getattr(ml_dtypes, dst)).view(np.uint8)


def _all_values(dst):
    """Every fp8 code's float64 value (NaN codes included)."""
    return np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, dst)).astype(np.float64)


@pytest.mark.parametrize("dst", FP8)
def test_every_fp8_value_round_trips(dst):
    values = _all_values(dst)
    got = _cast(torch.from_numpy(values.astype(np.float32)), dst)
    finite = np.isfinite(values)
    np.testing.assert_array_equal(got[finite], np.arange(256)[finite])
    # NaN codes stay NaN (0x7F with the sign); e5m2's infinities stay infinities
    decoded = got.view(getattr(ml_dtypes, dst)).astype(np.float64)
    assert np.isnan(decoded[np.isnan(values)]).all()
    np.testing.assert_array_equal(decoded[np.isinf(values)], values[np.isinf(values)])


@pytest.mark.parametrize("dst", FP8)
def test_fp8_decode_every_code(dst):
    codes = torch.arange(256, dtype=torch.uint8).view(getattr(torch, dst))
    out = torch.zeros(256, dtype=torch.float32)
    cast_kernel(256, dst, "float32")(codes, out)
    np.testing.assert_array_equal(out.numpy(), _all_values(dst).astype(np.float32))


@pytest.mark.parametrize("dst", FP8)
def test_ties_and_neighbours_round_to_even(dst):
    """Midpoints between neighbouring fp8 values (subnormal ones included) round to the
    even code; one float32 step either side rounds to the nearer one."""
    values = np.unique(np.abs(_all_values(dst)[np.isfinite(_all_values(dst))]))
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    x = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    x = np.concatenate([x, -x]).astype(np.float32)
    got = _cast(torch.from_numpy(x), dst)
    np.testing.assert_array_equal(got, _ml_codes(x.astype(np.float64), dst))


@pytest.mark.parametrize("dst", FP8)
@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16", "float64"])
def test_random_floats_match_ml_dtypes(dst, src):
    rng = np.random.default_rng(len(dst) * 7 + len(src))
    n = 3001  # not a multiple of the block
    # magnitudes log-uniform from far below the smallest subnormal to the largest value
    mags = np.exp2(rng.uniform(-22, np.log2(MAX[dst]), n))
    x = torch.from_numpy(mags * rng.choice([-1.0, 1.0], n)).to(getattr(torch, src))
    x64 = x.double().numpy()
    keep = np.abs(x64) <= MAX[dst]  # in range: ml_dtypes and torch agree
    got = _cast(x, dst)
    np.testing.assert_array_equal(got[keep], _ml_codes(x64[keep], dst))
    assert keep.mean() > 0.95


def test_float64_source_is_rounded_once():
    """1.0625 + 2**-40 lies above the e4m3 midpoint 1.0625: 1.125, not 1.0 (rounding
    through float32 first would land on the tie and go to even)."""
    x = torch.tensor([1.0625 + 2**-40, -(1.0625 + 2**-40)], dtype=torch.float64)
    got = _cast(x, "float8_e4m3fn").view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    np.testing.assert_array_equal(got, [1.125, -1.125])


@pytest.mark.parametrize("dst", FP8)
def test_overflow_and_specials_match_torch(dst):
    """Beyond the largest value: e4m3fn saturates (torch; ml_dtypes gives NaN), e5m2 goes
    to inf; NaN stays NaN; signed zeros keep their sign."""
    big = MAX[dst]
    x = torch.tensor(
        [big * 1.03, big * 1.2, 1e30, float("inf"), float("nan"), 0.0, -0.0, 1e-30, -1e-30],
        dtype=torch.float32,
    )
    x = torch.cat([x, -x[:4]])
    got = _cast(x, dst)
    ref = x.to(getattr(torch, dst)).view(torch.uint8).numpy()
    np.testing.assert_array_equal(got, ref)


@tilelang.jit(target="cpu")
def fp8_tile_kernel(m, n, dtype, block_m=8):
    """fp8 tiles the kernel owns (shared and fragment): read-modify-write of a fragment,
    a reduction over it, an fp8 shared tile written back (upstream's HISA pooling and
    DeepGEMM scale passes do this)."""

    @T.prim_func
    def main(
        X: T.Tensor((m, n), dtype),
        S: T.Tensor((m,), T.float32),
        Y: T.Tensor((m, n), dtype),
        R: T.Tensor((n,), T.float32),
    ):
        with T.Kernel(T.ceildiv(m, block_m), threads=64) as bx:
            f = T.alloc_fragment((block_m, n), dtype)
            sh = T.alloc_shared((block_m, n), dtype)
            acc = T.alloc_fragment((n,), T.float32)
            T.fill(f, 0.0)
            T.copy(X[bx * block_m, 0], f)
            for i, j in T.Parallel(block_m, n):
                f[i, j] = f[i, j] * S[bx * block_m + i]
            T.reduce_sum(f, acc, dim=0, clear=True)
            for j in T.Parallel(n):
                T.atomic_add(R[j], acc[j])
            T.copy(f, sh)
            T.copy(sh, Y[bx * block_m, 0])

    return main


@pytest.mark.parametrize("dst", FP8)
@pytest.mark.parametrize("m,n", [(13, 24), (5, 7)])
def test_kernel_fp8_tiles_compute_in_float32_and_store_codes(dst, m, n):
    x64 = np.random.default_rng(m * n).standard_normal((m, n)) * 4
    x = torch.from_numpy(x64).to(getattr(torch, dst))
    s = torch.rand(m) * 2 + 0.25
    y = torch.zeros(m, n, dtype=getattr(torch, dst))
    r = torch.zeros(n)
    fp8_tile_kernel(m, n, dst)(x, s, y, r)
    # each element: fp8 * float32 scale in float32, rounded to fp8 (nearest even)
    prod = (x.double() * s.double()[:, None]).float().double().numpy()
    want = _ml_codes(prod, dst)
    np.testing.assert_array_equal(y.view(torch.uint8).numpy(), want)
    # the reduction sums the fp8 values the fragment held (rows past m read as 0)
    held = want.view(getattr(ml_dtypes, dst)).astype(np.float64)
    np.testing.assert_allclose(r.double().numpy(), held.sum(0), rtol=1e-5, atol=1e-4)
