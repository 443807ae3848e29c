"""Tensors for testing kernels: input supplies, dtype mapping, and a tolerant comparison.

Upstream's ``tilelang.utils.tensor`` names: :class:`TensorSupplyType`, :func:`get_tensor_supply`,
:func:`torch_assert_close`, :func:`is_float8_dtype`, :func:`fp8_remove_negative_zeros_`; also
:func:`map_torch_type` (a tilelang dtype name -> ``torch.dtype``) of earlier upstream releases.
torch is imported when a function runs, not when this module is imported.
"""

from __future__ import annotations

import enum

__all__ = [
    "TensorSupplyType",
    "fp8_remove_negative_zeros_",
    "get_tensor_supply",
    "is_float8_dtype",
    "map_torch_type",
    "torch_assert_close",
]


class TensorSupplyType(enum.Enum):
    """How random inputs for a kernel are filled (``kernel.get_profiler(supply_type)``).

    ``Integer``: small integers in [-2, 2] ([0, 2] unsigned); ``Uniform``: U(-1, 1);
    ``Normal``: N(-1, 1) (upstream's mean); ``Randn``: N(0, 1); ``Zero`` / ``One``: constants;
    ``Auto``: U(-1, 1) for float16/bfloat16/float32, small integers otherwise.
    """

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


_FLOAT8_NAMES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")

# tilelang dtype names whose torch name differs (T.float8_e4m3 is torch's e4m3fn)
_TORCH_ALIASES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "int": "int32",
    "long": "int64",
    "float8_e4m3": "float8_e4m3fn",
    "e4m3_float8": "float8_e4m3fn",
    "e5m2_float8": "float8_e5m2",
    "float8_e8m0fnu": "float8_e8m0fnu",
}


def map_torch_type(dtype) -> torch.dtype:  # noqa: F821
    """The ``torch.dtype`` for a tilelang/TVM dtype (``"float16"``, ``T.float32``, a torch dtype)."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype)
    if not isinstance(dtype, str) and not name:
        raise TypeError(f"map_torch_type: dtype must be a dtype name, got {dtype!r}")
    name = _TORCH_ALIASES.get(name, name)
    result = getattr(torch, name, None)
    if not isinstance(result, torch.dtype):
        raise ValueError(
            f"map_torch_type: dtype {str(dtype)!r} has no torch equivalent "
            f"(torch {torch.__version__})"
        )
    return result


def is_float8_dtype(dtype) -> bool:
    """Whether a torch dtype is one of torch's float8 types."""
    import torch

    return any(getattr(torch, n, None) == dtype for n in _FLOAT8_NAMES)


def fp8_remove_negative_zeros_(tensor):
    """In place: turn every -0.0 of a float8 tensor into +0.0 (bit pattern 0x00); returns it."""
    if not is_float8_dtype(tensor.dtype):
        raise TypeError(
            f"fp8_remove_negative_zeros_: tensor must have a float8 dtype, got {tensor.dtype}"
        )
    import torch

    bits = tensor.view(torch.uint8)
    bits[tensor == 0] = 0
    return tensor


def _param_shape_dtype(param):
    """(shape, torch dtype) of a kernel parameter (ours, upstream-like, or a (shape, dtype) pair)."""
    if isinstance(param, tuple) and len(param) == 2:
        shape, dtype = param
    else:
        shape = getattr(param, "shape", None)
        dtype = getattr(param, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(
                f"get_tensor_supply: param must have .shape and .dtype, got {type(param).__name__}"
            )
    name = getattr(param, "name", "?")
    if not shape:
        raise ValueError(
            f"get_tensor_supply: parameter {name!r} has no shape (a scalar?): "
            "only tensors can be supplied"
        )
    dims = []
    for d in shape:
        if hasattr(d, "value") and isinstance(d.value, int):
            d = d.value
        if not isinstance(d, int):
            raise ValueError(
                f"get_tensor_supply: parameter {name!r} has symbolic shape dimension {d}: "
                "a random tensor needs a static shape (pass input tensors instead)"
            )
        dims.append(d)
    return dims, map_torch_type(dtype)


def _make(supply_type: TensorSupplyType, shape, dtype, device):
    import torch

    def small_ints():
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, device=device).bool()
        if is_float8_dtype(dtype):
            return torch.randint(-128, 128, shape, device=device, dtype=torch.int8).to(dtype)
        signed = dtype.is_floating_point or dtype.is_signed
        low, high = (-2, 3) if signed else (0, 3)
        return torch.randint(low, high, shape, device=device).to(dtype)

    if supply_type == TensorSupplyType.Auto:
        if dtype in (torch.float16, torch.bfloat16, torch.float32):
            return torch.empty(shape, dtype=dtype, device=device).uniform_(-1.0, 1.0)
        return small_ints()
    if supply_type == TensorSupplyType.Zero:
        return torch.zeros(shape, dtype=dtype, device=device)
    if supply_type == TensorSupplyType.One:
        return torch.ones(shape, dtype=dtype, device=device)
    if supply_type == TensorSupplyType.Integer:
        return small_ints()
    if dtype == torch.int8 and supply_type in (TensorSupplyType.Uniform, TensorSupplyType.Normal):
        return torch.ones(shape, dtype=dtype, device=device)  # upstream's choice
    if not (dtype.is_floating_point or is_float8_dtype(dtype)):
        return small_ints()
    base = torch.empty(shape, dtype=torch.float32, device=device)
    if supply_type == TensorSupplyType.Uniform:
        base.uniform_(-1.0, 1.0)
    elif supply_type == TensorSupplyType.Normal:
        base.normal_(-1.0, 1.0)
    elif supply_type == TensorSupplyType.Randn:
        base.normal_(0.0, 1.0)
    else:
        raise ValueError(f"get_tensor_supply: unknown supply_type {supply_type!r}")
    return base.to(dtype)


def _default_device():
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer, device=None):
    """A function ``param -> torch.Tensor`` filling a kernel parameter as ``supply_type`` says.

    ``param`` is a kernel parameter (``kernel.params[i]``: has ``.shape`` and ``.dtype``) or a
    ``(shape, dtype)`` pair. Tensors go to ``device``: by default the current CUDA device when
    there is one (as upstream), else the CPU.
    """
    if not isinstance(supply_type, TensorSupplyType):
        raise TypeError(
            f"get_tensor_supply: supply_type must be a TensorSupplyType, got {supply_type!r}"
        )

    def get_tensor(param):
        shape, dtype = _param_shape_dtype(param)
        return _make(supply_type, shape, dtype, device if device is not None else _default_device())

    return get_tensor


def _check_attributes(a, b, check_device, check_dtype, check_layout, check_stride) -> None:
    def mismatch(what, x, y):
        raise AssertionError(f"The values for attribute '{what}' do not match: {x} != {y}.")

    if a.shape != b.shape:
        mismatch("shape", a.shape, b.shape)
    if check_layout and a.layout != b.layout:
        mismatch("layout", a.layout, b.layout)
    if check_stride and a.stride() != b.stride():
        mismatch("stride()", a.stride(), b.stride())
    if check_device and a.device != b.device:
        mismatch("device", a.device, b.device)
    if check_dtype and a.dtype != b.dtype:
        mismatch("dtype", a.dtype, b.dtype)


def torch_assert_close(
    tensor_a,
    tensor_b,
    rtol: float = 1e-2,
    atol: float = 1e-3,
    max_mismatched_ratio: float = 0.001,
    verbose: bool = False,
    equal_nan: bool = True,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    base_name: str = "LHS",
    ref_name: str = "RHS",
):
    """Assert two tensors agree within ``atol + rtol * |b|`` except for a few elements.

    At most ``int(numel * max_mismatched_ratio)`` elements may differ. Shapes must match;
    device, dtype, layout (and, if asked, strides) too unless their ``check_*`` is False, in
    which case values are compared on the CPU in a common dtype. Returns True, or raises
    AssertionError naming the count, the first mismatch and the largest differences.
    """
    import torch

    for arg, value in (("tensor_a", tensor_a), ("tensor_b", tensor_b)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"torch_assert_close: {arg} must be a torch.Tensor, got {type(value)}")
    _check_attributes(tensor_a, tensor_b, check_device, check_dtype, check_layout, check_stride)
    a, b = tensor_a, tensor_b
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    if a.layout != torch.strided:
        a = a.to_dense()
    if b.layout != torch.strided:
        b = b.to_dense()
    if is_float8_dtype(a.dtype):
        a = a.float()
    if is_float8_dtype(b.dtype):
        b = b.float()
    if a.dtype != b.dtype:
        wide = {torch.uint16: torch.int64, torch.uint32: torch.int64, torch.uint64: torch.int64}
        a = a.to(wide.get(a.dtype, a.dtype))
        b = b.to(wide.get(b.dtype, b.dtype))
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)

    bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    n_bad = int(bad.sum().item())
    total = a.numel()
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"Number of mismatched elements: {n_bad} / {total} (allowed: {allowed})")
    if n_bad <= allowed:
        return True

    import numpy as np

    flat = int(torch.argmax(bad.reshape(-1).int()).item())
    idx = [int(i) for i in np.unravel_index(flat, tuple(a.shape))]
    av = a.reshape(-1)[flat].item()
    bv = b.reshape(-1)[flat].item()
    a64, b64 = a.double(), b.double()
    diff = (a64 - b64).abs()
    rel = diff / (b64.abs() + 1e-12)
    raise AssertionError(
        f"Too many mismatched elements: {n_bad} > {allowed} "
        f"({max_mismatched_ratio * 100:.2f}% allowed, but get {n_bad / total * 100:.2f}%).\n"
        f"First mismatch at index {idx}: {base_name.lower()}={av:.6f}, "
        f"{ref_name.lower()}={bv:.6f}, abs_diff={abs(av - bv):.6f}\n"
        f"Greatest absolute difference: {diff.max().item()}, "
        f"Greatest relative difference: {rel.max().item()}\n"
        f"{base_name}: {tensor_a}\n{ref_name}: {tensor_b}"
    )
