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


def Parallel(  # noqa: N802 - upstream API
    *extents, coalesced_width=None, loop_layout=None, prefer_async=None, annotations=None
):
    """A loop nest whose iterations are independent: the compiler spreads it over threads.
    ``annotations`` (upstream: backend hints) ride on the loops. ``prefer_async``
    (upstream's request for cp.async on global->shared stores outside a pipelined loop)
    is a performance hint: tilelang copies synchronously there, which a following
    ``T.ptx_commit_group()`` / ``T.ptx_wait_group(n)`` leaves correct."""
    if not extents:
        raise errors.TraceError("T.Parallel needs at least one extent")
    if prefer_async is not None and not isinstance(prefer_async, bool):
        raise errors.TraceError(f"T.Parallel: prefer_async must be a bool, got {prefer_async!r}")
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


def Persistent(domain, wave_size, index, group_size=8):  # noqa: N802 - upstream API
    """The tiles of ``domain`` (a list of tile counts) visited by a persistent block.

    ``for bx, by in T.Persistent([m_tiles, n_tiles], wave_size, index)`` runs a serial
    loop over waves; in wave ``w`` the block handles tile ``w * wave_size + index`` of the
    tiles ordered in groups of ``group_size`` along the last axis (rasterization: the
    last coordinate is ``group * group_size + the tile's place in its group``, the other
    coordinates count through the domain within a group). Tiles past the domain's end
    are skipped; with two or more waves the loop stops at the first wave past the end.
    """
    domain = list(domain)
    if not domain:
        raise errors.TraceError("T.Persistent needs a non-empty domain (a list of tile counts)")
    return LoopSpec(
        [],
        "custom",
        {
            "enter": lambda stack, names: _persistent(
                stack, names, domain, wave_size, index, group_size
            )
        },
    )


def _persistent(stack, names, domain, wave_size, index, group_size):
    from tvm_tirx import ir
    from tvm_tirx import tirx as _tirx
    from tvm_tirx.script import tirx as _T

    from . import builder

    def ceildiv(a, b):
        if isinstance(a, int) and isinstance(b, int):
            return -(-a // b)
        return builder.unwrap(_tirx.ceildiv(_as_expr(a), _as_expr(b)))

    def _as_expr(x):
        return ir.const(x, "int32") if isinstance(x, int) else builder.unwrap(x)

    last = domain[-1]
    group = group_size if group_size is not None else 1
    if isinstance(group, int) and isinstance(last, int):
        group = max(1, min(group, last))
    else:
        group = builder.unwrap(_tirx.max(_as_expr(1), _tirx.min(_as_expr(group), _as_expr(last))))
    grouped = [ceildiv(last, group), *domain[:-1], group]
    padded = grouped[0]
    for extent in grouped[1:]:
        padded = padded * extent
    waves = ceildiv(padded, wave_size)
    w = builder.unwrap(stack.enter_context(_T.serial(0, waves)))
    tile = builder.unwrap(w * wave_size + index)
    if (builder.static_value(waves) or 0) >= 2:
        with builder._IRIf(builder.unwrap(_as_expr(padded) <= tile)), _T.then_():
            _T.break_()
    coords, rest = [None] * len(grouped), tile
    for axis in range(len(grouped) - 1, 0, -1):
        coords[axis] = builder.unwrap(rest % grouped[axis])
        rest = builder.unwrap(rest // grouped[axis])
    coords[0] = rest
    values = [*coords[1:-1], builder.unwrap(coords[0] * group + coords[-1])]
    vars_ = []
    for k, value in enumerate(values):
        name = names[k] if k < len(names) else f"v{k}"
        var = ir.Var(name, value.ty)
        _T.emit_(ir.Bind(var, value, loc=builder.user_loc()))
        vars_.append(var)
    stack.enter_context(builder._IRIf(builder.unwrap(vars_[-1] < _as_expr(last))))
    stack.enter_context(_T.then_())
    return vars_


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
