"""CUDA device properties (upstream's ``tilelang.carver.arch.driver``).

Values come from torch's device properties, or the CUDA runtime's ``cudaDeviceGetAttribute``
for those torch lacks. Without a GPU every query raises RuntimeError (as upstream), except
:func:`get_cuda_device_properties` and :func:`get_device_name`, which return None.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = [
    "cudaDeviceAttrNames",
    "get_cuda_device_properties",
    "get_device_attribute",
    "get_device_name",
    "get_max_dynamic_shared_size_bytes",
    "get_num_sms",
    "get_persisting_l2_cache_max_size",
    "get_registers_per_block",
    "get_shared_memory_per_block",
]

_UNITS = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}


class cudaDeviceAttrNames:  # noqa: N801 - upstream's name
    """``cudaDeviceAttr`` numbers used here (CUDA runtime API)."""

    cudaDevAttrMaxThreadsPerBlock = 1
    cudaDevAttrMaxRegistersPerBlock = 12
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81
    cudaDevAttrMaxPersistingL2CacheSize = 108


def _check_device_id(device_id) -> None:
    if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
        raise ValueError(f"device_id must be an int >= 0, got {device_id!r}")


def get_cuda_device_properties(device_id: int = 0):
    """torch's properties of CUDA device ``device_id``, or None without a GPU."""
    _check_device_id(device_id)
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    if device_id >= torch.cuda.device_count():
        raise ValueError(f"device_id {device_id} out of range: {torch.cuda.device_count()} GPU(s)")
    return torch.cuda.get_device_properties(device_id)


def _props(device_id: int, what: str):
    prop = get_cuda_device_properties(device_id)
    if prop is None:
        raise RuntimeError(f"cannot read {what}: no CUDA device is available (torch sees no GPU)")
    return prop


def _scaled(value: int, format: str, func: str) -> int:  # noqa: A002 - upstream's name
    if format not in _UNITS:
        raise ValueError(f"{func}: format must be one of {sorted(_UNITS)}, got {format!r}")
    return int(value) // _UNITS[format]


def get_device_name(device_id: int = 0) -> str | None:
    """The GPU's name (``"NVIDIA H200"``), or None without a GPU."""
    prop = get_cuda_device_properties(device_id)
    return prop.name if prop is not None else None


def get_num_sms(device_id: int = 0) -> int:
    """Number of streaming multiprocessors of the GPU."""
    return int(_props(device_id, "the SM count").multi_processor_count)


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory a block may use without opting in (48 KB on current GPUs)."""
    prop = _props(device_id, "shared memory per block")
    return _scaled(prop.shared_memory_per_block, format, "get_shared_memory_per_block")


def _cudart():
    for name in (
        "libcudart.so",
        ctypes.util.find_library("cudart"),
        "libcudart.so.13",
        "libcudart.so.12",
    ):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("cannot load the CUDA runtime library (libcudart)")


def get_device_attribute(attr: int, device_id: int = 0) -> int:
    """``cudaDeviceGetAttribute(attr, device_id)`` (attr: a ``cudaDeviceAttr`` number)."""
    _check_device_id(device_id)
    _props(device_id, f"device attribute {attr}")
    lib = _cudart()
    value = ctypes.c_int()
    lib.cudaDeviceGetAttribute.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]
    lib.cudaDeviceGetAttribute.restype = ctypes.c_int
    status = lib.cudaDeviceGetAttribute(ctypes.byref(value), int(attr), device_id)
    if status != 0:
        raise RuntimeError(
            f"cudaDeviceGetAttribute({attr}, {device_id}) failed with error {status}"
        )
    return value.value


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:  # noqa: A002
    """Shared memory per multiprocessor (upstream's meaning of this name)."""
    prop = _props(device_id, "shared memory per multiprocessor")
    value = getattr(prop, "shared_memory_per_multiprocessor", None)
    if value is None:
        value = get_device_attribute(
            cudaDeviceAttrNames.cudaDevAttrMaxSharedMemoryPerMultiprocessor, device_id
        )
    return _scaled(value, format, "get_max_dynamic_shared_size_bytes")


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    """Largest persisting-L2 window in bytes."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxPersistingL2CacheSize, device_id)


def get_registers_per_block(device_id: int = 0) -> int:
    """32-bit registers available to one block."""
    return get_device_attribute(cudaDeviceAttrNames.cudaDevAttrMaxRegistersPerBlock, device_id)
