"""``T.reduce_{sum,max,min,abssum,absmax}(src, dst, dim, clear)``: reduce one dimension of a tile.

IR: ``tl.reduce(src_region, dst_region)`` with ``reduce_type``, ``dim`` and
``clear``. ``dst`` has ``src``'s shape without ``dim`` (or with it as 1). With
``clear=False`` the result is combined with what ``dst`` already holds.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...lowering import irb
from ...lowering.region import RegionView, _const
from ..registry import TileOpDef, lower_rule

REDUCE = TileOpDef(
    "reduce",
    ("src", "dst"),
    {"reduce_type": "sum", "dim": -1, "clear": True, "nan_propagate": False},
)

REDUCE_TYPES = ("sum", "max", "min", "abssum", "absmax", "bitand", "bitor", "bitxor")


def _infinity(dtype: str):
    """+inf of a float ``dtype``; TIRx's ``infinity`` has no bfloat16 (the constant does)."""
    try:
        return _tirx.infinity(ty=dtype)
    except Exception:  # noqa: BLE001 - "Cannot decide infinity for type bfloat16"
        return ir.const(float("inf"), dtype)


def init_value(kind: str, dtype: str):
    """Identity element of the reduction ``kind`` in ``dtype``."""
    if kind in ("sum", "abssum", "bitor", "bitxor"):
        return ir.const(0, dtype)
    if kind == "absmax":
        return ir.const(0, dtype)
    is_float = dtype.startswith(("float", "bfloat"))
    if kind == "max":
        return -_infinity(dtype) if is_float else _tirx.min_value(ty=dtype)
    if kind == "min":
        return _infinity(dtype) if is_float else _tirx.max_value(ty=dtype)
    if kind == "bitand":
        return ir.const(-1, dtype)
    raise ValueError(kind)


def combine(kind: str, acc, value, nan_propagate: bool = False):
    """``acc`` combined with one more ``value``. With ``nan_propagate`` a max/min is NaN as
    soon as either side is (upstream's ``annotations={"nan_propagate": True}``); otherwise
    a NaN operand may be dropped."""
    if kind in ("abssum", "absmax"):
        value = _tirx.abs(value)
    if kind in ("sum", "abssum"):
        return acc + value
    if kind in ("max", "absmax", "min") and nan_propagate:
        picked = _tirx.max(acc, value) if kind != "min" else _tirx.min(acc, value)
        either = _tirx.any(_tirx.isnan(acc), _tirx.isnan(value))
        return _tirx.Select(either, acc + value, picked)  # a NaN operand makes the sum NaN
    if kind in ("max", "absmax"):
        return _tirx.max(acc, value)
    if kind == "min":
        return _tirx.min(acc, value)
    if kind == "bitand":
        return acc & value
    if kind == "bitor":
        return acc | value
    if kind == "bitxor":
        return acc ^ value
    raise ValueError(kind)


def reduce_axes(v):
    """(src view, dst view, reduced src axis, [(src axis, dst axis)] kept) with checks."""
    src, dst = RegionView.of(v.src), RegionView.of(v.dst)
    rank = len(src.extents)
    dim = v.dim + rank if v.dim < 0 else v.dim
    if not 0 <= dim < rank:
        raise errors.compile_error(f"T.reduce: dim {v.dim} out of range for {src.name}", v.loc)
    kept = [a for a in range(rank) if a != dim]
    d_axes = list(range(len(dst.extents)))
    if len(dst.extents) == rank:  # keepdim form: drop the reduced axis of dst too
        d_axes = [a for a in d_axes if a != dim]
    if len(d_axes) != len(kept):
        raise errors.compile_error(
            f"T.reduce: {dst.name}{list(dst.extents)} does not fit {src.name}{list(src.extents)} "
            f"reduced over dim {v.dim}",
            v.loc,
        )
    for a, b in zip(kept, d_axes):
        es, ed = _const(src.extents[a]), _const(dst.extents[b])
        if es is not None and ed is not None and es != ed:
            raise errors.compile_error(
                f"T.reduce: {dst.name}{list(dst.extents)} does not fit {src.name}"
                f"{list(src.extents)} reduced over dim {v.dim}",
                v.loc,
            )
    return src, dst, dim, list(zip(kept, d_axes))


@lower_rule("reduce", "cpu")
def lower_reduce_cpu(v, ctx):
    src, dst, dim, pairs = reduce_axes(v)
    kind = v.reduce_type
    acc_dtype = dst.dtype
    drops_nan = (
        kind in ("max", "min", "absmax")
        and not v.nan_propagate
        and acc_dtype.startswith(("float", "bfloat"))
    )

    def outer(vars_):
        d_idx = dst.index({b: var for (a, b), var in zip(pairs, vars_)})
        stmts = []
        if v.clear:
            stmts.append(irb.store(dst.tensor, d_idx, init_value(kind, acc_dtype)))
        else:
            stmts.append(None)

        def inner(rv):
            s_idx = src.index({**{a: var for (a, b), var in zip(pairs, vars_)}, dim: rv[0]})
            value = ir.TensorLoad(src.tensor, s_idx).astype(acc_dtype)
            cur = ir.TensorLoad(dst.tensor, d_idx)
            new = combine(kind, cur, value, bool(v.nan_propagate))
            if drops_nan:  # CUDA's fmaxf/fminf (upstream's default): a NaN input is skipped
                new = _tirx.Select(_tirx.isnan(value), cur, new)
            return irb.store(dst.tensor, d_idx, new, loc=v.loc)

        stmts.append(irb.loop_nest([src.extents[dim]], inner, names=["r"]))
        return irb.seq(stmts)

    return irb.loop_nest([src.extents[a] for a, _ in pairs], outer, loc=v.loc)
