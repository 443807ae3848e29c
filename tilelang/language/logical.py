"""``T.all_of`` / ``T.any_of``: whether every / some element of a tensor or slice is true.

Upstream's forms are ``T.all_of(mask)`` and ``T.all_of(mask[i, j, :])`` (a tensor, or a slice
whose extents are static). Several scalar conditions, ``T.all_of(a < b, c)``, are also
accepted (the conjunction / disjunction of the conditions).
"""

from __future__ import annotations

import itertools
import math

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from .. import errors
from ..lowering.region import RegionView, is_tensor
from . import builder

__all__ = ["all_of", "any_of"]

# Past this many elements the unrolled conjunction would bloat the kernel; upstream's runtime
# loop over a pointer has no such limit, so say so instead of emitting a huge expression.
MAX_ELEMENTS = 1024


def _element_truths(region, what: str) -> list:
    """One boolean expression per element of a tensor or slice (row-major order)."""
    view = RegionView.of(region)
    extents = []
    for e in view.extents:
        value = builder.static_value(e)
        if not isinstance(value, int):
            raise errors.TraceError(
                f"{what}: the slice {region} has a non-constant extent {e}; "
                "only slices with static extents are supported"
            )
        extents.append(value)
    count = math.prod(extents)
    if count > MAX_ELEMENTS:
        raise errors.TraceError(
            f"{what}: the slice {region} has {count} elements; at most {MAX_ELEMENTS} are supported"
        )
    dtype = str(view.tensor.ty.dtype)
    truths = []
    for offsets in itertools.product(*(range(e) for e in extents)):
        indices = [b + o if o else b for b, o in zip(view.begins, offsets)]
        value = ir.TensorLoad(view.tensor, indices)
        truths.append(value if dtype == "bool" else value != ir.const(0, dtype))
    return truths


def _is_tensor_like(value) -> bool:
    return isinstance(value, ir.TensorRegion) or is_tensor(value)


def _truths(args, what: str) -> list:
    args = [builder.unwrap(a) for a in args]
    if not args:
        raise errors.TraceError(f"{what} needs a tensor, a slice or conditions")
    if len(args) == 1 and _is_tensor_like(args[0]):
        return _element_truths(args[0], what)
    for a in args:
        if _is_tensor_like(a):
            raise errors.TraceError(
                f"{what} takes one tensor or slice, or scalar conditions; got {a} among {len(args)}"
            )
    return args


def all_of(buffer, *conditions):
    """True when every element of ``buffer`` (a tensor or a slice with static extents) is true;
    with several scalar conditions, their conjunction."""
    return _tirx.all(*_truths((buffer, *conditions), "T.all_of"))


def any_of(buffer, *conditions):
    """True when some element of ``buffer`` (a tensor or a slice with static extents) is true;
    with several scalar conditions, their disjunction."""
    return _tirx.any(*_truths((buffer, *conditions), "T.any_of"))
