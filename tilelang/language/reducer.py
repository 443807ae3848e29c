"""Reducers: ``T.alloc_reducer``, ``T.reducer_init``, ``T.reducer_update``, ``T.finalize_reducer``.

Upstream TileLang's deferred-reduction epoch::

    acc = T.alloc_reducer((M,), "float32", op="sum")
    T.reducer_init(acc)                      # or T.reducer_init(acc, init_value)
    for i, k in T.Parallel(M, K):
        T.reducer_update(acc[i], A[i, k])    # every logical iteration contributes once
    out = T.alloc_fragment((M,), "float32")
    T.finalize_reducer(acc, out)             # out[i] = init (+) all contributions to acc[i]

Here a reducer is a block-shared tile: ``reducer_init`` fills it with the combine's identity
and captures ``init`` (evaluated once, at the init site) in a per-thread cell; each
``reducer_update`` is an atomic combine into the shared element (``T.atomic_add`` /
``atomic_max`` / ``atomic_min``), so each contribution is combined exactly once whatever the
thread mapping; ``finalize_reducer`` waits for the block and writes ``acc (+) init`` into
``dst``. Correct on every backend with shared-memory atomics (CPU, CUDA); not upstream's
register-level plan, so slower on a GPU. ``sum``, ``max`` and ``min`` are supported; the
bitwise combines raise an error naming the op (no shared-memory atomic for them here).
Reading or writing the reducer other than through these calls is the user's error upstream;
it is not checked here.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import dtypes, errors
from . import allocate, builder
from .loops import Parallel
from .misc import sync_threads
from .tileop import atomic_add, atomic_max, atomic_min, fill

_OPS = ("sum", "max", "min", "bitand", "bitor", "bitxor")
_ATOMIC = {"sum": atomic_add, "max": atomic_max, "min": atomic_min}


def _reducers():
    st = builder.state()
    table = getattr(st, "reducers", None)
    if table is None:
        table = st.reducers = []
    return table


def _info(acc, name: str):
    acc = builder.unwrap(acc)
    if isinstance(acc, ir.TensorLoad):
        acc = acc.source
    for var, info in _reducers():
        if var.same_as(acc):
            return info
    raise errors.TraceError(f"T.{name}: expected a reducer from T.alloc_reducer, got {acc!r}")


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A reducer of logical ``shape`` combining with ``op`` (module docstring)."""
    if op not in _OPS:
        raise errors.TraceError(f"T.alloc_reducer: op must be one of {list(_OPS)}, got {op!r}")
    dtype = dtypes.canonical(dtype)
    if op.startswith("bit") and not dtype.startswith(("int", "uint", "bool")):
        raise errors.TraceError(
            f"T.alloc_reducer: bitwise reducer op {op!r} requires an integer dtype, got {dtype}"
        )
    if op not in _ATOMIC:
        raise errors.TraceError(f"T.alloc_reducer: op {op!r} is not supported yet (sum/max/min)")
    if replication is not None:
        raise errors.TraceError(
            "T.alloc_reducer: replication= (upstream's deprecated v1 reducer) is not supported; "
            "use T.reducer_init / T.reducer_update / T.finalize_reducer(acc, dst)"
        )
    acc = allocate.alloc_shared(shape, dtype)
    _reducers().append((acc, {"op": op, "dtype": dtype, "init": None, "open": False}))
    return acc


def _identity(op, dtype):
    if op == "sum":
        return ir.const(0, dtype) if not dtypes.is_float(dtype) else ir.const(0.0, dtype)
    if op == "max":
        return _tirx.min_value(ty=dtype)
    return _tirx.max_value(ty=dtype)


def reducer_init(reducer, init=None):
    """Open the reducer's epoch: start from the identity, plus ``init`` once per output."""
    info = _info(reducer, "reducer_init")
    fill(reducer, _identity(info["op"], info["dtype"]))
    info["init"] = None
    if init is not None:
        cell = allocate.alloc_local((1,), info["dtype"])
        builder.store(cell, [0], init)
        info["init"] = cell
    info["open"] = True
    sync_threads()


def reducer_update(target, value):
    """Combine ``value`` into the reducer element ``target`` (``acc[indices]``)."""
    target = builder.unwrap(target)
    if not isinstance(target, ir.TensorLoad):
        raise errors.TraceError(
            f"T.reducer_update expects acc[indices] as its first argument, got "
            f"{type(target).__name__}"
        )
    info = _info(target, "reducer_update")
    if not info["open"]:
        raise errors.TraceError("T.reducer_update before T.reducer_init of this reducer")
    _ATOMIC[info["op"]](target, dtypes.convert(builder.unwrap(value), info["dtype"]))


def finalize_reducer(reducer, dst=None, batch=1, annotations=None):
    """Close the epoch: ``dst`` receives each output's combined value (module docstring)."""
    if batch < 1:
        raise errors.TraceError(f"T.finalize_reducer: batch must be >= 1, got {batch}")
    info = _info(reducer, "finalize_reducer")
    if dst is None:
        raise errors.TraceError(
            "T.finalize_reducer(acc) without dst is upstream's deprecated in-place form; "
            "pass a destination fragment: T.finalize_reducer(acc, dst)"
        )
    if not info["open"]:
        raise errors.TraceError("T.finalize_reducer before T.reducer_init of this reducer")
    acc = builder.unwrap(reducer)
    dst = builder.unwrap(dst)
    if [str(s) for s in acc.ty.shape] != [str(s) for s in dst.ty.shape]:
        raise errors.TraceError(
            f"T.finalize_reducer: dst has shape {list(dst.ty.shape)}, the reducer "
            f"{list(acc.ty.shape)}"
        )
    if str(dst.ty.dtype) != info["dtype"]:
        raise errors.TraceError(
            f"T.finalize_reducer: dst has dtype {dst.ty.dtype}, the reducer {info['dtype']}"
        )
    sync_threads()
    cell, op = info["init"], info["op"]
    rank = len(acc.ty.shape)
    names = ", ".join(f"r{k}" for k in range(rank))
    for idx in builder.for_(Parallel(*list(acc.ty.shape)), f"({names})"):
        idx = list(idx) if isinstance(idx, tuple | list) else [idx]
        value = ir.TensorLoad(acc, idx)
        if cell is not None:
            seed = ir.TensorLoad(cell, [ir.const(0, "int32")])
            value = {"sum": lambda a, b: a + b, "max": _tirx.max, "min": _tirx.min}[op](value, seed)
        builder.store(dst, idx, value)
    info["open"] = False
    sync_threads()
