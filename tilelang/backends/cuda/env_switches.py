"""On/off environment variables that choose how a CUDA kernel is built, never what code it has.

Every knob that changes generated code is a pass config (``tilelang/engine/pass_config.py``);
the switches here only pick a build driver, and are read each time they are used:

- ``TILELANG_CUDA_NVRTC_DRIVER`` (default ``1``): NVRTC compiles go through tilelang's
  driver (``nvrtc.py``: TIRx's options, a lighter preamble); ``0``: through TIRx's.
  Overridden in a process by ``nvrtc.USE_TILELANG_NVRTC = True/False``.
- ``TILELANG_CUDA_DIRECT_LAUNCH`` (default ``1``): the C host library launches kernels with
  ``cuLaunchKernel`` itself (``direct_launch.py``); ``0``: TIRx's packed call. Overridden in
  a process by ``direct_launch.DIRECT_LAUNCH = True/False``; the kernel cache key includes
  the variable (not the module attribute).
- ``TILELANG_CUDA_OVERLAP_HOST`` (default ``0``): ``1`` starts the C compiler on the host
  code while the device compiler runs (``overlap.py``; measured slower on the H200 host);
  ``0``: one after the other. Overridden in
  a process by ``overlap.OVERLAP_HOST = True/False``.
"""

from __future__ import annotations

import os

NVRTC_DRIVER_ENV = "TILELANG_CUDA_NVRTC_DRIVER"
DIRECT_LAUNCH_ENV = "TILELANG_CUDA_DIRECT_LAUNCH"
OVERLAP_HOST_ENV = "TILELANG_CUDA_OVERLAP_HOST"

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def env_switch(name: str, default: bool = True) -> bool:
    """The on/off value of environment variable ``name`` (``default`` when unset or empty).

    Accepts ``1/true/yes/on`` and ``0/false/no/off`` (any case); anything else raises a
    ValueError naming the variable.
    """
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return default
    if text in _ON:
        return True
    if text in _OFF:
        return False
    raise ValueError(f"environment variable {name}={os.environ[name]!r}: expected 0 or 1")


def switch(override, name: str, default: bool = True) -> bool:
    """``override`` (a module attribute a test or script set) unless it is None, else the
    environment variable ``name`` read now (:func:`env_switch`)."""
    return env_switch(name, default) if override is None else bool(override)
