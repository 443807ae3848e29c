"""Hints that some targets use and others ignore: swizzled rasterization, layout annotations."""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from . import builder


def use_swizzle(panel_size: int = 8, order: str = "row", enable: bool = True):
    """Visit blocks in panels of ``panel_size`` rows for L2 reuse (GPU targets; a no-op on CPU)."""
    from ..ops.rasterize.op import USE_SWIZZLE

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
    """Fix the layout of shared tiles and fragments: ``T.annotate_layout({buf: layout})``.

    A shared tile takes a :class:`tilelang.layout.Layout` (e.g. ``make_swizzled_layout(buf)``
    or a padded ``T.Layout(buf.shape, lambda i, j: i * (bK + 8) + j)``) or a Python function
    of the indices returning the physical index (upstream TileLang accepts both); a
    fragment takes a :class:`tilelang.layout.Fragment`. On CUDA the layout wins over
    what layout inference would choose (a tile op that cannot use it is an error naming
    both lines); on the CPU a shared layout is a performance hint with no effect.

    A global tensor takes a Layout that permutes its storage (as many output elements as
    the tensor has, one-to-one): element ``idx`` lives at the row-major offset of
    ``layout(idx)`` in the layout's output shape, on every backend, for every access of
    this kernel (upstream's FlashAttention backward lays dQ out so its atomic adds
    coalesce). Accesses to such a tensor are not vectorized.

    Each entry becomes a ``tl.annotate_layout(buf)`` statement carrying the layout and this
    line (:mod:`tilelang.ops.annotate_layout`).
    """
    from ..layout import Fragment, Layout
    from ..layout.annotation import check_layout, check_permutation, encode
    from ..lowering.region import is_tensor
    from ..ops.annotate_layout.op import ANNOTATE_LAYOUT

    builder.state()
    if not isinstance(layout_map, dict):
        raise errors.TraceError(
            f"T.annotate_layout takes a dict {{buffer: layout}}, got {type(layout_map).__name__}"
        )
    loc = builder.user_loc()
    for buf, layout in layout_map.items():
        if not is_tensor(buf):
            raise errors.TraceError(
                f"T.annotate_layout: the keys must be buffers (T.alloc_shared / "
                f"T.alloc_fragment), got {type(buf).__name__} {buf!r}"
            )
        name, scope = buf.name, str(getattr(buf.ty, "scope", ""))
        fragment = scope == "local.fragment"
        glob = scope in ("", "global")
        if not (fragment or glob or scope.startswith("shared")):
            raise errors.TraceError(
                f"T.annotate_layout: {name} is a {scope} buffer; only global tensors, shared "
                "tiles (T.alloc_shared) and fragments (T.alloc_fragment) take a layout"
            )
        shape = list(buf.ty.shape)
        if fragment and not isinstance(layout, Fragment):
            raise errors.TraceError(
                f"T.annotate_layout: {name} is a fragment and needs a tilelang.layout.Fragment, "
                f"got {type(layout).__name__}"
            )
        if not fragment and isinstance(layout, Fragment):
            raise errors.TraceError(
                f"T.annotate_layout: {name} is a {'global tensor' if glob else 'shared tile'} "
                "and needs a Layout (logical index -> physical index), got a Fragment (a "
                "register layout)"
            )
        if not isinstance(layout, Layout):
            if not callable(layout):
                raise errors.TraceError(
                    f"T.annotate_layout: the layout of {name} must be a Layout, a Fragment or "
                    f"a function of the indices, got {type(layout).__name__}"
                )
            try:
                layout = Layout(shape, layout)
            except (TypeError, ValueError) as err:
                raise errors.TraceError(
                    f"T.annotate_layout: the layout function of {name}: {err}"
                ) from None
        try:
            check_layout(layout, shape, name)
            if glob:
                check_permutation(layout, shape, name)
        except ValueError as err:
            raise errors.TraceError(f"T.annotate_layout: {err}") from None
        call = ANNOTATE_LAYOUT.make(buf, loc=loc, **encode(layout))
        _T.emit_(ir.Evaluate(call, loc=loc))


def sync_threads(barrier_id=None, arrive_count=None):
    """A block-wide barrier (``__syncthreads``); with ``barrier_id`` (and ``arrive_count``),
    the named barrier ``bar.sync barrier_id, arrive_count`` that ``arrive_count`` threads
    (a multiple of 32; all of the block's when omitted) reach, as upstream's
    ``T.sync_threads(barrier_id, arrive_count)``."""
    st = builder.state()
    if barrier_id is None and arrive_count is None:
        _T.emit_(_sync())
        return
    if barrier_id is None:
        raise errors.TraceError("T.sync_threads(arrive_count=...) needs a barrier_id as well")
    if arrive_count is None:
        if not st.kernels or builder.static_value(st.kernels[-1].num_threads) is None:
            raise errors.TraceError(
                "T.sync_threads(barrier_id): give arrive_count too, outside a T.Kernel with a "
                "static thread count"
            )
        arrive_count = builder.static_value(st.kernels[-1].num_threads)
    count = builder.static_value(builder.unwrap(arrive_count))
    if count is not None and (count <= 0 or count % 32):
        raise errors.TraceError(
            f"T.sync_threads: arrive_count must be a positive multiple of 32 (whole warps), "
            f"got {count}"
        )
    from .hopper import named_barrier_sync

    named_barrier_sync(barrier_id, arrive_count)


def _sync():
    from ..ops.sync.op import SYNC

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
