"""``T.atomic_addx2`` / ``T.atomic_addx4``: atomic adds of 2 / 4 consecutive elements.

Upstream TileLang's forms, all accepted here::

    T.atomic_addx2(C[m, n], C_shared[i, j])   # element starts: C[m, n:n+2] += C_shared[i, j:j+2]
    T.atomic_addx2(Dst, Val)                  # whole tensors of 2 elements
    T.atomic_addx4(C[m, n:n + 4], V[k, 0:4])  # slices of 4 along the last axis

The ``N`` elements lie along the last axis. Each element is added atomically (the meaning of
upstream's vector atomic, whose lanes are independent atomic adds): the op becomes ``N``
element ``T.atomic_add`` calls, which every backend lowers (CPU: serial adds; CUDA:
``atomicAdd`` per element -- correct, though not the single ``red.v2`` instruction).

``return_prev=True`` (upstream: a ``float32x2``/``float16x2``... value) returns the ``N``
previous values as a :class:`builder.LaneValues`; ``Prev[i:i + N] = T.atomic_addx2(...,
return_prev=True)`` stores them, ``prev[k]`` is lane ``k``. CUDA does the group as one
atomic where the hardware has one (sm_90+ ``float2``/``float4`` ``atomicAdd`` on aligned
global memory; ``half2``/``bfloat162`` pairs), else lane by lane (each lane atomic, the
group not): ``ops/atomic/prev.py``.
"""

from __future__ import annotations

from tvm_tirx import ir

from .. import errors
from ..lowering.region import is_tensor, region_extents
from . import builder
from .tileop import atomic_add


def _const(x):
    return int(x.value) if isinstance(x, ir.IntImm) else x if isinstance(x, int) else None


def _elements(x, n: int, name: str, what: str):
    """The ``n`` element loads ``x`` names (an element start, a slice or a tensor)."""
    x = builder.unwrap(x)
    if isinstance(x, ir.TensorLoad):
        tensor, begins = x.source, list(x.indices)
    elif isinstance(x, ir.TensorRegion) or is_tensor(x):
        extents = [_const(e) for e in region_extents(x)]
        if None in extents:
            raise errors.TraceError(f"T.{name}: {what} must have static extents, got {x}")
        size = 1
        for e in extents:
            size *= e
        if size != n or (extents and extents[-1] != n):
            raise errors.TraceError(
                f"T.{name}: {what} must hold {n} consecutive elements along its last axis, "
                f"got extents {extents}"
            )
        if isinstance(x, ir.TensorRegion):
            tensor, begins = x.source, [r.begin for r in x.region]
        else:
            tensor, begins = x, [0] * len(extents)
    else:
        raise errors.TraceError(
            f"T.{name}: {what} must be a tensor element (the first of {n}), a slice or a "
            f"tensor of {n} elements, got {type(x).__name__} {x!r}"
        )
    if not begins:
        raise errors.TraceError(f"T.{name}: {what} must have at least one axis")
    last = begins[-1]
    return [ir.TensorLoad(tensor, [*begins[:-1], last + k if k else last]) for k in range(n)]


def _atomic_add_n(n, dst, value, return_prev, memory_order=None):
    name = f"atomic_addx{n}"
    builder.state()
    dsts = _elements(dst, n, name, "dst")
    values = _elements(value, n, name, "value")
    dt = str(dsts[0].source.ty.dtype)
    if dt not in ("float16", "bfloat16", "float32"):
        raise errors.TraceError(
            f"T.{name}: dst must be float16, bfloat16 or float32 (upstream's vector atomics), "
            f"got {dt}"
        )
    if return_prev:
        return _addx_prev(name, n, dsts, values, dt)
    for d, v in zip(dsts, values):
        atomic_add(d, v, memory_order)
    return None


def _addx_prev(name, n, dsts, values, dtype):
    """``return_prev=True``: one ``tl.atomic_prev`` op of ``n`` lanes (ops/atomic/prev.py);
    the old values as :class:`builder.LaneValues` (store them with ``Prev[i:i + n] = ...``)."""
    from ..lowering.region import to_region
    from ..ops.atomic import prev as _prev
    from . import allocate
    from .tileop import _emit

    st = builder.state()
    st.uses_atomics = True
    cell = allocate.alloc_local((n,), dtype)
    call = _prev.ATOMIC_PREV.make(
        to_region(dsts[0], what=f"T.{name} dst"),
        to_region(values[0], what=f"T.{name} value"),
        to_region(ir.TensorLoad(cell, [ir.const(0, "int32")]), what="prev"),
        loc=builder.user_loc(),
        kind="add",
        lanes=n,
    )
    _emit(call)
    lanes = [ir.TensorLoad(cell, [ir.const(k, "int32")]) for k in range(n)]
    return builder.LaneValues(lanes, cell)


def atomic_addx2(dst, value, return_prev=False):
    """Atomically add 2 consecutive elements of ``value`` to those of ``dst`` (last axis);
    ``return_prev=True`` returns their 2 previous values (``Prev[0:2] = ...``)."""
    return _atomic_add_n(2, dst, value, return_prev)


def atomic_addx4(dst, value, return_prev=False):
    """Atomically add 4 consecutive elements of ``value`` to those of ``dst`` (last axis);
    ``return_prev=True`` returns their 4 previous values (``Prev[0:4] = ...``)."""
    return _atomic_add_n(4, dst, value, return_prev)


# ---- T.atomic_load / T.atomic_store -----------------------------------------------------------
#: memory-order name -> C++ ``std::memory_order`` number (as CUDA's ``__NV_ATOMIC_*``)
LOAD_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "seq_cst": 5}
STORE_ORDERS = {"relaxed": 0, "release": 3, "seq_cst": 5}
#: element types with a 32/64-bit atomic load/store
ATOMIC_MEM_DTYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")


def _element(x, name: str, what: str):
    x = builder.unwrap(x)
    if is_tensor(x):
        shape = [_const(e) for e in x.ty.shape]
        if shape != [1] * len(shape):
            raise errors.TraceError(
                f"T.{name}: {what} must be one element (A[i]) or a 1-element tensor, got a "
                f"tensor of shape {shape}"
            )
        x = ir.TensorLoad(x, [ir.const(0, "int32")] * len(shape))
    if not isinstance(x, ir.TensorLoad):
        raise errors.TraceError(
            f"T.{name}: {what} must be a tensor element such as A[i], got {type(x).__name__}"
        )
    dt = str(x.source.ty.dtype)
    if dt not in ATOMIC_MEM_DTYPES:
        raise errors.TraceError(
            f"T.{name}: {what} has element type {dt}; atomic loads/stores take "
            f"{', '.join(ATOMIC_MEM_DTYPES)}"
        )
    return x


def _order(memory_order, table, name):
    if memory_order not in table:
        raise errors.TraceError(
            f"T.{name}: memory_order must be one of {list(table)}, got {memory_order!r}"
        )
    return ir.const(table[memory_order], "int32")


def atomic_load(src, memory_order="seq_cst"):
    """The value of the element ``src`` read atomically with ``memory_order`` (``relaxed``,
    ``consume``, ``acquire`` or ``seq_cst``)."""
    from tvm_tirx import tirx as _tirx

    from ..lowering.atomic_mem import ATOMIC_LOAD

    builder.state()
    load = _element(src, "atomic_load", "src")
    order = _order(memory_order, LOAD_ORDERS, "atomic_load")
    dt = str(load.source.ty.dtype)
    return _tirx.call_extern(ATOMIC_LOAD, _tirx.address_of(load), order, ty=dt)


def atomic_store(dst, src, memory_order="seq_cst"):
    """Atomically write ``src`` to the element ``dst`` with ``memory_order`` (``relaxed``,
    ``release`` or ``seq_cst``)."""
    from tvm_tirx import tirx as _tirx
    from tvm_tirx.script import tirx as _T

    from .. import dtypes
    from ..lowering.atomic_mem import ATOMIC_STORE

    builder.state()
    load = _element(dst, "atomic_store", "dst")
    order = _order(memory_order, STORE_ORDERS, "atomic_store")
    value = builder.unwrap(src)
    if not (isinstance(value, int | float) or builder.is_expr(value)):
        raise errors.TraceError(f"T.atomic_store: src must be a scalar value, got {value!r}")
    value = dtypes.convert(value, str(load.source.ty.dtype))
    call = _tirx.call_extern(ATOMIC_STORE, _tirx.address_of(load), value, order, ty="void")
    _T.emit_(ir.Evaluate(call, loc=builder.user_loc()))
