"""On-chip storage: ``T.alloc_shared``, ``T.alloc_fragment``, ``T.alloc_local``, ``T.alloc_var``.

Scopes follow upstream TileLang: shared memory is ``shared.dyn`` (one dynamic
buffer per block after planning), fragments are ``local.fragment`` (a tile spread
over the block's threads by layout inference), ``local`` is per-thread, and
``local.var`` is a one-element scalar cell.
"""

from __future__ import annotations

import contextlib

from tvm_tirx.runtime import MemoryScope
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from . import builder

for _scope in ("local.fragment", "local.var"):
    with contextlib.suppress(ValueError):
        MemoryScope.register(_scope)


def _shape(shape):
    if isinstance(shape, int) or builder.is_expr(shape):
        return (shape,)
    return tuple(shape)


def _alloc(shape, dtype, scope):
    if not builder.state().kernels and scope != "global":  # T.alloc_global: outside
        raise errors.TraceError(
            f"allocations ({scope}) must be inside a `with T.Kernel(...)` block: they live in "
            "a block's memory"
        )
    shape = _shape(shape)
    for extent in shape:
        value = builder.static_value(extent)
        if value is not None and value <= 0:
            raise errors.TraceError(f"allocation extent must be positive, got shape {shape}")
    tensor = _T.alloc_tensor(
        ty_args=[_T.Tensor(shape, dtypes.canonical(dtype), scope=scope)], loc=builder.user_loc()
    )
    return builder.unwrap(tensor)


def alloc_shared(shape, dtype, scope="shared.dyn"):
    """A tile in the block's shared memory."""
    return _alloc(shape, dtype, scope)


def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile held in the registers of the block's threads (layout chosen by the compiler)."""
    return _alloc(shape, dtype, scope)


def alloc_local(shape, dtype, scope="local"):
    """Per-thread registers/local memory."""
    return _alloc(shape, dtype, scope)


def alloc_var(dtype, init=None, scope="local.var"):
    """A mutable scalar: assigning to the name stores into the cell (``x = x + 1``)."""
    tensor = _alloc((1,), dtype, scope)
    cell = tensor[0]
    if init is not None:
        builder.store(tensor, [0], init)
    return cell


def alloc_global(shape, dtype, scope="global"):
    """A global-memory workspace, allocated per call and shared by the function's
    ``T.Kernel`` blocks (declare it outside them). Its contents are undefined when the
    first kernel starts; the shape must be static."""
    st = builder.state()
    if st.kernels:
        raise errors.TraceError(
            f"{builder.user_where()}: T.alloc_global must be called outside T.Kernel "
            "(it is a workspace of the whole function, shared by its kernels)"
        )
    if scope != "global":
        raise errors.TraceError(f"T.alloc_global allocates in scope 'global', got {scope!r}")
    for extent in _shape(shape):
        if builder.static_value(extent) is None:
            raise errors.TraceError(
                f"{builder.user_where()}: T.alloc_global needs a static shape, got {shape}"
            )
    return _alloc(shape, dtype, "global")

