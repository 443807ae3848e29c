"""Which device tensors live on, and waiting for it (upstream's ``tilelang.utils.device``)."""

from __future__ import annotations

import os

__all__ = [
    "Event",
    "IS_CUDA",
    "IS_MPS",
    "IS_NPU",
    "device_synchronize",
    "get_available_cpu_count",
    "get_current_device",
]


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or a broken driver: no GPU
        return False


IS_CUDA = _cuda_available()
IS_NPU = False  # tilelang has no Ascend backend
IS_MPS = False  # tilelang has no Metal backend


def _event_class():
    if not IS_CUDA:
        return None
    import torch

    return torch.cuda.Event


Event = _event_class()  # torch.cuda.Event on a GPU machine, else None (as upstream)


def get_current_device():
    """The current CUDA device index when a GPU is present, else None (upstream's meaning)."""
    if IS_CUDA:
        import torch

        return torch.cuda.current_device()
    return None


def device_synchronize(device=None) -> None:
    """Wait for the GPU (``device``: index, ``"cuda:N"`` or torch.device; CPU: nothing to wait)."""
    import torch

    if device is None:
        if not IS_CUDA:
            raise RuntimeError("device_synchronize: no CUDA device is available")
        torch.cuda.synchronize()
        return
    kind = "cuda" if isinstance(device, int) else torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "cpu":
        return
    else:
        raise ValueError(f"device_synchronize: device must be a CUDA or CPU device, got {device!r}")


def get_available_cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask), at least 1."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:
        count = os.cpu_count() or 1
    return max(1, count)
