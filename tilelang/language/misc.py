"""Hints that some targets use and others ignore: swizzled rasterization, layout annotations."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import errors
from . import builder, dtypes


def use_swizzle(panel_size: int = 8, order: str = "row", enable: bool = True):
    """Visit blocks in panels of ``panel_size`` rows for L2 reuse (GPU targets; a no-op on CPU)."""
    from ..ops.rasterize import USE_SWIZZLE

    builder.state()
    if order not in ("row", "col"):
        raise errors.TraceError(f"T.use_swizzle order must be 'row' or 'col', got {order!r}")
    if int(panel_size) <= 0:
        raise errors.TraceError("T.use_swizzle panel_size must be positive")
    call = USE_SWIZZLE.make(
        loc=builder.user_loc(), panel_size=int(panel_size), order=order, enable=bool(enable)
    )
    _T.emit_(ir.Evaluate(call, loc=call.loc))


def annotate_layout(layout_map: dict):
    """Fix the layout of shared/fragment buffers (a hint; ignored where the target has no use)."""
    builder.state()
    if not isinstance(layout_map, dict):
        raise errors.TraceError("T.annotate_layout takes a dict {buffer: layout}")
    state = builder.state()
    annotations = getattr(state, "layout_annotations", {})
    annotations.update(layout_map)
    state.layout_annotations = annotations


def sync_threads():
    """A block-wide barrier (``__syncthreads``)."""
    builder.state()
    _T.emit_(_sync())


def _sync():
    from ..ops.sync import SYNC

    return ir.Evaluate(SYNC.make(loc=builder.user_loc()))


def evaluate(value):
    """Emit an expression statement (e.g. an extern call)."""
    _T.emit_(ir.Evaluate(value))


def call_extern(dtype, name, *args):
    """A call to a device function by name: ``T.call_extern("float32", "my_fn", x)`` (upstream order)."""
    from tvm_tirx import tirx as _tirx

    return _tirx.call_extern(
        name, *args, ty=dtypes.canonical(dtype) if dtype != "handle" else dtype
    )
