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


def view(src, shape=None, dtype=None):
    """A tensor over ``src``'s memory with ``shape`` and ``dtype`` (defaults: ``src``'s).

    The view has ``src``'s memory scope; its size in bytes must equal ``src``'s.
    """
    builder.state()
    src = builder.unwrap(src)
    if not (isinstance(src, ir.Var) and hasattr(src.ty, "shape")):
        raise errors.TraceError(f"T.view/T.reshape take a tensor, got {src!r}")
    old_dtype = str(src.ty.dtype)
    dtype = old_dtype if dtype is None else dtypes.canonical(dtype)
    old_shape = list(src.ty.shape)
    if shape is None:
        ratio = dtypes.bits(old_dtype) / dtypes.bits(dtype)
        last = builder.static_value(old_shape[-1])
        if last is None or int(last * ratio) != last * ratio:
            raise errors.TraceError(f"T.view: give the shape of {src.name} viewed as {dtype}")
        shape = [*old_shape[:-1], int(last * ratio)]
    shape = [shape] if isinstance(shape, int) or builder.is_expr(shape) else list(shape)
    old_n, new_n = _numel(old_shape), _numel(shape)
    if old_n is not None and new_n is not None:
        if old_n * dtypes.bits(old_dtype) != new_n * dtypes.bits(dtype):
            raise errors.TraceError(
                f"T.view: {src.name}{old_shape} ({old_dtype}) and {shape} ({dtype}) "
                "have different sizes"
            )
    ty = _T.Tensor(tuple(shape), dtype, scope=str(src.ty.scope))
    var = ir.Var("v", ty)  # 'v': renamed to the user's name by the assignment
    _T.emit_(ir.Bind(var, _T.decl_tensor(src.data, ty_args=[ty]), loc=builder.user_loc()))
    return var


def reshape(src, shape):
    """``src`` with another shape of the same number of elements (a view, no copy)."""
    return view(src, shape)
