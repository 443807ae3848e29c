"""tilelang.utils.tensor: TensorSupplyType (one definition), get_tensor_supply, map_torch_type,
torch_assert_close (checked against numpy's isclose in float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
import tilelang.profiler
import tilelang.utils
from tilelang.utils.tensor import (
    TensorSupplyType,
    fp8_remove_negative_zeros_,
    get_tensor_supply,
    is_float8_dtype,
    map_torch_type,
    torch_assert_close,
)


def test_one_tensor_supply_type():
    assert tilelang.TensorSupplyType is TensorSupplyType
    assert tilelang.profiler.TensorSupplyType is TensorSupplyType
    assert tilelang.utils.TensorSupplyType is TensorSupplyType
    assert [m.name for m in TensorSupplyType] == [
        "Integer",
        "Uniform",
        "Normal",
        "Randn",
        "Zero",
        "One",
        "Auto",
    ]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("float16", torch.float16),
        ("bfloat16", torch.bfloat16),
        ("float32", torch.float32),
        ("float", torch.float32),
        ("float64", torch.float64),
        ("int8", torch.int8),
        ("uint8", torch.uint8),
        ("int64", torch.int64),
        ("bool", torch.bool),
        ("float8_e4m3", torch.float8_e4m3fn),
        ("float8_e5m2", torch.float8_e5m2),
    ],
)
def test_map_torch_type(name, expected):
    assert map_torch_type(name) is expected
    assert map_torch_type(expected) is expected


def test_map_torch_type_accepts_T_dtypes_and_rejects_unknown():
    assert map_torch_type(T.float16) is torch.float16
    with pytest.raises(ValueError, match="'float7' has no torch equivalent"):
        map_torch_type("float7")


def _draw(supply, dtype, shape=(200, 500)):
    return get_tensor_supply(supply, device="cpu")((shape, dtype))


def test_supply_constants_and_integers():
    assert torch.equal(
        _draw(TensorSupplyType.Zero, "float16"), torch.zeros(200, 500, dtype=torch.float16)
    )
    assert torch.equal(
        _draw(TensorSupplyType.One, "int32"), torch.ones(200, 500, dtype=torch.int32)
    )
    ints = _draw(TensorSupplyType.Integer, "float32")
    assert set(ints.unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    uints = _draw(TensorSupplyType.Integer, "uint8")
    assert uints.dtype == torch.uint8 and set(uints.unique().tolist()) == {0, 1, 2}
    flags = _draw(TensorSupplyType.Auto, "bool")
    assert flags.dtype == torch.bool and set(flags.unique().tolist()) == {False, True}


def test_supply_distributions_match_their_meaning():
    n = 200 * 500
    u = _draw(TensorSupplyType.Uniform, "float32").double()
    assert u.min() >= -1 and u.max() <= 1
    # U(-1, 1): mean 0, variance 1/3; 5 standard errors
    assert abs(u.mean().item()) < 5 * (1 / 3) ** 0.5 / n**0.5
    assert abs(u.var().item() - 1 / 3) < 0.01
    normal = _draw(TensorSupplyType.Normal, "float32").double()  # upstream: N(-1, 1)
    assert abs(normal.mean().item() + 1) < 5 / n**0.5 and abs(normal.std().item() - 1) < 0.01
    randn = _draw(TensorSupplyType.Randn, "float32").double()
    assert abs(randn.mean().item()) < 5 / n**0.5 and abs(randn.std().item() - 1) < 0.01
    auto = _draw(TensorSupplyType.Auto, "float16")
    assert auto.dtype == torch.float16 and auto.abs().max() <= 1
    assert abs(auto.double().var().item() - 1 / 3) < 0.01


def test_supply_upstream_special_cases():
    assert torch.equal(
        _draw(TensorSupplyType.Uniform, "int8"), torch.ones(200, 500, dtype=torch.int8)
    )
    f8 = _draw(TensorSupplyType.Integer, "float8_e4m3", shape=(1000,))
    assert f8.dtype == torch.float8_e4m3fn and torch.isfinite(f8.float()).all()
    assert f8.float().unique().numel() > 50  # every int8 bit pattern reinterpreted as fp8


def test_supply_reads_kernel_params_and_rejects_symbolic_shapes():
    @T.prim_func
    def k(A: T.Tensor((8, 16), "float16"), B: T.Tensor((T.dynamic("m"), 4), "float32")):
        with T.Kernel(1, threads=1):
            A[0, 0] = T.float16(0)

    kernel = tilelang.compile(k, target="cpu")
    supply = get_tensor_supply(TensorSupplyType.Randn, device="cpu")
    a = supply(kernel.params[0])
    assert a.shape == (8, 16) and a.dtype == torch.float16
    with pytest.raises(ValueError, match=r"parameter 'B' has symbolic shape dimension m"):
        supply(kernel.params[1])
    with pytest.raises(TypeError, match="supply_type must be a TensorSupplyType"):
        get_tensor_supply("Randn")


def _numpy_mismatches(a, b, rtol, atol):
    return int(
        (
            ~np.isclose(
                a.double().numpy(), b.double().numpy(), rtol=rtol, atol=atol, equal_nan=True
            )
        ).sum()
    )


def test_torch_assert_close_counts_like_numpy(rng):
    a = torch.from_numpy(rng.standard_normal((40, 50)))
    b = a + torch.from_numpy(rng.standard_normal((40, 50)) * 1e-3)
    for rtol, atol in ((1e-2, 1e-3), (1e-3, 1e-4), (0.0, 1e-3)):
        bad = _numpy_mismatches(a, b, rtol, atol)
        allowed = int(a.numel() * 0.01)
        if bad <= allowed:
            assert torch_assert_close(a, b, rtol=rtol, atol=atol, max_mismatched_ratio=0.01) is True
        else:
            with pytest.raises(
                AssertionError, match=rf"Too many mismatched elements: {bad} > {allowed}"
            ):
                torch_assert_close(a, b, rtol=rtol, atol=atol, max_mismatched_ratio=0.01)


def test_torch_assert_close_allowed_count_boundary():
    a = torch.zeros(1000)
    b = a.clone()
    b[7] = 1.0
    assert torch_assert_close(a, b, max_mismatched_ratio=0.001)  # 1 allowed
    b[500] = 1.0
    with pytest.raises(AssertionError, match=r"(?s)2 > 1 .*First mismatch at index \[7\]"):
        torch_assert_close(a, b, max_mismatched_ratio=0.001)


def test_torch_assert_close_attributes_and_nan():
    a = torch.ones(4, dtype=torch.float16)
    with pytest.raises(AssertionError, match="'dtype' do not match"):
        torch_assert_close(a, a.float())
    assert torch_assert_close(a, a.float(), check_dtype=False)
    with pytest.raises(AssertionError, match="'shape' do not match"):
        torch_assert_close(a, torch.ones(5, dtype=torch.float16))
    nan = torch.tensor([float("nan"), 1.0])
    assert torch_assert_close(nan, nan.clone())
    with pytest.raises(AssertionError, match="Too many mismatched"):
        torch_assert_close(nan, nan.clone(), equal_nan=False)
    with pytest.raises(TypeError, match="tensor_b must be a torch.Tensor"):
        torch_assert_close(a, [1.0])


def test_float8_helpers():
    x = torch.tensor([-0.0, 0.0, 1.5, -2.0]).to(torch.float8_e4m3fn)
    assert is_float8_dtype(x.dtype) and not is_float8_dtype(torch.float16)
    assert x.view(torch.uint8)[0].item() == 0x80
    fp8_remove_negative_zeros_(x)
    assert x.view(torch.uint8).tolist()[:2] == [0, 0] and x.float().tolist()[2:] == [1.5, -2.0]
    with pytest.raises(TypeError, match="must have a float8 dtype"):
        fp8_remove_negative_zeros_(torch.zeros(2))
