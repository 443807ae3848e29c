"""``T.reshape`` and ``T.view``: another shape (or element type) over a tensor's memory."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from . import builder


def _numel(shape):
    total = 1
    for extent in shape:
        value = builder.static_value(extent)
        if value is None:
            return None
        total *= value
    return total


def _dense_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step = step * extent
    return strides[::-1]


def _is_dense(ty) -> bool:
    """Whether a tensor type is row-major and compact (no explicit strides, or strides equal
    to the row-major ones)."""
    layout = ty.layout
    if layout is None:
        return True
    shard = list(layout.shard)
    if list(layout.replica) or len(shard) != len(ty.shape):
        return False
    for it, extent, stride in zip(shard, ty.shape, _dense_strides(list(ty.shape))):
        if builder.static_value(it.extent) != builder.static_value(extent):
            return False
        if builder.static_value(it.stride) != builder.static_value(stride):
            return False
    return True


def view(src, shape=None, dtype=None, strides=None):
    """A tensor over ``src``'s memory with ``shape``, ``dtype`` and ``strides`` (defaults:
    ``src``'s shape and dtype, row-major strides).

    Without ``strides`` the source must be compact and the view's size in bytes must equal
    ``src``'s. ``strides`` (in elements of ``dtype``, one per dimension of ``shape``) give a
    strided view of a global or shared tensor, possibly of another rank; the caller
    guarantees they stay inside ``src``'s memory. The view has ``src``'s memory scope.
    """
    builder.state()
    src = builder.unwrap(src)
    if not (isinstance(src, ir.Var) and hasattr(src.ty, "shape")):
        raise errors.TraceError(f"T.view/T.reshape take a tensor, got {src!r}")
    old_dtype = str(src.ty.dtype)
    dtype = old_dtype if dtype is None else dtypes.canonical(dtype)
    old_shape = list(src.ty.shape)
    scope = str(src.ty.scope)
    if shape is None:
        ratio = dtypes.bits(old_dtype) / dtypes.bits(dtype)
        last = builder.static_value(old_shape[-1])
        if last is None or int(last * ratio) != last * ratio:
            raise errors.TraceError(f"T.view: give the shape of {src.name} viewed as {dtype}")
        shape = [*old_shape[:-1], int(last * ratio)]
    shape = [shape] if isinstance(shape, int) or builder.is_expr(shape) else list(shape)
    if strides is not None:
        return _strided_view(src, shape, dtype, strides, scope)
    if not _is_dense(src.ty):
        raise errors.TraceError(
            f"T.view: {src.name} is not compact (it has explicit strides); give the view's "
            "strides= (in elements of its dtype)"
        )
    old_n, new_n = _numel(old_shape), _numel(shape)
    if old_n is not None and new_n is not None:
        if old_n * dtypes.bits(old_dtype) != new_n * dtypes.bits(dtype):
            raise errors.TraceError(
                f"T.view: {src.name}{old_shape} ({old_dtype}) and {shape} ({dtype}) "
                "have different sizes"
            )
    ty = _T.Tensor(tuple(shape), dtype, scope=scope)
    return _bind_view(src, ty)


def _strided_view(src, shape, dtype, strides, scope):
    strides = [strides] if isinstance(strides, int) or builder.is_expr(strides) else list(strides)
    strides = [builder.unwrap(s) for s in strides]
    if len(strides) != len(shape):
        raise errors.TraceError(
            f"T.view: {len(strides)} strides= for the rank-{len(shape)} view of {src.name}"
        )
    if scope not in ("global", "shared", "shared.dyn"):
        raise errors.TraceError(
            f"T.view: strides= apply to global and shared tensors; {src.name} is in {scope} "
            "(a fragment's elements are spread over threads by its layout)"
        )
    for s in strides:
        value = builder.static_value(s)
        if value is not None and value < 0:
            raise errors.TraceError(f"T.view: strides must be non-negative, got {strides}")
    from .proxy import TensorAnnotation

    ty = TensorAnnotation(tuple(shape), dtype, tuple(strides), scope).ir_type()
    return _bind_view(src, ty)


def _bind_view(src, ty):
    var = ir.Var("v", ty)  # 'v': renamed to the user's name by the assignment
    _T.emit_(ir.Bind(var, _T.decl_tensor(src.data, ty_args=[ty]), loc=builder.user_loc()))
    return var


def reshape(src, shape):
    """``src`` with another shape of the same number of elements (a view, no copy)."""
    return view(src, shape)
