"""The host C compile of a CUDA build runs while the device compiler runs.

``tvm_tirx.tirx.compile`` builds the device module (CUDA codegen, then the device compiler
called from the module factory ``ffi.Module.create.cuda``) and then the host module (C
codegen); ``build_cuda`` then exports the host library, which runs the C compiler. Device
compilation (NVRTC: ~0.4 s for the README GEMM) and the C compile of the host code
(~60 ms of gcc, more in wall time) need not wait for each other. Inside ``build_cuda``
(:func:`overlapped`), TIRx's ``_codegen_host_and_device`` step is replaced by
:func:`_codegen_host_and_device`, which

1. builds the device modules with the factory calls deferred (``headers.py``: the factory
   records its arguments and returns a source-only placeholder),
2. builds the host module (C codegen) and starts the C compiler on its source
   (``host_library.start_host_object``, with the direct-launch rewrite when asked for),
3. makes the recorded factory calls (so the device compiler runs now, as TIRx would have
   run it, in the same process and thread) and imports their modules into the host
   module, as TIRx does.

The export then links the early object when its C file is the one compiled early (text
and options compared); otherwise it compiles as before. What is built is the same: the
same device binary, the same host code. Opt-in (it measured slower on the H200 host, where
the device compile slowed while gcc ran): ``TILELANG_CUDA_OVERLAP_HOST=1`` or the module
flag :data:`OVERLAP_HOST` (``True``). With TIRx's CUDA runtime loaded (a GPU
host) the deferred call is the runtime's factory, wrapped by ``headers._recording_factory``
(which ``build_cuda`` installs whenever the overlap or direct launch is on); without it,
tilelang's cross-compile factory.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from .env_switches import OVERLAP_HOST_ENV, switch
from .headers import _STATE

__all__ = ["OVERLAP_HOST", "overlap_enabled", "overlapped"]

#: ``True``/``False`` forces the overlap on/off in this process; ``None`` (default): the
#: environment variable ``TILELANG_CUDA_OVERLAP_HOST`` (default off), read at each build.
OVERLAP_HOST: bool | None = None

_LOCAL = threading.local()
_INSTALL_LOCK = threading.Lock()
_ORIGINAL: Any = None


def overlap_enabled() -> bool:
    """Whether builds overlap the host C compile with the device compile (see module doc)."""
    # off by default: on the H200 host (session 9) the overlapped build measured slower than
    # the sequential one (README GEMM cold compile 1.17 vs 1.10 s observed, 1.44 vs 1.15 s
    # plain; NVRTC 606 vs 492 ms while gcc ran)
    return switch(OVERLAP_HOST, OVERLAP_HOST_ENV, default=False)


class _Request:
    """One build's overlap: ``kernels`` for the direct-launch rewrite (None: no rewrite);
    ``early`` receives the :class:`~.host_library.HostObject` started, if any."""

    def __init__(self, direct_launch: bool) -> None:
        self.direct_launch = direct_launch
        self.early: Any = None


def _install() -> None:
    global _ORIGINAL
    with _INSTALL_LOCK:
        if _ORIGINAL is not None:
            return
        from tvm_tirx.tirx import _compile

        _ORIGINAL = _compile._codegen_host_and_device
        _compile._codegen_host_and_device = _codegen_host_and_device


@contextlib.contextmanager
def overlapped(direct_launch: bool) -> Iterator[_Request | None]:
    """Within the block, ``tvm_tirx.tirx.compile`` on this thread overlaps the host C
    compile with the device compile; yields the request (None when switched off). The
    caller hands ``request.early`` to the export, or closes it."""
    if not overlap_enabled():
        yield None
        return
    _install()
    request = _Request(direct_launch)
    previous = getattr(_LOCAL, "request", None)
    _LOCAL.request = request
    try:
        yield request
    finally:
        _LOCAL.request = previous


def _codegen_host_and_device(host_mod: Any, device_mod_dict: dict, target_host: Any) -> Any:
    """TIRx's ``_codegen_host_and_device`` with the host C compile started before the
    device compiler runs (see the module docstring); TIRx's own outside :func:`overlapped`."""
    request = getattr(_LOCAL, "request", None)
    state = _STATE
    if request is None or not state.active:
        return _ORIGINAL(host_mod, device_mod_dict, target_host)
    _LOCAL.request = None  # one build: a nested compile takes TIRx's path
    from tvm_tirx import ir
    from tvm_tirx.tirx._compile import _build_for_target

    from .host_library import start_host_object

    mhost_all = ir.IRModule({}, attrs=host_mod.attrs)
    mhost_all.update(host_mod)
    built: list[Any] = []  # a module, or the recorded (factory, args) to call later
    state.defer, state.deferred = True, []
    try:
        for (target, _config), device_mod in device_mod_dict.items():
            if len(device_mod.functions) == 0:
                continue
            count = len(state.deferred)
            module = _build_for_target(device_mod, target)
            built.append(state.deferred[count] if len(state.deferred) > count else module)
    finally:
        state.defer, state.deferred = False, []
    mhost = _build_for_target(mhost_all, target_host)
    if any(isinstance(entry, tuple) for entry in built):
        kernels = state.fmap if request.direct_launch else None
        try:
            request.early = start_host_object(mhost, kernels)
        except Exception:  # noqa: BLE001 - only a head start: the export compiles (and reports)
            request.early = None
    device_modules = [entry[0](*entry[1]) if isinstance(entry, tuple) else entry for entry in built]
    for module in device_modules:
        if module is not None:
            mhost.import_module(module)
    for external_mod in host_mod.get_attr("external_mods") or []:
        mhost.import_module(external_mod)
    return mhost
