"""Helpers for programs and tests (upstream's ``tilelang.utils``).

``tensor``: :class:`TensorSupplyType`, :func:`torch_assert_close`, :func:`get_tensor_supply`,
:func:`map_torch_type`; ``deprecated``: :func:`deprecated`; ``version``: :func:`build_date`;
``device``: the current device and synchronisation; ``target``: :func:`determine_target`.

Upstream's IR helpers (``is_global``, ``retrieve_shape``, ``to_buffer_region``, ...) work on
upstream's TVM buffers and are not provided: tilelang's IR is TIRx's.
"""

from . import device, target, tensor, version  # noqa: F401
from .deprecated import deprecated
from .tensor import TensorSupplyType, get_tensor_supply, map_torch_type, torch_assert_close
from .version import build_date

__all__ = [
    "TensorSupplyType",
    "build_date",
    "deprecated",
    "get_tensor_supply",
    "map_torch_type",
    "torch_assert_close",
]
