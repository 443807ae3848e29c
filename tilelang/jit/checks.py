"""Explain why a kernel call was rejected, argument by argument.

Only run after the compiled function itself refused the call (or before it, in
``check_args``), so correct calls pay nothing for it.
"""

from __future__ import annotations

from tvm_tirx import ir

from .. import errors
from .params import ParamInfo


def _tensor_like(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _dtype_name(x) -> str:
    text = str(x.dtype)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _scalar_fits(dtype: str, value) -> bool:
    """Whether a Python scalar can be passed as a ``dtype`` parameter."""
    if dtype == "bool":
        return isinstance(value, bool | int)
    if dtype.startswith(("int", "uint")):
        return isinstance(value, int) and not isinstance(value, bool)
    if dtype.startswith(("float", "bfloat")):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def problems(params: list[ParamInfo], args, kernel_name: str, device_kind: str) -> list[str]:
    """Human-readable reasons why ``args`` do not fit ``params`` (empty when they fit)."""
    out = []
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        return [f"{kernel_name} expects {len(params)} arguments ({names}), got {len(args)}"]
    bound: dict = {}
    for p, a in zip(params, args):
        if not p.is_tensor:
            if _tensor_like(a):
                out.append(f"argument {p.name!r}: expected a scalar {p.dtype}, got a tensor")
            elif not _scalar_fits(p.dtype, a):
                out.append(
                    f"argument {p.name!r}: expected a scalar {p.dtype}, got {type(a).__name__} {a!r}"
                )
            continue
        if not _tensor_like(a):
            out.append(f"argument {p.name!r}: expected a tensor, got {type(a).__name__}")
            continue
        if _dtype_name(a) != p.dtype:
            out.append(f"argument {p.name!r}: expected dtype {p.dtype}, got {_dtype_name(a)}")
        shape = list(a.shape)
        if len(shape) != len(p.shape):
            out.append(
                f"argument {p.name!r}: expected {len(p.shape)} dimensions {p.shape}, got shape {shape}"
            )
            continue
        for d, (want, got) in enumerate(zip(p.shape, shape)):
            if isinstance(want, int):
                if want != got:
                    out.append(
                        f"argument {p.name!r}: expected shape {p.shape}, got {shape} (dim {d})"
                    )
                    break
            elif isinstance(want, ir.Var):
                key = want.__chandle__()
                if key in bound and bound[key][0] != got:
                    out.append(
                        f"argument {p.name!r}: dim {d} is {want.name}={got}, but "
                        f"{bound[key][1]} set {want.name}={bound[key][0]}"
                    )
                bound.setdefault(key, (got, p.name))
        device = getattr(a, "device", None)
        dev_type = getattr(device, "type", "cpu")
        if device_kind == "cuda" and dev_type != "cuda":
            out.append(f"argument {p.name!r}: expected a CUDA tensor, got one on {device}")
        if device_kind == "cpu" and dev_type not in ("cpu", None):
            out.append(f"argument {p.name!r}: expected a CPU tensor, got one on {device}")
        if hasattr(a, "is_contiguous") and not a.is_contiguous():
            out.append(
                f"argument {p.name!r}: expected a contiguous tensor, got strides {tuple(a.stride())}"
            )
    return out


def raise_for(params, args, kernel_name, device_kind, cause=None):
    """Raise KernelArgumentError naming each argument that does not fit."""
    found = problems(params, args, kernel_name, device_kind)
    if not found:
        if cause is None:
            return
        raise errors.KernelArgumentError(
            f"{kernel_name}: the call was rejected: {cause}"
        ) from cause
    raise errors.KernelArgumentError("; ".join(found)) from cause
