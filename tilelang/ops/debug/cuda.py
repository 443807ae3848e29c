"""CUDA lowering of ``T.print`` and ``T.device_assert`` (device ``printf``, then ``__trap``).

Every line starts with the block and the thread that prints it, then the CPU backend's
format (``tilelang/ops/debug.py``)::

    [block (bx, by, bz), thread t] <msg>: <value>
    [block (bx, by, bz), thread t] <msg>: <name>[i, j] = <value>

Who prints, in every block:

- a scalar: one thread, the first of the chosen warp (``warp_group_id * 128 + warp_id *
  32``, upstream's option names); when the value uses ``threadIdx`` directly, every
  thread prints its own value;
- a shared or global tile: that one thread, element by element (global elements outside
  the tensor are skipped);
- a fragment: each element by the thread that holds it (replica 0), with its logical
  index in the fragment;
- a ``local`` tensor: every thread, its own elements.

Floats print with 8 significant digits (``%.8g`` of the value as a double; fp16/bf16
go through float), integers exactly (``%d``/``%u``, ``%lld``/``%llu`` for 64-bit ones),
booleans as 0/1: the CPU backend's lines after the prefix.
Device printf output is buffered on the GPU and appears when the host synchronizes.

``T.device_assert(cond, msg)``: every thread that reaches it checks ``cond``; a thread
where it is false prints ``<file>:<line>: T.device_assert failed: <msg> [block (bx, by,
bz), thread t]`` (when ``cond`` does not use ``threadIdx``, only the first thread of each
warp prints: it fails everywhere) and executes ``__trap()``. The trap aborts the kernel: the launch (or
the next synchronizing CUDA call) fails with an "unspecified launch failure" and, as
after any device-side assert, the process's CUDA context cannot be used again.
"""

from __future__ import annotations

from tvm_tirx import ir, tirx

from ... import errors
from ...lowering import irb
from ...lowering.bounds import in_bounds
from ...lowering.fragments import within_owners
from ...lowering.region import RegionView
from ...lowering.stmt import uses_any
from ...lowering.thread_utils import (
    extern_stmt,
    for_,
    fragment_points,
    is_fragment,
    is_global,
    is_shared,
)
from ..registry import lower_rule
from .op import _fmt_text, assert_message

WARP, WARP_GROUP = 32, 128
_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
WHERE = "[block (%d, %d, %d), thread %d]"


def _where_args(ctx) -> list:
    """printf arguments of :data:`WHERE`: the block index (0 for absent axes), the thread."""
    launches = getattr(ctx, "launches", {}) or {}
    out = []
    for tag in _BLOCK_TAGS:
        var = launches.get(tag)
        out.append(ir.const(0, "int32") if var is None else var.astype("int32"))
    return out + [ctx.thread_var.astype("int32")]


def c_string(text: str) -> str:
    """``text`` escaped for a C string literal (TIRx's CUDA codegen pastes strings as is)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return out.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


def _printf(fmt: str, args) -> ir.Evaluate:
    args = [c_string(a) if isinstance(a, str) else a for a in args]
    return extern_stmt("printf", c_string(fmt), *args, ty="int32")


def _conversion(dtype: str, value, what: str, loc):
    """(printf conversion, argument) for a value of ``dtype``."""
    if dtype.startswith(("float", "bfloat")):
        if dtype not in ("float32", "float64"):
            value = value.astype("float32")
        return "%.8g", value.astype("float64")
    # TIRx narrows int64 casts of 32-bit values back to int32 (NarrowDataType), so 32-bit
    # integers print as int and only real 64-bit values go through %lld.
    if dtype in ("uint64",):
        return "%llu", value
    if dtype == "int64":
        return "%lld", value
    if dtype.startswith("uint"):
        return "%u", value.astype("uint32")
    if dtype.startswith("int") or dtype == "bool":
        return "%d", value.astype("int32")
    raise errors.compile_error(f"T.print cannot print values of type {dtype} ({what})", loc)


def _printer(v, ctx):
    """The thread that prints block-level values: the first of the chosen warp."""
    thread = int(v.warp_group_id) * WARP_GROUP + int(v.warp_id) * WARP
    if not 0 <= thread < ctx.threads:
        raise errors.compile_error(
            f"T.print: warp_group_id={v.warp_group_id}, warp_id={v.warp_id} selects thread "
            f"{thread}, but the block has {ctx.threads} threads",
            v.loc,
        )
    return thread


def _element_line(prefix: str, view, index, value, loc):
    """printf of ``<prefix><name>[i, j] = <value>`` for one element."""
    conv, arg = _conversion(view.dtype, value, view.name, loc)
    fmt = prefix + _fmt_text(view.name) + "[" + ", ".join(["%d"] * len(index)) + "] = "
    return fmt + conv + "\n", [i.astype("int32") for i in index] + [arg]


def _print_fragment(prefix, view, ctx, loc):
    """Each thread prints the region's elements it holds (replica 0 of each)."""
    layout, local = ctx.get_layout(view.tensor), ctx.local_of(view.tensor)
    slot = ir.Var("pf", "int32")
    n = layout.get_local_size()
    inner = ctx.with_range(slot, 0, n)
    points = [inner.simplify(p) for p in fragment_points(layout, slot, ctx.thread_var)]
    index, replica = points[:-1], points[-1]
    fmt, args = _element_line(prefix, view, index, ir.TensorLoad(local, [slot]), loc)
    body = _printf(fmt, _where_args(ctx) + args)
    conds = []
    for i, begin, extent in zip(index, view.begins, view.extents):
        for cond in (i >= begin, i < begin + extent):
            if not inner.prove(cond):
                conds.append(cond)
    if layout.get_replicate() > 1:
        conds.append(replica == 0)
    if conds:
        body = ir.If(tirx.all(*conds) if len(conds) > 1 else conds[0], body, None)
    body = within_owners(body, layout, ctx, "T.print of a fragment", loc)
    return for_(slot, n, body, loc=loc)


def _print_tile(prefix, view, ctx, loc):
    """Every element of the region, one line each, in the printing thread(s)."""
    rank = len(view.extents)

    def body(vars_):
        index = view.index(dict(zip(range(rank), vars_)))
        fmt, args = _element_line(prefix, view, index, ir.TensorLoad(view.tensor, index), loc)
        stmt = _printf(fmt, _where_args(ctx) + args)
        ranges = {var: (0, e) for var, e in zip(vars_, view.extents)}
        pred = in_bounds(view.tensor, index, ctx, ranges)
        return stmt if pred is None else ir.If(pred, stmt, None)

    return irb.loop_nest(view.extents, body, names=[f"p{k}" for k in range(rank)], loc=loc)


@lower_rule("print", "cuda")
def lower_print_cuda(v, ctx):
    """Device ``printf`` of a scalar or a tile (see the module docstring)."""
    prefix = WHERE + " " + (f"{_fmt_text(v.msg)}: " if v.msg else "")
    t = ctx.thread_var
    if isinstance(v.value, ir.TensorRegion):
        view = RegionView.of(v.value)
        if is_fragment(view.tensor):
            return _print_fragment(prefix, view, ctx, v.loc)
        stmt = _print_tile(prefix, view, ctx, v.loc)
        if is_shared(view.tensor) or is_global(view.tensor):
            stmt = ir.If(t == _printer(v, ctx), stmt, None)
        return stmt
    conv, arg = _conversion(str(v.value.ty), v.value, "T.print obj", v.loc)
    stmt = _printf(prefix + conv + "\n", _where_args(ctx) + [arg])
    if uses_any(v.value, [t]):
        return stmt
    return ir.If(t == _printer(v, ctx), stmt, None)


@lower_rule("device_assert", "cuda")
def lower_device_assert_cuda(v, ctx):
    """``if (!cond) { printf(<file:line: msg> [block, thread]); __trap(); }``."""
    cond = v.cond if str(v.cond.ty) == "bool" else v.cond != ir.const(0, str(v.cond.ty))
    text = assert_message(v.msg, v.loc)
    report = _printf("%s " + WHERE + "\n", [text] + _where_args(ctx))
    if not uses_any(cond, [ctx.thread_var]):  # fails in every thread: one line per warp
        report = ir.If(ctx.thread_var % WARP == 0, report, None)
    trap = extern_stmt("__trap")
    return ir.If(ir.prim.expr.Not(cond), ir.SeqStmt([report, trap]), None, v.loc)
