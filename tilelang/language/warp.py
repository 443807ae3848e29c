"""Warp- and block-level thread exchange: shuffles, votes, warp reductions, lane indices.

Upstream TileLang's names and signatures (``T.shfl_xor(value, delta, width=32, mask=...)``,
``T.warp_reduce_sum(value)``, ``T.any_sync(pred)``...). A warp is 32 consecutive threads of
the block in the linear order ``tx + ty * Dx + tz * Dx * Dy`` (CUDA's).

IR form: a ``call_extern`` of the CUDA intrinsic (``__shfl_xor_sync``, ``__ballot_sync``...)
or of a ``tl::`` helper of ``tl_templates/cuda/reduce.h`` / ``warp.h``, so the CUDA backend
prints it as written. The CPU backend, which runs a block's threads one after another, gives
each of them the same meaning through ``tilelang/backends/cpu/warp_ops.py`` (every thread's
operand is staged, the exchange runs once per block, every thread reads its result); it
reports ``T.<name> is not supported on cpu`` where that cannot be done (inside ``T.Parallel``,
under a condition or loop bound that depends on the thread index, in a ``while`` test).

Lane/warp indices (``T.get_lane_idx``...) and ``T.shuffle_elect`` are plain expressions of
the enclosing kernel's thread indices, the same on every backend.
"""

from __future__ import annotations

from tvm_ffi import Object
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from .. import dtypes, errors
from ..lowering.warp_intrinsics import (
    BLOCK_VOTES,
    FULL_MASK,
    SHUFFLES,
    SYNC_WARP,
    WARP_SIZE,
)
from . import builder


def _value(x, name: str):
    """``x`` as an IR expression (Python numbers become int32 / float32 constants)."""
    x = builder.unwrap(x)
    if isinstance(x, Object) and not isinstance(x, ir.Expr) and hasattr(x, "__tvm_ffi_object__"):
        x = x.__tvm_ffi_object__()
    if isinstance(x, bool):
        return ir.const(int(x), "int32")
    if isinstance(x, int):
        return ir.const(x, "int32")
    if isinstance(x, float):
        return ir.const(x, "float32")
    if builder.is_expr(x):
        return x
    raise errors.TraceError(f"T.{name}: expected a scalar value, got {type(x).__name__} {x!r}")


def _mask(mask, name: str):
    if isinstance(mask, int):
        if not 0 <= mask <= FULL_MASK:
            raise errors.TraceError(f"T.{name}: mask must fit in 32 bits, got {mask:#x}")
        return ir.const(mask, "uint32")
    return dtypes.convert(_value(mask, name), "uint32")


def _index(x, name: str, what: str):
    x = _value(x, name)
    if not str(x.ty).startswith(("int", "uint")):
        raise errors.TraceError(f"T.{name}: {what} must be an integer, got {x.ty}")
    return dtypes.convert(x, "int32")


def _width(width, name: str):
    if isinstance(width, int) and (width <= 0 or width > WARP_SIZE or width & (width - 1)):
        raise errors.TraceError(f"T.{name}: width must be a power of two in [1, 32], got {width}")
    return _index(width, name, "width")


def _predicate(pred, name: str):
    pred = _value(pred, name)
    if not str(pred.ty).startswith(("int", "uint", "bool")):
        raise errors.TraceError(
            f"T.{name} requires an integer or boolean predicate, but got {pred.ty}"
        )
    return dtypes.convert(pred, "int32")


def _shfl(cuda_name, value, lane_arg, width, mask):
    name = SHUFFLES[cuda_name]
    builder.state()
    value = _value(value, name)
    if str(value.ty) not in _SHUFFLE_TYPES:
        raise errors.TraceError(
            f"T.{name}: cannot shuffle a {value.ty} value (supported: {', '.join(_SHUFFLE_TYPES)})"
        )
    what = "srcLane" if cuda_name == "__shfl_sync" else "delta"
    return _tirx.call_extern(
        cuda_name,
        _mask(mask, name),
        value,
        _index(lane_arg, name, what),
        _width(width, name),
        ty=str(value.ty),
    )


_SHUFFLE_TYPES = (
    "int32", "uint32", "int64", "uint64", "float32", "float64", "float16", "bfloat16",
)  # fmt: skip


def shfl_xor(value, delta, width=WARP_SIZE, mask=FULL_MASK):
    """``value`` of lane ``lane ^ delta`` (``__shfl_xor_sync``); a lane whose partner lies in a
    later group of ``width`` lanes keeps its own value."""
    return _shfl("__shfl_xor_sync", value, delta, width, mask)


def shfl_down(value, delta, width=WARP_SIZE, mask=FULL_MASK):
    """``value`` of lane ``lane + delta`` within the lane's group of ``width`` lanes
    (``__shfl_down_sync``); lanes past the group's end keep their own value."""
    return _shfl("__shfl_down_sync", value, delta, width, mask)


def shfl_up(value, delta, width=WARP_SIZE, mask=FULL_MASK):
    """``value`` of lane ``lane - delta`` within the lane's group of ``width`` lanes
    (``__shfl_up_sync``); lanes before the group's start keep their own value."""
    return _shfl("__shfl_up_sync", value, delta, width, mask)


def shfl_sync(value, srcLane, width=WARP_SIZE, mask=FULL_MASK):  # noqa: N803 - upstream name
    """``value`` of lane ``srcLane % width`` of the calling lane's group of ``width`` lanes
    (``__shfl_sync``, a broadcast)."""
    return _shfl("__shfl_sync", value, srcLane, width, mask)


def _tvm_shuffle(cuda_name, tvm_name, mask, value, lane_arg, width, warp_size):
    if not (isinstance(warp_size, int) and warp_size == WARP_SIZE):
        raise errors.TraceError(
            f"T.{tvm_name}: warp_size must be {WARP_SIZE} on the supported targets, got {warp_size!r}"
        )
    return _shfl(cuda_name, value, lane_arg, width, mask)


def tvm_warp_shuffle(mask, value, warp_id, width, warp_size):
    """TVM's builtin form of :func:`shfl_sync` (upstream exports it as ``T.tvm_warp_shuffle``):
    ``value`` of lane ``warp_id % width`` of the calling lane's group of ``width`` lanes."""
    return _tvm_shuffle("__shfl_sync", "tvm_warp_shuffle", mask, value, warp_id, width, warp_size)


def tvm_warp_shuffle_up(mask, value, delta, width, warp_size):
    """TVM's builtin form of :func:`shfl_up`: ``value`` of lane ``lane - delta``."""
    return _tvm_shuffle(
        "__shfl_up_sync", "tvm_warp_shuffle_up", mask, value, delta, width, warp_size
    )


def tvm_warp_shuffle_down(mask, value, delta, width, warp_size):
    """TVM's builtin form of :func:`shfl_down`: ``value`` of lane ``lane + delta``."""
    return _tvm_shuffle(
        "__shfl_down_sync", "tvm_warp_shuffle_down", mask, value, delta, width, warp_size
    )


def any_sync(predicate, mask=FULL_MASK):
    """int32: 1 if any lane of the warp has a non-zero ``predicate``, else 0 (``__any_sync``)."""
    builder.state()
    pred = _predicate(predicate, "any_sync")
    return _tirx.call_extern("__any_sync", _mask(mask, "any_sync"), pred, ty="int32")


def all_sync(predicate, mask=FULL_MASK):
    """int32: 1 if every lane of the warp has a non-zero ``predicate``, else 0 (``__all_sync``)."""
    builder.state()
    pred = _predicate(predicate, "all_sync")
    return _tirx.call_extern("__all_sync", _mask(mask, "all_sync"), pred, ty="int32")


def ballot_sync(predicate, mask=FULL_MASK):
    """uint64 with bit ``n`` set when lane ``n`` of the warp (and of ``mask``) has a non-zero
    ``predicate`` (``__ballot_sync``, zero-extended)."""
    builder.state()
    pred = _predicate(predicate, "ballot_sync")
    return _tirx.call_extern("__ballot_sync", _mask(mask, "ballot_sync"), pred, ty="uint64")


def ballot(predicate):
    """``T.ballot_sync(predicate)`` over the full warp."""
    return ballot_sync(predicate)


def activemask():
    """uint64 bit mask of the lanes of the calling warp that exist (``__activemask``)."""
    builder.state()
    return _tirx.call_extern("__activemask", ty="uint64")


def match_any_sync(value, mask=FULL_MASK):
    """uint32 bit mask of the lanes of the warp whose ``value`` equals the calling lane's
    (``__match_any_sync``)."""
    builder.state()
    value = _value(value, "match_any_sync")
    if str(value.ty) not in ("int32", "uint32", "int64", "uint64"):
        raise errors.TraceError(f"T.match_any_sync: needs a 32/64-bit integer, got {value.ty}")
    return _tirx.call_extern("__match_any_sync", _mask(mask, "match_any_sync"), value, ty="uint32")


def match_all_sync(value, mask=FULL_MASK):
    """uint32: ``mask`` when every lane of the warp in ``mask`` has the same ``value``, else 0
    (``__match_all_sync`` without its predicate output)."""
    builder.state()
    value = _value(value, "match_all_sync")
    if str(value.ty) not in ("int32", "uint32", "int64", "uint64"):
        raise errors.TraceError(f"T.match_all_sync: needs a 32/64-bit integer, got {value.ty}")
    return _tirx.call_extern(
        "tl::match_all_sync", _mask(mask, "match_all_sync"), value, ty="uint32"
    )


def _block_vote(cuda_name, predicate):
    name = BLOCK_VOTES[cuda_name]
    builder.state()
    return _tirx.call_extern(cuda_name, _predicate(predicate, name), ty="int32")


def syncthreads_count(predicate):
    """Block barrier returning how many threads of the block have a non-zero ``predicate``."""
    return _block_vote("__syncthreads_count", predicate)


def syncthreads_and(predicate):
    """Block barrier returning 1 if every thread of the block has a non-zero ``predicate``."""
    return _block_vote("__syncthreads_and", predicate)


def syncthreads_or(predicate):
    """Block barrier returning 1 if any thread of the block has a non-zero ``predicate``."""
    return _block_vote("__syncthreads_or", predicate)


def _reduce(kind, value, integer_only=False):
    name = f"warp_reduce_{kind}"
    builder.state()
    value = _value(value, name)
    dt = str(value.ty)
    allowed = ("int32", "uint32", "int64", "uint64")
    if not integer_only:
        allowed += ("float32", "float64", "float16", "bfloat16")
    if dt not in allowed:
        raise errors.TraceError(
            f"T.{name}: unsupported dtype {dt} (supported: {', '.join(allowed)})"
        )
    return _tirx.call_extern(f"tl::warp_reduce_{kind}<32, 1>", value, ty=dt)


def warp_reduce_sum(value):
    """Sum of ``value`` over the 32 lanes of the warp; every lane gets the result."""
    return _reduce("sum", value)


def warp_reduce_max(value):
    """Maximum of ``value`` over the 32 lanes of the warp; every lane gets the result."""
    return _reduce("max", value)


def warp_reduce_min(value):
    """Minimum of ``value`` over the 32 lanes of the warp; every lane gets the result."""
    return _reduce("min", value)


def warp_reduce_bitand(value):
    """Bitwise AND of an integer ``value`` over the warp; every lane gets the result."""
    return _reduce("bitand", value, integer_only=True)


def warp_reduce_bitor(value):
    """Bitwise OR of an integer ``value`` over the warp; every lane gets the result."""
    return _reduce("bitor", value, integer_only=True)


def sync_warp(mask=None):
    """A barrier of the lanes of the warp (``__syncwarp``); on the CPU, a block barrier."""
    builder.state()
    args = [] if mask is None else [_mask(mask, "sync_warp")]
    call = _tirx.call_extern(SYNC_WARP, *args, ty="void")
    _T.emit_(ir.Evaluate(call, loc=builder.user_loc()))


# ---------------------------------------------------------------------------------------
# Thread indices (plain expressions of the kernel's threadIdx variables)
# ---------------------------------------------------------------------------------------
def _linear_thread():
    from .kernel import _current

    frame = _current()
    flat, stride = None, 1
    for var, extent in zip(frame.thread_vars, frame.threads):
        term = var if stride == 1 else var * stride
        flat = term if flat is None else flat + term
        stride = stride * extent
    return flat


def _size(value, name, what, default):
    if value is None:
        return default
    if isinstance(value, int):
        if value <= 0:
            raise errors.TraceError(f"T.{name}: {what} must be positive, got {value}")
        return value
    return _index(value, name, what)


def get_lane_idx(warp_size=None):
    """Lane of the calling thread within its warp: ``linear_thread % warp_size`` (default 32)."""
    ws = _size(warp_size, "get_lane_idx", "warp_size", WARP_SIZE)
    return _tirx.floormod(_linear_thread(), ws)


def get_warp_idx(warp_size=None):
    """Warp index of the calling thread in its block: ``linear_thread // warp_size``."""
    ws = _size(warp_size, "get_warp_idx", "warp_size", WARP_SIZE)
    return _tirx.floordiv(_linear_thread(), ws)


def get_warp_idx_sync(warp_size=None):
    """Same value as :func:`get_warp_idx` (upstream's variant for converged warps)."""
    ws = _size(warp_size, "get_warp_idx_sync", "warp_size", WARP_SIZE)
    return _tirx.floordiv(_linear_thread(), ws)


def get_warp_group_idx(warp_size=None, warps_per_group=None):
    """Warp-group index: ``linear_thread // (warp_size * warps_per_group)`` (defaults 32, 4)."""
    if warps_per_group is not None and warp_size is None:
        raise errors.TraceError(
            "T.get_warp_group_idx expects `warp_size` when specifying `warps_per_group`"
        )
    ws = _size(warp_size, "get_warp_group_idx", "warp_size", WARP_SIZE)
    wpg = _size(warps_per_group, "get_warp_group_idx", "warps_per_group", 4)
    return _tirx.floordiv(_linear_thread(), ws * wpg)


def shuffle_elect(thread_extent: int):
    """True for exactly one thread (the first) of each group of ``thread_extent`` consecutive
    threads of the block; ``0`` elects one thread of the whole block."""
    if not isinstance(thread_extent, int) or thread_extent < 0:
        raise errors.TraceError(
            f"T.shuffle_elect: thread_extent must be a non-negative int, got {thread_extent!r}"
        )
    flat = _linear_thread()
    zero = ir.const(0, "int32")
    if thread_extent == 0:
        return _tirx.EQ(flat, zero)
    return _tirx.EQ(_tirx.floormod(flat, thread_extent), zero)
