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

Upstream's deprecated v1 reducer, ``T.alloc_reducer(shape, dtype, op, replication="all"
| "none")``, is accepted too (:func:`_v1_store`)::

    acc = T.alloc_reducer((M,), "float32", op="sum", replication="all")
    T.clear(acc)                             # the combine's identity, by the user
    for i, k in T.Parallel(M, K):
        acc[i] += A[i, k]                    # max: acc[i] = T.max(acc[i], v)
    T.finalize_reducer(acc)                  # in place: acc[i] holds the result

The same block-shared tile holds it: each update written ``acc[idx] = acc[idx] (+) v`` is an
atomic combine of ``v`` (the replication choice only picks upstream's register plan, so both
values behave alike here), other stores are plain, and ``finalize_reducer(acc)`` waits for
the block. An update-shaped store that does not match the reducer's op (``+`` on a max
reducer), or that reads the reducer elsewhere, is a TraceError.
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
    if replication is not None and replication not in ("all", "none"):
        raise errors.TraceError(
            f"T.alloc_reducer: replication must be 'all' or 'none', got {replication!r}"
        )
    if op not in _ATOMIC:
        what = "the replication= (v1) reducer supports" if replication else "supported:"
        raise errors.TraceError(f"T.alloc_reducer: op {op!r} is not supported ({what} sum/max/min)")
    acc = allocate.alloc_shared(shape, dtype)
    info = {"op": op, "dtype": dtype, "init": None, "open": False, "v1": replication is not None}
    _reducers().append((acc, info))
    if info["v1"]:
        st = builder.state()
        hooks = getattr(st, "store_hooks", None)
        if hooks is None:
            hooks = st.store_hooks = {}
        hooks[acc.__chandle__()] = lambda indices, value: _v1_store(acc, info, indices, value)
    return acc


def _strip_cast(x):
    while isinstance(x, ir.prim.Cast):
        x = x.value
    return x


def _is_element(x, acc, indices) -> bool:
    x = _strip_cast(x)
    return (
        isinstance(x, ir.TensorLoad)
        and x.source.same_as(acc)
        and len(x.indices) == len(indices)
        and all(_tirx_equal(a, b) for a, b in zip(x.indices, indices))
    )


def _tirx_equal(a, b) -> bool:
    from ..layout import expr as E

    return E.same_expr(E.as_expr(a), E.as_expr(b))


def _reads(x, acc) -> bool:
    from ..lowering.stmt import uses_any

    return builder.is_expr(x) and uses_any(x, [acc])


_UPDATE = {"sum": "Add", "max": "Max", "min": "Min"}


def _v1_store(acc, info, indices, value):
    """``acc[indices] = value`` for a replication= reducer (module docstring)."""
    op = info["op"]
    x = _strip_cast(value) if builder.is_expr(value) else value
    kind = type(x).__name__ if builder.is_expr(x) else None
    if kind in _UPDATE.values():
        for mine, other in ((x.a, x.b), (x.b, x.a)):
            if _is_element(mine, acc, indices) and not _reads(other, acc):
                if kind != _UPDATE[op]:
                    raise errors.TraceError(
                        f"T.alloc_reducer(op={op!r}): {acc.name}[...] is updated with "
                        f"{kind.lower()}; a {op} reducer is updated as "
                        + ("acc[i] += v" if op == "sum" else f"acc[i] = T.{op}(acc[i], v)")
                    )
                target = ir.TensorLoad(acc, list(indices))
                _ATOMIC[op](target, dtypes.convert(other, info["dtype"]))
                return
    if _reads(value, acc):
        raise errors.TraceError(
            f"T.alloc_reducer(replication=...): a store into {acc.name} that reads it must be "
            f"an update of the same element: "
            + ("acc[i] += v" if op == "sum" else f"acc[i] = T.{op}(acc[i], v)")
        )
    builder.store(acc, indices, value)


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
    if info["v1"]:  # upstream's in-place v1 form: the atomics are done, wait for the block
        sync_threads()
        if dst is not None:
            _copy_out(builder.unwrap(reducer), builder.unwrap(dst), None, info["op"])
        return
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
    _copy_out(acc, dst, info["init"], info["op"])
    info["open"] = False


def _copy_out(acc, dst, cell, op):
    """``dst = acc (+) cell[0]`` elementwise (``cell``: the init value, or None), then a
    barrier (the reducer's next epoch overwrites ``acc``)."""
    rank = len(acc.ty.shape)
    names = ", ".join(f"r{k}" for k in range(rank))
    for idx in builder.for_(Parallel(*list(acc.ty.shape)), f"({names})"):
        idx = list(idx) if isinstance(idx, tuple | list) else [idx]
        value = ir.TensorLoad(acc, idx)
        if cell is not None:
            seed = ir.TensorLoad(cell, [ir.const(0, "int32")])
            value = {"sum": lambda a, b: a + b, "max": _tirx.max, "min": _tirx.min}[op](value, seed)
        builder.store(dst, idx, value)
    sync_threads()
