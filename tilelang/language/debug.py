"""``T.print`` and ``T.device_assert``: debugging from inside a kernel (upstream names).

Each records one tile op (``tl.print``/``tl.device_assert``, see ``tilelang/ops/debug.py``
for the output format and the per-target lowering), tagged with the user's line.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from ..lowering.region import is_tensor, to_region
from ..ops.debug import op as _debug
from . import builder


def _emit(call: ir.Call) -> None:
    _T.emit_(ir.Evaluate(call, loc=call.loc))


def _scalar(value, what: str):
    if isinstance(value, bool):
        return ir.const(value, "bool")
    if isinstance(value, int):
        return dtypes.convert(value, "int64" if abs(value) >= 2**31 else "int32")
    if isinstance(value, float):
        return dtypes.convert(value, "float64")
    if isinstance(value, ir.Expr) and ir.is_prim_expr(value):
        return value
    raise errors.TraceError(
        f"{what} must be a tensor, a tile slice or a scalar expression, got {value!r}"
    )


def print(obj, msg: str = "", warp_group_id: int = 0, warp_id: int = 0):
    """Print a scalar, a tensor or a tile slice from the kernel (each block prints).

    ``T.print(x, msg="x")`` prints ``x: <value>``; ``T.print(A_shared, msg="A")`` prints
    one line ``A: A_shared[i, j] = <value>`` per element. ``warp_group_id``/``warp_id``
    choose the printing warp on GPUs.
    """
    builder.state()
    if not isinstance(msg, str):
        raise errors.TraceError(f"T.print msg must be a str, got {type(msg).__name__}")
    value = builder.unwrap(obj)
    if is_tensor(value) or isinstance(value, ir.TensorRegion):
        operand = to_region(value, what="T.print obj")
    else:
        operand = _scalar(value, "T.print obj")
    _emit(
        _debug.PRINT.make(
            operand,
            loc=builder.user_loc(),
            msg=msg,
            warp_group_id=int(warp_group_id),
            warp_id=int(warp_id),
        )
    )


def device_assert(condition, msg: str = ""):
    """Check ``condition`` while the kernel runs; a failure raises with ``msg`` and the line.

    On the CPU the kernel call raises ``tilelang.ops.debug.DeviceAssertError`` (an
    ``AssertionError``). A condition that is a Python bool is checked now: ``True``
    records nothing.
    """
    builder.state()
    if not isinstance(msg, str):
        raise errors.TraceError(f"T.device_assert msg must be a str, got {type(msg).__name__}")
    cond = builder.unwrap(condition)
    if isinstance(cond, bool) and cond:
        return
    cond = _scalar(cond, "T.device_assert condition")
    _emit(_debug.DEVICE_ASSERT.make(cond, loc=builder.user_loc(), msg=msg))
