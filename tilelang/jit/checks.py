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


def int_range(dtype: str) -> tuple[int, int] | None:
    """The values an integer parameter of ``dtype`` holds (None for other dtypes)."""
    if dtype.startswith("uint"):
        bits = int(dtype[4:] or 32)
        return 0, (1 << bits) - 1
    if dtype.startswith("int"):
        bits = int(dtype[3:] or 32)
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return None


def scalar_ranges(params: list[ParamInfo], positions: list[int]) -> list[tuple]:
    """``(argument position, name, dtype, lo, hi)`` of each integer scalar parameter among
    ``positions`` (the parameters a call passes, in order): checked on every call, since the
    compiled function would silently wrap a value that does not fit."""
    out = []
    for pos, i in enumerate(positions):
        p = params[i]
        bounds = None if p.is_tensor else int_range(p.dtype)
        if bounds is not None:
            out.append((pos, p.name, p.dtype, *bounds))
    return out


def dim_ranges(params: list[ParamInfo], positions: list[int]) -> list[tuple]:
    """``(argument position, name, dim, var name, dtype, hi)`` of each symbolic dimension of a
    tensor parameter among ``positions`` whose variable is narrower than 64 bits: a call
    with a larger extent would wrap (a ``T.dynamic("n")`` is an int32)."""
    out = []
    for pos, i in enumerate(positions):
        p = params[i]
        if not p.is_tensor:
            continue
        for d, extent in enumerate(p.shape):
            if isinstance(extent, ir.Var):
                bounds = int_range(str(extent.ty))
                if bounds is not None and bounds[1] < (1 << 63) - 1:
                    out.append((pos, p.name, d, extent.name, str(extent.ty), bounds[1]))
    return out


def check_scalars(ranges, args) -> None:
    """Raise KernelArgumentError for an integer scalar outside its parameter's dtype, or a
    tensor extent larger than its symbolic dimension's dtype holds."""
    for check in ranges:
        if len(check) == 5:
            pos, name, dtype, lo, hi = check
            value = args[pos] if pos < len(args) else None
            if isinstance(value, int) and not lo <= value <= hi:
                raise errors.KernelArgumentError(
                    f"argument {name!r}: {value} does not fit its dtype {dtype} "
                    f"(range {lo} .. {hi}); declare the parameter with a wider type"
                )
            continue
        pos, name, dim, var, dtype, hi = check
        shape = getattr(args[pos], "shape", None) if pos < len(args) else None
        if shape is not None and len(shape) > dim and shape[dim] > hi:
            raise errors.KernelArgumentError(
                f"argument {name!r}: dim {dim} is {var}={shape[dim]}, which does not fit "
                f"{var}'s dtype {dtype} (at most {hi}); declare it T.dynamic({var!r}, 'int64')"
            )


def compact_empty(args):
    """``args`` with every zero-size tensor given the compact strides TIRx expects (torch
    gives a (5, 0) tensor strides (1, 1)); None when no argument needed it."""
    changed, out = False, []
    for a in args:
        numel = getattr(a, "numel", None)
        if _tensor_like(a) and callable(numel) and numel() == 0 and hasattr(a, "as_strided"):
            strides, step = [], 1
            for extent in reversed(list(a.shape)):
                strides.append(step)
                step *= int(extent)
            strides.reverse()
            if list(a.stride()) != strides:
                a = a.as_strided(tuple(a.shape), tuple(strides))
                changed = True
        out.append(a)
    return out if changed else None


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
