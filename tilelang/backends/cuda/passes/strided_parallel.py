"""``T.Parallel`` nests with a run-time extent (CUDA): a strided loop over the threads.

Upstream TileLang runs ``for i in T.Parallel(n)`` with ``n`` known only at run time as
``for it in range(ceildiv(n, threads)): i = it * threads + t; if i < n: body``. Such a
nest has no Fragment (its iteration count is not static), so:

- :func:`is_strided_nest` tells layout inference and ``lower_parallel`` which nests take
  this path: some level's extent is not a constant, or it does not start at 0;
- :func:`check_strided_nest` refuses fragment stores in its body (each iteration runs on
  one thread, so a fragment element written there would differ between the threads'
  copies), inner ``T.Parallel`` loops and block-wide tile ops; fragment reads at thread-dependent indices of a non-replicated fragment are
  left to the serial-code checks (``loop_fragment_access.check_serial_accesses``), which
  see the body as code every thread may run;
- :func:`lower_strided_nest` builds the loop: the levels flattened into one iteration
  index (the last level fastest), each thread taking iterations ``t, t + threads, ...``.
"""

from __future__ import annotations

from tvm_tirx import ir

from .... import errors
from ....layout import expr as E
from ....lowering.thread_utils import for_, is_fragment

#: Tile ops one thread runs on its own (an element atomic): allowed in a strided nest.
_PER_THREAD_OPS = ("atomic", "atomic_prev", "atomic_or")


def _is_parallel(s) -> bool:
    return isinstance(s, ir.For) and s.annotations is not None and "tl.parallel" in s.annotations


def _levels(stmt):
    """``([For], body)`` of the perfectly nested ``T.Parallel`` levels from ``stmt``."""
    levels, s = [], stmt
    while _is_parallel(s):
        levels.append(s)
        s = s.body
        while isinstance(s, ir.SeqStmt) and len(s.seq) == 1:
            s = s.seq[0]
    return levels, s


def is_strided_nest(stmt) -> bool:
    """Whether the ``T.Parallel`` nest at ``stmt`` has a level with a run-time extent or a
    non-zero start (lowered by :func:`lower_strided_nest`)."""
    if not _is_parallel(stmt):
        return False
    levels, _ = _levels(stmt)
    return any(E.as_const_int(f.begin) != 0 or E.as_const_int(f.end) is None for f in levels)


def check_strided_nest(stmt, loc=None) -> None:
    """Raise a CompileError when the strided nest at ``stmt`` writes a fragment, holds
    another ``T.Parallel`` loop or a tile op (each iteration runs on one thread)."""
    from ....ops import tile_op_of

    levels, body = _levels(stmt)
    inner = [f for f in E.collect(body, ir.For) if _is_parallel(f)]
    ops = [
        found
        for x in E.collect(body, ir.Evaluate)
        if (found := tile_op_of(x)) is not None and found[0].name not in _PER_THREAD_OPS
    ]
    if inner or ops:
        what = "a T.Parallel loop" if inner else f"T.{ops[0][0].name}"
        raise errors.compile_error(
            f"{what} inside a T.Parallel loop with a run-time extent ({levels[0].var.name} in "
            f"{levels[0].begin}..{levels[0].end}): each of its iterations runs on one thread, "
            "but this work is block-wide; write the element accesses in the loop itself",
            (ops[0][1].loc if ops else None) or (loc if loc is not None else levels[0].loc),
        )
    stores = E.collect(body, ir.TensorStore)
    written = [x.dest for x in stores if is_fragment(x.dest)]
    if written:
        names = sorted({t.name for t in written})
        raise errors.compile_error(
            f"T.Parallel with a run-time extent ({levels[0].var.name} in "
            f"{levels[0].begin}..{levels[0].end}) writes the fragment {', '.join(names)}: "
            "its iterations are spread over the threads without a layout, so each "
            "thread's copy would hold other values; write a shared or global tile, or "
            "bound the extent by a constant (T.Parallel(T.min(n, 256)) with a guard)",
            loc if loc is not None else levels[0].loc,
        )


def lower_strided_nest(stmt, ctx, thread_var, threads: int, lower_body, name: str):
    """``for it in range(ceildiv(total, threads))``: iteration ``it * threads + t`` of the
    flattened nest when below ``total`` (the module docstring). ``lower_body(body, ctx)``
    lowers the loop body once the nest variables are substituted."""
    from ....lowering.stmt import substitute

    levels, body = _levels(stmt)
    extents = [f.end - f.begin for f in levels]
    total = extents[0]
    for e in extents[1:]:
        total = total * e
    it = ir.Var(f"{name}_it", "int32")
    iters = (total + (threads - 1)) // threads
    flat = it * threads + thread_var
    values, q = [], flat
    for k, (f, e) in enumerate(zip(reversed(levels), reversed(extents))):
        values.append(f.begin + (q if k == len(levels) - 1 else q % e))
        q = q // e
    values.reverse()
    inner = ctx.with_range(it, 0, iters)
    # the body is lowered with the nest variables in their ranges (bounds checks are then
    # provable), and they are replaced by the flattened index afterwards
    in_nest = inner
    for f, e in zip(levels, extents):
        in_nest = in_nest.with_range(f.var, f.begin, e)
    lowered = lower_body(body, in_nest)
    mapped = substitute(lowered, {f.var: inner.simplify(v) for f, v in zip(levels, values)})
    guarded = ir.If(flat < total, mapped, None)
    return for_(it, iters, guarded, loc=stmt.loc)
