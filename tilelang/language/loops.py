"""Loop constructors: ``T.Parallel``, ``T.Pipelined``, ``T.serial``, ``T.unroll``, ...

Each returns a :class:`~tilelang.language.builder.LoopSpec`; the rewritten ``for``
statement turns it into IR loops. Annotations carry the scheduling intent
(``tl.parallel``, ``num_stages``...) to the backend passes.
"""

from __future__ import annotations

from .. import errors
from .builder import LoopSpec


def _bounds(start, stop):
    return (0, start) if stop is None else (start, stop)


def Parallel(*extents, coalesced_width=None, loop_layout=None, annotations=None):  # noqa: N802 - upstream API
    """A loop nest whose iterations are independent: the compiler spreads it over threads.
    ``annotations`` (upstream: backend hints) ride on the loops."""
    if not extents:
        raise errors.TraceError("T.Parallel needs at least one extent")
    ann = dict(annotations or {})
    if coalesced_width is not None:
        ann["coalesced_width"] = int(coalesced_width)
    return LoopSpec([(0, e, None) for e in extents], "parallel", ann)


def Pipelined(  # noqa: N802 - upstream API
    start, stop=None, num_stages=0, order=None, stage=None, annotations=None, sync=None, group=None
):
    """A serial loop whose copies are overlapped with compute ``num_stages`` deep
    (``annotations``: e.g. ``{T.WSID: "loop_k"}`` for a warp-specialization schedule)."""
    begin, end = _bounds(start, stop)
    ann = {**dict(annotations or {}), "num_stages": int(num_stages)}
    if order is not None:
        ann["tl_pipeline_order"] = [int(x) for x in order]
    if stage is not None:
        ann["tl_pipeline_stage"] = [int(x) for x in stage]
    if sync is not None:
        ann["tl_pipeline_sync"] = [[int(y) for y in x] for x in sync]
    if group is not None:
        ann["tl_pipeline_group"] = [[int(y) for y in x] for x in group]
    return LoopSpec([(begin, end, None)], "pipelined", ann)


def serial(start, stop=None, step=None, annotations=None):
    """A plain sequential loop."""
    begin, end = _bounds(start, stop)
    return LoopSpec([(begin, end, step)], "serial", dict(annotations or {}))


def unroll(start, stop=None, step=None, explicit=False, unroll_factor=None, annotations=None):
    """A sequential loop the compiler unrolls."""
    begin, end = _bounds(start, stop)
    return LoopSpec([(begin, end, step)], "unroll", dict(annotations or {}))


def vectorized(start, stop=None, annotations=None):
    """A loop executed as one vector operation."""
    begin, end = _bounds(start, stop)
    return LoopSpec([(begin, end, None)], "vectorized", dict(annotations or {}))


def grid(*extents):
    """Nested serial loops over ``extents``."""
    return LoopSpec([(0, e, None) for e in extents], "serial")


def Persistent(*args, **kwargs):  # noqa: N802
    """Not supported by this backend set yet."""
    raise errors.TraceError("T.Persistent is not supported yet")


def loop_break():
    """Leave the innermost run-time loop (upstream's call form of ``break``)."""
    from tvm_tirx.script import tirx as _T

    from . import builder

    st = builder.state()
    if not st.loops or not st.loops[-1].is_ir:
        raise errors.TraceError(
            "T.loop_break() must be inside a run-time loop (range, T.serial, T.Pipelined, while)"
        )
    _T.break_()
