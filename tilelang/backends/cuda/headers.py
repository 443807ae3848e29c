"""Device headers and the TIRx hooks of the CUDA build.

* Headers: tilelang's device headers (``tilelang/backends/cuda/include/tl_templates/cuda/*.h``,
  package data shipped with the wheel; see
  :func:`template_dir`) and the text pasted in front of the generated CUDA source
  (:func:`select_headers`, :func:`header_prelude`).
* Postproc hook: the ``tvm_callback_cuda_postproc`` dispatcher that pastes the headers
  (and slims TIRx's NVRTC type-traits prelude, :func:`_slim_prelude`) inside
  ``build_cuda`` on the calling thread, plus the ``ffi.Module.create.cuda`` stand-in /
  recorder (:func:`_device_factory`) and device compilation (:func:`_compile_device_source`).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .direct_launch import _plain_function_info
from .errors import CudaBuildError

__all__ = ["HEADER_ORDER", "header_names", "header_prelude", "select_headers", "template_dir"]

HEADER_ORDER = (
    "common.h",
    "copy.h",
    "ldsm.h",
    "mma.h",
    "reduce.h",
    "warp.h",  # bitwise warp all-reductions (T.warp_reduce_bitand / bitor)
    "atomic.h",
    "threadblock_swizzle.h",
    "wgmma.h",  # sm_90a wgmma wrappers used by tilelang/ops/gemm_wgmma.py (guarded per arch)
    "tma.h",  # sm_90 TMA loads and mbarriers (backends/cuda/passes/tma_lowering.py)
    "hopper.h",  # explicit Hopper API: mbarrier arrive/expect_tx, setmaxnreg, clusters
    "cluster.h",  # cluster launches, TMA multicast, remote mbarrier arrivals (cluster.py)
)
_LOCAL_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+\.h)"\s*$')


# --------------------------------------------------------------------------- headers


def template_dir() -> Path:
    """Return the directory holding tilelang's CUDA device headers.

    ``$TILELANG_TEMPLATE_PATH/tl_templates/cuda`` when that variable is set, otherwise
    ``tl_templates/cuda`` under this package's ``include/`` directory (package data, so
    it is there in a source checkout and in an installed wheel alike).
    """
    root = os.environ.get("TILELANG_TEMPLATE_PATH")
    base = Path(root) if root else Path(__file__).resolve().parent / "include"
    return base / "tl_templates" / "cuda"


def header_names() -> tuple[str, ...]:
    """Return the device headers pasted by ``extra_headers=True``, in paste order."""
    return HEADER_ORDER


def _resolve_header_request(extra_headers: bool | str | Sequence[str]) -> list[str] | str:
    if extra_headers == "auto":
        return "auto"
    if extra_headers is True:
        return list(HEADER_ORDER)
    if extra_headers is False or extra_headers is None:
        return []
    if isinstance(extra_headers, str | bytes) or not isinstance(extra_headers, Sequence):
        raise TypeError(
            "extra_headers must be 'auto', a bool or a sequence of header names such as "
            f"['copy.h', 'mma.h'], got {extra_headers!r}"
        )
    names = []
    for name in extra_headers:
        if not isinstance(name, str) or name not in HEADER_ORDER:
            raise ValueError(
                f"extra_headers: unknown header {name!r}; known headers: {list(HEADER_ORDER)}"
            )
        names.append(name)
    return names


_COMMENT_OR_STRING_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
_TL_NAME_RE = re.compile(r"\btl::(\w+)")
_HEADER_CACHE: dict[tuple[str, int, int], tuple[frozenset[str], tuple[str, ...]]] = {}


def _code_tokens(text: str) -> set[str]:
    """Identifiers of C/C++ text outside comments and string literals."""
    return set(_IDENT_RE.findall(_COMMENT_OR_STRING_RE.sub(" ", text)))


def _header_info(name: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """(identifiers, local includes) of one device header; cached by path, mtime, size."""
    path = template_dir() / name
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        cached = _HEADER_CACHE.get(key)
        if cached is not None:
            return cached
        text = path.read_text()
    except OSError as err:
        raise CudaBuildError(
            f"device header {name!r} not found in {path.parent} "
            "(set TILELANG_TEMPLATE_PATH to the directory that holds tl_templates/)"
        ) from err
    includes = tuple(
        match.group(1)
        for match in map(_LOCAL_INCLUDE_RE.match, text.splitlines())
        if match and (path.parent / match.group(1)).is_file()
    )
    info = (frozenset(_code_tokens(text)), includes)
    _HEADER_CACHE[key] = info
    return info


def select_headers(code: str) -> list[str]:
    """Return the device headers that generated CUDA ``code`` needs, in paste order.

    Every helper in ``tl_templates/cuda`` lives in ``namespace tl`` and lowered code calls
    it as ``tl::name``. A header is selected when it spells one of the names that ``code``
    calls (outside comments and strings); ``common.h`` always is. When a called name
    appears in no header at all, every header is selected (the device compiler then
    reports the unknown name exactly as with ``extra_headers=True``).
    """
    used = set(_TL_NAME_RE.findall(_COMMENT_OR_STRING_RE.sub(" ", code)))
    selected = [HEADER_ORDER[0]]
    known: set[str] = set(_header_info(HEADER_ORDER[0])[0])
    for name in HEADER_ORDER[1:]:
        tokens = _header_info(name)[0]
        known |= tokens
        if used & tokens:
            selected.append(name)
    if used - known:
        return list(HEADER_ORDER)
    return selected


def _pasted_order(names: Sequence[str]) -> list[str]:
    """``names`` with each header's local includes first, once each, in paste order."""
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in _header_info(name)[1]:
            visit(dep)
        order.append(name)

    for name in names:
        visit(name)
    return order


def _type_defines(code: str, headers: Sequence[str]) -> list[str]:
    """``TL_NO_FP16`` / ``TL_NO_BF16`` when neither ``code`` nor the pasted headers other
    than common.h mention half / bfloat16 types (see common.h)."""
    tokens = _code_tokens(code)
    for name in _pasted_order(headers):
        if name != HEADER_ORDER[0]:
            tokens |= _header_info(name)[0]
    defines = []
    if not any("half" in tok for tok in tokens) and "cuda_fp16" not in tokens:
        defines.append("TL_NO_FP16")
    # half4_bfloat164: the template behind TIRx's fp16 `half4`, also emitted without bf16.
    if not any("bfloat16" in tok for tok in tokens - {"half4_bfloat164"}) and (
        "cuda_bf16" not in tokens
    ):
        defines.append("TL_NO_BF16")
    return defines


def header_prelude(
    extra_headers: bool | Sequence[str] = True, *, defines: Sequence[str] = ()
) -> str:
    """Return the text that ``build_cuda`` pastes in front of the generated CUDA source.

    ``extra_headers`` is ``True`` (all headers), ``False`` (none) or a sequence of header
    names (``"copy.h"``...); each header's local includes (``#include "common.h"``) are
    inlined first, once. The result does not depend on any include path. ``defines``
    (e.g. ``["TL_NO_BF16"]``) become ``#define NAME 1`` lines before the first header.
    """
    if extra_headers == "auto":
        raise ValueError("header_prelude needs the header names; see select_headers(code)")
    directory = template_dir()
    seen: set[str] = set()
    parts: list[str] = []

    def paste(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        path = directory / name
        try:
            text = path.read_text()
        except OSError as err:
            raise CudaBuildError(
                f"device header {name!r} not found in {directory} "
                "(set TILELANG_TEMPLATE_PATH to the directory that holds tl_templates/)"
            ) from err
        body = []
        for line in text.splitlines():
            match = _LOCAL_INCLUDE_RE.match(line)
            if match and (directory / match.group(1)).is_file():
                paste(match.group(1))
                continue
            body.append(line)
        header = f"// ---- tl_templates/cuda/{name} ----\n"
        if not parts and defines:
            header += "".join(f"#define {macro} 1\n" for macro in defines)
        parts.append(header + "\n".join(body) + "\n")

    for name in _resolve_header_request(extra_headers):
        paste(name)
    if not parts:
        return ""
    return "".join(parts) + "// ---- end of tl_templates; TIRx-generated code follows ----\n"


# --------------------------------------------------------------------------- postproc hook


class _HookState(threading.local):
    def __init__(self) -> None:
        self.active = False
        self.request: list[str] | str = []
        self.headers: list[str] = []
        self.captured: list[str] = []
        self.config: dict[str, Any] | None = None
        self.fmap: dict[str, dict[str, Any]] | None = None  # kernel FunctionInfo, see below
        # the user's source hints (hopper_source.with_kernel_hints), set by build_cuda
        self.hints: dict[str, Any] = {}
        # overlap.py: while `defer` is set the module factories record their call in
        # `deferred` (factory, args) and return a source-only placeholder module
        self.defer = False
        self.deferred: list[tuple[Any, tuple]] = []


# TIRx's CUDA prelude (tvm_tirx/backend/cuda/codegen/header.py) includes the type traits
# for NVRTC and for nvcc. Under NVRTC <cuda/std/type_traits> alone costs ~0.5 s per
# compile (measured with NVRTC 13.0), so both are dropped when no `std::` name is used.
_RTC_TRAITS_RE = re.compile(
    r"^[ \t]*#include <cuda/std/type_traits>\n[ \t]*namespace std \{\n"
    r"(?:[ \t]*using cuda::std::\w+;\n)*[ \t]*\}\n",
    re.M,
)
_HOST_TRAITS_RE = re.compile(r"^[ \t]*#include <type_traits>\n", re.M)
_STD_USE_RE = re.compile(r"(?<![:\w])std::")


def _slim_prelude(code: str) -> str:
    """Drop the type-traits includes of TIRx's prelude when nothing uses ``std::``."""
    slim = _HOST_TRAITS_RE.sub("", _RTC_TRAITS_RE.sub("", code, count=1), count=1)
    if slim is code or _STD_USE_RE.search(_COMMENT_OR_STRING_RE.sub(" ", slim)):
        return code
    return slim


def _with_headers(code: str, request: list[str] | str) -> tuple[str, list[str]]:
    """Paste the requested device headers in front of generated ``code``."""
    from .hopper_source import with_cluster_dims, with_register_cap

    code = with_cluster_dims(with_register_cap(_slim_prelude(code)))
    names = select_headers(code) if request == "auto" else list(request)
    if not names:
        return code, []
    prefix = header_prelude(names, defines=_type_defines(code, names))
    return prefix + code, names


_STATE = _HookState()
_HOOK_LOCK = threading.Lock()
_HOOK_INSTALLED = False
_PREVIOUS_HOOK: Any = None
_PREVIOUS_COMPILE: Any = None
_COMPILE_CALLBACK_NAME = "tvm_callback_cuda_compile"
_FACTORY_NAME = "ffi.Module.create.cuda"
_FALLBACK_FACTORY_NAME = "ffi.Module.create.cuda_fallback"
_FACTORY_USERS = 0
_REAL_FACTORY: Any = None  # the CUDA runtime's factory, once wrapped by _recording_factory


def _postproc(code: str, target: Any) -> str:
    if _PREVIOUS_HOOK is not None:
        code = str(_PREVIOUS_HOOK(code, target))
    state = _STATE
    if state.active:
        from ...engine import callback

        code = callback.apply("cuda", code, target)
        code, state.headers = _with_headers(code, state.request)
        if state.hints:
            from .hopper_source import with_kernel_hints

            code = with_kernel_hints(code, **state.hints)
        state.captured.append(code)
    return code


def _compile_callback(code: str, config_json: Any) -> Any:
    """``tvm_callback_cuda_compile(code, config_json)`` dispatcher: inside ``build_cuda``
    on this thread the device source is compiled by :func:`_compile_device_source`
    (tilelang's NVRTC driver); anywhere else TIRx's callback runs as before."""
    if _STATE.active and _STATE.config is not None:
        from tvm_tirx.backend.config import parse_backend_config

        config = parse_backend_config(config_json).get("cuda")
        if config:
            binary, fmt = _compile_device_source(str(code), dict(config))
            return [bytearray(binary), fmt]
    return _PREVIOUS_COMPILE(code, config_json)


def _install_postproc_hook() -> None:
    """Register the ``tvm_callback_cuda_postproc`` and ``tvm_callback_cuda_compile``
    dispatchers once per process.

    A postproc callback registered earlier by someone else keeps running first; the
    compile dispatcher forwards to the callback it replaced outside ``build_cuda``.
    """
    global _HOOK_INSTALLED, _PREVIOUS_HOOK, _PREVIOUS_COMPILE
    with _HOOK_LOCK:
        if _HOOK_INSTALLED:
            return
        import tvm_ffi
        import tvm_tirx.support.nvcc  # noqa: F401  (registers tvm_callback_cuda_compile)

        _PREVIOUS_HOOK = tvm_ffi.get_global_func("tvm_callback_cuda_postproc", allow_missing=True)
        tvm_ffi.register_global_func("tvm_callback_cuda_postproc", _postproc, override=True)
        _PREVIOUS_COMPILE = tvm_ffi.get_global_func(_COMPILE_CALLBACK_NAME)
        tvm_ffi.register_global_func(_COMPILE_CALLBACK_NAME, _compile_callback, override=True)
        _HOOK_INSTALLED = True


def _cross_compile_factory(data: Any, fmt: str, fmap: Any, source_map: Any) -> Any:
    """Stand-in for ``ffi.Module.create.cuda`` on a machine without the CUDA runtime.

    TIRx's code generator hands the CUDA source to ``ffi.Module.create.cuda`` (which
    compiles it) when the CUDA runtime is loaded, and otherwise wraps the source in a
    source-only ``cuda_fallback`` module. During ``build_cuda`` this compiles the source
    the way the real factory would and wraps the binary instead, so the exported host
    library embeds a cubin either way. Outside ``build_cuda`` it only forwards.
    """
    import tvm_ffi

    fallback = tvm_ffi.get_global_func(_FALLBACK_FACTORY_NAME)
    if _STATE.active:
        _STATE.fmap = _plain_function_info(fmap)
    config = _STATE.config if _STATE.active else None
    if config is None or str(fmt) != "cuda":
        return fallback(data, fmt, fmap, source_map)
    if _STATE.defer:  # overlap.py compiles it later by calling this again
        _STATE.deferred.append((_cross_compile_factory, (data, fmt, fmap, source_map)))
        return fallback(data, fmt, fmap, source_map)
    binary, binary_format = _compile_device_source(bytes(data).decode(), config)
    return fallback(binary, binary_format, fmap, source_map)


def _recording_factory(*args: Any) -> Any:
    """Forwards to the CUDA runtime's ``ffi.Module.create.cuda(data, fmt, fmap, ...)``,
    recording the kernels' FunctionInfo (``fmap``) for direct launch during ``build_cuda``
    (and deferring the call while ``overlap.py`` asks for it)."""
    state = _STATE
    if state.active and len(args) >= 3 and hasattr(args[2], "items"):
        state.fmap = _plain_function_info(args[2])
        if state.defer and str(args[1]) == "cuda":  # overlap.py: compiled by a later call
            import tvm_ffi

            state.deferred.append((_recording_factory, args))
            return tvm_ffi.get_global_func(_FALLBACK_FACTORY_NAME)(*args)
    return _REAL_FACTORY(*args)


@contextlib.contextmanager
def _device_factory(record: bool = False) -> Iterator[None]:
    """Register :func:`_cross_compile_factory` while at least one build needs it.

    With ``record`` and the real CUDA runtime loaded, its factory is wrapped (once per
    process, forwarding everything) by :func:`_recording_factory`.
    """
    global _FACTORY_USERS, _REAL_FACTORY
    import tvm_ffi

    with _HOOK_LOCK:
        if _FACTORY_USERS == 0:
            real = tvm_ffi.get_global_func(_FACTORY_NAME, allow_missing=True)
            if real is not None:
                owned = False  # the real CUDA runtime is loaded: it compiles by itself
                if record and _REAL_FACTORY is None:
                    _REAL_FACTORY = real
                    tvm_ffi.register_global_func(_FACTORY_NAME, _recording_factory, override=True)
            else:
                tvm_ffi.register_global_func(_FACTORY_NAME, _cross_compile_factory)
                owned = True
        else:
            owned = True
        if owned:
            _FACTORY_USERS += 1
    try:
        yield
    finally:
        if owned:
            with _HOOK_LOCK:
                _FACTORY_USERS -= 1
                if _FACTORY_USERS == 0:
                    tvm_ffi.remove_global_func(_FACTORY_NAME)


def _compile_device_source(source: str, config: dict[str, Any]) -> tuple[bytes, str]:
    """Compile CUDA source with a resolved backend config; returns (binary, format).

    NVRTC compiles go through tilelang's driver (``nvrtc.py``: TIRx's options, a lighter
    preamble) unless :func:`.nvrtc.use_tilelang_nvrtc` says no; nvcc and NVSHMEM
    kernels through TIRx's ``compile_source``.
    """
    from tvm_tirx.backend.cuda.compiler import compile_source

    from . import nvrtc

    target = {"kind": "cuda", "arch": config["arch"]}
    own = (
        nvrtc.use_tilelang_nvrtc()
        and config.get("compiler") == "nvrtc"
        and "#include <nvshmem" not in source
    )
    try:
        if own:
            from tvm_tirx.backend.cuda.backend_config import resolve_backend_config

            return nvrtc.compile_nvrtc(source, resolve_backend_config(dict(config), target))
        result = compile_source(source, {"cuda": config}, target=target)
    except Exception as err:
        raise CudaBuildError(
            f"{config['compiler']} failed for {config['arch']}: {_summarize_error(err)}"
        ) from err
    return bytes(result.binary), str(result.target_format)


def _summarize_error(err: Exception) -> str:
    """Drop the echoed CUDA source from a device-compiler error, keeping the log."""
    text = str(err)
    marker = "\nCompilation error:\n"
    if marker in text:
        text = "device compiler error:\n" + text.rsplit(marker, 1)[1]
    return text
