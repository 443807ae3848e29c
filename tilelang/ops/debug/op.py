"""``T.print`` and ``T.device_assert``: printing and checking from inside a kernel.

IR: ``tl.print(value)`` where ``value`` is a scalar expression or a tensor region,
options ``msg``, ``warp_group_id``, ``warp_id`` (which GPU threads print; the CPU has one
thread per block); ``tl.device_assert(cond)`` with option ``msg``.

Output (one line per scalar, one line per element of a tile, written to stdout)::

    <msg>: <value>                   T.print(x, msg="x")
    <msg>: <name>[i, j] = <value>    T.print(A_shared, msg="A") -- i, j index the tensor

(``<msg>: `` is left out when ``msg`` is empty.) Floats print with 8 significant digits,
integers exactly, booleans as 0/1. Every block runs the print, so a kernel of 4 blocks
prints 4 copies, in the order the blocks happen to run.

CPU lowering: ``dprintf(1, ...)`` writes straight to file descriptor 1 (no C stdio buffer
to flush). TIRx declares extern calls with fixed argument types, so floats never go
through varargs (on x86-64 the callee would not read them): ``strfromd`` formats them
into a 32-byte stack buffer first and ``dprintf`` gets the string. A failed
``device_assert`` raises :class:`DeviceAssertError` from the kernel call with the user's
``file:line`` and message (a TIRx ``AssertStmt``). An assertion failing inside a
parallel task would be lost, so a kernel that uses ``device_assert`` runs its blocks one
after another on the CPU (:func:`uses_device_assert` tells the pipeline). Both ops are
block-level on the CPU: a value or condition that depends on ``threadIdx`` is rejected
(CompileError naming the line). CUDA: ``debug_cuda.py`` (device ``printf`` with the block
and thread of each line, ``__trap`` after a failed assertion).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, tirx
from tvm_tirx.tirx.tensor import TensorType

from ... import errors
from ...lowering import irb
from ...lowering.bounds import in_bounds
from ...lowering.region import RegionView
from ...lowering.thread_utils import extern_stmt
from ..registry import TileOpDef, lower_rule, tile_op_of

PRINT = TileOpDef("print", ("value",), {"msg": "", "warp_group_id": 0, "warp_id": 0})
DEVICE_ASSERT = TileOpDef("device_assert", ("cond",), {"msg": ""})

ASSERT_KIND = "TileLangDeviceAssert"
_FLOAT_BUF = 32  # bytes of the strfromd buffer


class DeviceAssertError(errors.TileLangError, AssertionError):
    """A ``T.device_assert`` failed while the kernel ran (message names the user's line)."""


tvm_ffi.register_error(ASSERT_KIND, DeviceAssertError)


def assert_message(msg: str, loc) -> str:
    """The text of a failed assertion: ``file:line: T.device_assert failed: msg``."""
    where = errors.where(loc)
    text = "T.device_assert failed" + (f": {msg}" if msg else "")
    return f"{where}: {text}" if where else text


def uses_device_assert(body) -> bool:
    """Whether ``body`` holds a ``T.device_assert`` (the CPU then runs blocks serially)."""
    hit = []

    def visit(node):
        found = tile_op_of(node)
        if found is not None and found[0] is DEVICE_ASSERT:
            hit.append(node)

    tvm_ffi.structural_walk(body, visit)
    return bool(hit)


# --------------------------------------------------------------------------- CPU


def _fmt_text(text: str) -> str:
    return str(text).replace("%", "%%")


def _value_format(dtype: str, value):
    """(printf conversion, argument, statements to run first) for a scalar of ``dtype``."""
    if dtype.startswith(("float", "bfloat")):
        buf = ir.Var("print_buf", TensorType([_FLOAT_BUF], "int8", scope="local"))
        ptr = tirx.address_of(ir.TensorLoad(buf, [ir.const(0, "int32")]))
        alloc = ir.Bind(buf, ir.Call("tirx.alloc_tensor", [], ty_args=[buf.ty], ty=buf.ty))
        fmt = extern_stmt(
            "strfromd",
            ptr,
            ir.const(_FLOAT_BUF, "int64"),
            "%.8g",
            value.astype("float64"),
            ty="int32",
        )
        return "%s", ptr, [alloc, fmt]
    if dtype.startswith("uint"):
        return "%llu", value.astype("uint64"), []
    if dtype.startswith("int") or dtype == "bool":
        return "%lld", value.astype("int64"), []
    raise errors.CompileError(f"T.print cannot print values of type {dtype}")


def _print_scalar(prefix: str, value, loc):
    try:
        conv, arg, pre = _value_format(str(value.ty), value)
    except errors.CompileError as err:
        raise errors.compile_error(str(err), loc) from None
    return irb.seq(
        pre + [extern_stmt("dprintf", ir.const(1, "int32"), prefix + conv + "\n", arg, ty="int32")]
    )


def _print_region(prefix: str, region, ctx, loc):
    view = RegionView.of(region)
    rank = len(view.extents)

    def body(vars_):
        index = view.index(dict(zip(range(rank), vars_)))
        value = ir.TensorLoad(view.tensor, index)
        try:
            conv, arg, pre = _value_format(view.dtype, value)
        except errors.CompileError as err:
            raise errors.compile_error(f"{err} ({view.name})", loc) from None
        fmt = prefix + _fmt_text(view.name) + "[" + ", ".join(["%lld"] * rank) + "] = "
        call = extern_stmt(
            "dprintf",
            ir.const(1, "int32"),
            fmt + conv + "\n",
            *[i.astype("int64") for i in index],
            arg,
            ty="int32",
        )
        stmt = irb.seq(pre + [call])
        pred = in_bounds(view.tensor, index, ctx, {v: (0, e) for v, e in zip(vars_, view.extents)})
        return stmt if pred is None else ir.If(pred, stmt, None)

    return irb.loop_nest(view.extents, body, names=[f"p{k}" for k in range(rank)], loc=loc)


@lower_rule("print", "cpu")
def lower_print_cpu(v, ctx):
    """One ``dprintf`` per scalar or per element (floats formatted by ``strfromd``)."""
    prefix = f"{_fmt_text(v.msg)}: " if v.msg else ""
    if isinstance(v.value, ir.TensorRegion):
        return _print_region(prefix, v.value, ctx, v.loc)
    return _print_scalar(prefix, v.value, v.loc)


@lower_rule("device_assert", "cpu")
def lower_device_assert_cpu(v, ctx):
    """A TIRx ``AssertStmt``: the kernel call raises :class:`DeviceAssertError`."""
    cond = v.cond if str(v.cond.ty) == "bool" else v.cond != ir.const(0, str(v.cond.ty))
    text = assert_message(v.msg, v.loc)
    return ir.AssertStmt(cond, ir.StringImm(ASSERT_KIND), [ir.StringImm(text)], loc=v.loc)
