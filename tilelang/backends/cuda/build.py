"""Build glue of the CUDA backend: thread-level TIRx -> device binary + host library.

``build_cuda`` is the last stage of the CUDA pipeline. Its input is a TIRx ``IRModule``
(or ``tvm_tirx.tirx.Function``) that is already thread-level (``T.launch_thread``,
``T.alloc_shared``, ``T.call_extern``, ...). It compiles it with
``tvm_tirx.tirx.compile`` against a C host (``{"kind": "c"}``: the host side is plain C
built with the system C compiler, so neither TIRx's LLVM backend nor orcjit is needed),
and packages the result as a :class:`CudaArtifact`:

* the CUDA source, with tilelang's device headers (``src/tl_templates/cuda/*.h``) pasted
  in front of it (by default only the headers whose ``tl::`` helpers the generated code
  calls; see :func:`select_headers`),
* the compiled device binary (a cubin),
* the host shared library (the C host module exported with ``export_library``; it
  embeds the device module and is what ``runtime.load_kernel`` loads),
* JSON metadata (entry name, parameters with dtypes and symbolic shapes, arch,
  compiler, flags, file sizes and sha256 hashes).

How the TIRx hooks are used (see also the module docstring of ``runtime``):

* Header injection: the CUDA code generator (``target.build.cuda``) passes the complete
  generated source through the global function ``tvm_callback_cuda_postproc(code,
  target) -> code`` before handing it to the device compiler. This module registers one
  dispatcher for it that is a no-op except inside ``build_cuda`` on the calling thread,
  where it prepends the header text and records the final source. It also drops the
  ``<cuda/std/type_traits>`` block of TIRx's prelude when nothing uses ``std::`` traits:
  under NVRTC that one include costs about half a second of every compile.
* Host library: the C host code is compiled by a C compiler (``$CC``, gcc, cc or clang;
  TIRx's default is the slower C++ compiler), in parallel with the packed device module,
  which is an assembler ``.incbin`` of its bytes rather than a C byte array; then linked.
* Compiler choice and flags: ``target["backend_config"]["cuda"]`` with the keys
  ``compiler`` ("nvcc" | "nvrtc"), ``target_format``, and argv lists ``nvcc``,
  ``nvrtc``, ``ptxas``. A list replaces TIRx's default list, so the defaults are kept
  here and the caller's flags appended. Architecture and output options are reserved.
* Dynamic shared memory above 48 KB: the generated host code passes the byte size of
  the (single) ``shared.dyn`` allocation as the last launch argument, and the TIRx CUDA
  runtime calls ``cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`` itself when the
  size exceeds the default limit, after checking it against the device's opt-in maximum.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CorruptArtifactError",
    "CudaArtifact",
    "CudaBuildError",
    "build_cuda",
    "header_names",
    "header_prelude",
    "select_headers",
    "template_dir",
]

FORMAT_VERSION = 1
ARTIFACT_KIND = "tilelang.cuda"
HEADER_ORDER = (
    "common.h",
    "copy.h",
    "ldsm.h",
    "mma.h",
    "reduce.h",
    "atomic.h",
    "threadblock_swizzle.h",
    "wgmma.h",  # sm_90a wgmma wrappers used by tilelang/ops/gemm_wgmma.py (guarded per arch)
)
SOURCE_FILE = "kernel.cu"
HOST_SOURCE_FILE = "host.c"
HOST_LIBRARY_FILE = "host.so"
META_FILE = "meta.json"
_ARCH_RE = re.compile(r"sm_[0-9]+[af]?")
_LOCAL_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+\.h)"\s*$')
# TIRx's own defaults (tvm_tirx.backend.cuda.backend_config.default_backend_config).
_DEFAULT_PTXAS = ("-v", "--warn-on-local-memory-usage", "--register-usage-level=10")


class CudaBuildError(RuntimeError):
    """Raised when a module cannot be built into a CUDA artifact."""


class CorruptArtifactError(RuntimeError):
    """Raised by :meth:`CudaArtifact.load` when a saved artifact is missing or damaged."""


# --------------------------------------------------------------------------- headers


def template_dir() -> Path:
    """Return the directory holding tilelang's CUDA device headers.

    ``$TILELANG_TEMPLATE_PATH/tl_templates/cuda`` when that variable is set, otherwise
    ``<repository>/src/tl_templates/cuda``.
    """
    root = os.environ.get("TILELANG_TEMPLATE_PATH")
    base = Path(root) if root else Path(__file__).resolve().parents[3] / "src"
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
    code = _slim_prelude(code)
    names = select_headers(code) if request == "auto" else list(request)
    if not names:
        return code, []
    prefix = header_prelude(names, defines=_type_defines(code, names))
    return prefix + code, names


_STATE = _HookState()
_HOOK_LOCK = threading.Lock()
_HOOK_INSTALLED = False
_PREVIOUS_HOOK: Any = None
_FACTORY_NAME = "ffi.Module.create.cuda"
_FALLBACK_FACTORY_NAME = "ffi.Module.create.cuda_fallback"
_FACTORY_USERS = 0
_REAL_FACTORY: Any = None  # the CUDA runtime's factory, once wrapped by _recording_factory


def _postproc(code: str, target: Any) -> str:
    if _PREVIOUS_HOOK is not None:
        code = str(_PREVIOUS_HOOK(code, target))
    state = _STATE
    if state.active:
        code, state.headers = _with_headers(code, state.request)
        state.captured.append(code)
    return code


def _install_postproc_hook() -> None:
    """Register the ``tvm_callback_cuda_postproc`` dispatcher once per process.

    A callback registered earlier by someone else keeps running first.
    """
    global _HOOK_INSTALLED, _PREVIOUS_HOOK
    with _HOOK_LOCK:
        if _HOOK_INSTALLED:
            return
        import tvm_ffi

        _PREVIOUS_HOOK = tvm_ffi.get_global_func("tvm_callback_cuda_postproc", allow_missing=True)
        tvm_ffi.register_global_func("tvm_callback_cuda_postproc", _postproc, override=True)
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
    binary, binary_format = _compile_device_source(bytes(data).decode(), config)
    return fallback(binary, binary_format, fmap, source_map)


def _recording_factory(*args: Any) -> Any:
    """Forwards to the CUDA runtime's ``ffi.Module.create.cuda(data, fmt, fmap, ...)``,
    recording the kernels' FunctionInfo (``fmap``) for direct launch during ``build_cuda``."""
    state = _STATE
    if state.active and len(args) >= 3 and hasattr(args[2], "items"):
        state.fmap = _plain_function_info(args[2])
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


# --------------------------------------------------------------------------- artifact


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class CudaArtifact:
    """A built CUDA kernel: source, device binary, host library and metadata.

    Attributes:
        kernel_source: the CUDA source that was compiled (headers included).
        host_source: the generated C host code.
        host_library: bytes of the host shared library (embeds the device module).
        device_binary: the compiled device binary, or ``None`` when no device compiler
            could run at build time (then ``host_library`` embeds the source and the
            CUDA runtime compiles it when it is loaded).
        meta: JSON-serialisable metadata; see :func:`build_cuda`.
    """

    kernel_source: str
    host_source: str
    host_library: bytes
    device_binary: bytes | None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def entry_name(self) -> str:
        """Name of the host entry function that launches the kernel(s)."""
        return self.meta["entry_name"]

    @property
    def device_format(self) -> str | None:
        """Format of :attr:`device_binary`: ``"cubin"``, ``"ptx"``, ``"fatbin"`` or None."""
        return self.meta.get("device_format")

    def get_kernel_source(self) -> str:
        """Return the CUDA source of the kernel(s), with the pasted device headers."""
        return self.kernel_source

    def get_host_source(self) -> str:
        """Return the generated C source of the host launcher."""
        return self.host_source

    def _payload(self) -> dict[str, bytes]:
        files = {
            SOURCE_FILE: self.kernel_source.encode(),
            HOST_SOURCE_FILE: self.host_source.encode(),
            HOST_LIBRARY_FILE: self.host_library,
        }
        if self.device_binary is not None:
            files[f"kernel.{self.device_format}"] = self.device_binary
        return files

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the artifact as plain files into ``directory`` and return its path.

        Files: ``kernel.cu``, ``kernel.<cubin|ptx|fatbin>`` (when a device binary exists),
        ``host.c``, ``host.so`` and ``meta.json`` (which records each file's size and
        sha256). Every file goes through a temporary file and ``os.replace``; meta.json is
        replaced last, so a reader sees either a complete artifact or a hash mismatch.
        """
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(f"directory {str(path)!r} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True)
        payload = self._payload()
        meta = dict(self.meta)
        meta["files"] = {
            name: {"size": len(data), "sha256": _sha256(data)} for name, data in payload.items()
        }
        for name, data in payload.items():
            _atomic_write(path / name, data)
        text = json.dumps(meta, indent=2, sort_keys=True) + "\n"
        _atomic_write(path / META_FILE, text.encode())
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> CudaArtifact:
        """Read an artifact written by :meth:`save`, verifying every file.

        Raises:
            CorruptArtifactError: meta.json or a listed file is missing, unreadable,
                of the wrong size or hash, or the metadata is malformed.
        """
        path = Path(directory)
        meta_path = path / META_FILE
        if not meta_path.is_file():
            raise CorruptArtifactError(f"artifact {str(path)!r}: {META_FILE} is missing")
        try:
            meta = json.loads(meta_path.read_bytes().decode())
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise CorruptArtifactError(
                f"artifact {str(path)!r}: {META_FILE} is unreadable: {err}"
            ) from err
        _check_meta(path, meta)
        files: dict[str, bytes] = {}
        for name, info in meta["files"].items():
            file_path = path / name
            if not file_path.is_file():
                raise CorruptArtifactError(f"artifact {str(path)!r}: file {name!r} is missing")
            data = file_path.read_bytes()
            if len(data) != info["size"]:
                raise CorruptArtifactError(
                    f"artifact {str(path)!r}: file {name!r} has {len(data)} bytes, "
                    f"meta.json records {info['size']}"
                )
            if _sha256(data) != info["sha256"]:
                raise CorruptArtifactError(
                    f"artifact {str(path)!r}: file {name!r} does not match its sha256"
                )
            files[name] = data
        device_format = meta.get("device_format")
        binary_name = f"kernel.{device_format}" if device_format else None
        required = [SOURCE_FILE, HOST_SOURCE_FILE, HOST_LIBRARY_FILE]
        if binary_name:
            required.append(binary_name)
        for name in required:
            if name not in files:
                raise CorruptArtifactError(
                    f"artifact {str(path)!r}: meta.json does not list required file {name!r}"
                )
        try:
            kernel_source = files[SOURCE_FILE].decode()
            host_source = files[HOST_SOURCE_FILE].decode()
        except UnicodeDecodeError as err:
            raise CorruptArtifactError(f"artifact {str(path)!r}: source is not UTF-8") from err
        meta = {key: value for key, value in meta.items() if key != "files"}
        return cls(
            kernel_source=kernel_source,
            host_source=host_source,
            host_library=files[HOST_LIBRARY_FILE],
            device_binary=files[binary_name] if binary_name else None,
            meta=meta,
        )


def _check_meta(path: Path, meta: Any) -> None:
    where = f"artifact {str(path)!r}: {META_FILE}"
    if not isinstance(meta, dict):
        raise CorruptArtifactError(f"{where} is not a JSON object")
    if meta.get("kind") != ARTIFACT_KIND:
        raise CorruptArtifactError(f"{where}: kind is {meta.get('kind')!r}, not {ARTIFACT_KIND!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CorruptArtifactError(
            f"{where}: unsupported format_version {meta.get('format_version')!r} "
            f"(this tilelang reads {FORMAT_VERSION})"
        )
    if not isinstance(meta.get("entry_name"), str):
        raise CorruptArtifactError(f"{where}: entry_name is missing")
    device_format = meta.get("device_format")
    if device_format not in (None, "cubin", "ptx", "fatbin"):
        raise CorruptArtifactError(f"{where}: bad device_format {device_format!r}")
    files = meta.get("files")
    if not isinstance(files, dict):
        raise CorruptArtifactError(f"{where}: 'files' is missing")
    for name, info in files.items():
        if (
            not isinstance(name, str)
            or "/" in name
            or "\\" in name
            or name in ("", ".", "..")
            or not isinstance(info, dict)
            or not isinstance(info.get("size"), int)
            or not isinstance(info.get("sha256"), str)
        ):
            raise CorruptArtifactError(f"{where}: bad entry for file {name!r}")


# --------------------------------------------------------------------------- metadata


def _shape_entry(dim: Any) -> int | str:
    value = getattr(dim, "value", None)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return str(dim)


def _describe_params(func: Any) -> list[dict[str, Any]]:
    """Describe a TIRx function's parameters for the artifact metadata."""
    params = []
    for var in func.params:
        ty = var.ty
        entry: dict[str, Any] = {"name": str(var.name)}
        shape = getattr(ty, "shape", None)
        if shape is not None:
            entry["kind"] = "tensor"
            entry["dtype"] = str(ty.dtype)
            entry["shape"] = [_shape_entry(dim) for dim in shape]
        elif hasattr(ty, "dtype"):
            entry["kind"] = "scalar"
            entry["dtype"] = str(ty.dtype)
        else:
            entry["kind"] = "other"
            entry["type"] = str(ty)
        params.append(entry)
    return params


def _symbolic_dims(functions: dict[str, list[dict[str, Any]]]) -> list[str]:
    dims: list[str] = []
    for params in functions.values():
        for param in params:
            for dim in param.get("shape", ()):
                if isinstance(dim, str) and dim not in dims:
                    dims.append(dim)
    return dims


def _public_functions(mod: Any) -> dict[str, Any]:
    result = {}
    for func in mod.functions.values():
        attrs = getattr(func, "attrs", None)
        symbol = attrs.get("global_symbol") if attrs is not None else None
        if symbol is not None and hasattr(func, "params"):
            result[str(symbol)] = func
    if not result:
        for gvar, func in mod.functions.items():
            if hasattr(func, "params"):
                result[str(gvar.name_hint)] = func
    return result


# --------------------------------------------------------------------------- build


def _check_flags(name: str, flags: Any) -> list[str]:
    if isinstance(flags, str | bytes) or not isinstance(flags, Sequence):
        raise TypeError(f"{name} must be a sequence of strings (one argv item each), got {flags!r}")
    for flag in flags:
        if not isinstance(flag, str):
            raise TypeError(f"{name} must contain only strings, got {flag!r}")
    return list(flags)


def _backend_config(
    arch: str,
    compiler: str,
    compile_flags: list[str],
    ptxas_flags: list[str],
    fast_math: bool,
    include_dir: Path,
) -> dict[str, Any]:
    from tvm_tirx.backend.cuda.backend_config import validate_backend_config

    base = ["--use_fast_math"] if fast_math else []
    includes = [f"-I{include_dir}"] if include_dir.is_dir() else []
    config = {
        "arch": arch,
        "compiler": compiler,
        "target_format": "cubin",
        "nvcc": base + includes + (compile_flags if compiler == "nvcc" else []),
        "nvrtc": base + includes + (compile_flags if compiler == "nvrtc" else []),
        "ptxas": list(_DEFAULT_PTXAS) + ptxas_flags,
    }
    try:
        return validate_backend_config(config)
    except (TypeError, ValueError) as err:
        raise ValueError(f"compile_flags / ptxas_flags rejected by TIRx: {err}") from err


# The C host code generator spells float16 pointers `half*`, a type C does not have.
_HOST_TYPES_HEADER = """#include <stdint.h>
typedef uint16_t half;
"""


def _pack_imports_to_c(module: Any, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
    """Serialise the imported device module as a C byte array (no LLVM involved).

    Without this, ``export_library`` packs imports into an object file through TIRx's
    LLVM backend whenever that backend happens to be installed.
    """
    import tvm_ffi

    pack = tvm_ffi.get_global_func("runtime.ModulePackImportsToC")
    path = os.path.join(workspace_dir, f"{prefix}devc.c")
    Path(path).write_text(str(pack(module, is_system_lib, prefix)))
    return path


def _c_compiler() -> list[str] | None:
    """The C compiler for the host library: ``$CC``, else gcc, cc or clang on PATH.

    TIRx's default is the C++ compiler (``g++``), which takes ~3x longer on the generated
    C host code than a C compiler does.
    """
    env = os.environ.get("CC", "").split()
    if env:
        return env
    for name in ("gcc", "cc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


_ASM_BLOB = """\t.section .rodata
\t.globl {symbol}
\t.type {symbol}, %object
\t.p2align 4
{symbol}:
\t.incbin "{path}"
\t.size {symbol}, {size}
\t.section .note.GNU-stack,"",%progbits
"""


def _pack_imports_to_asm(module: Any, is_system_lib: bool, prefix: str, workspace_dir: str) -> str:
    """Serialise the imported device module as an assembler ``.incbin`` of its bytes.

    The same bytes and symbol (``__tvm_ffi__library_bin``) as
    ``runtime.ModulePackImportsToC``, without a C compiler parsing a hex array
    (~6 characters per cubin byte). Falls back to the C array for system libraries.
    """
    import tvm_ffi

    if is_system_lib or prefix or not re.fullmatch(r"[A-Za-z0-9_./-]+", workspace_dir):
        return _pack_imports_to_c(module, is_system_lib, prefix, workspace_dir)
    blob = tvm_ffi.get_global_func("runtime.ModulePackImportsToTensor")(module).numpy().tobytes()
    blob_path = os.path.join(workspace_dir, "devc.bin")
    Path(blob_path).write_bytes(blob)
    path = os.path.join(workspace_dir, "devc.s")
    Path(path).write_text(
        _ASM_BLOB.format(symbol="__tvm_ffi__library_bin", path=blob_path, size=len(blob))
    )
    return path


# --------------------------------------------------------------------------- direct launch

# Build option: replace each kernel launch of the C host code (a tvm-ffi packed call into
# TIRx's CUDA module) by a direct cuLaunchKernel; see :func:`_direct_launch_source`.
# ``build_cuda(direct_launch=None)`` reads this flag. It is part of tilelang's sources, so
# changing the default here changes every cache key (``source_fingerprint``); setting it at
# run time does not, so clear the cache (or bypass it) when toggling it in a process.
# On by default (checked on the H200: every cuda-marked test passes with it, and a cached
# call costs 4.6 us instead of 5.8 us); ``TILELANG_CUDA_DIRECT_LAUNCH=0`` turns it off
# (read at import; the cache key includes that variable).
DIRECT_LAUNCH = os.environ.get("TILELANG_CUDA_DIRECT_LAUNCH", "1").strip() != "0"

_DIRECT_CUBIN_SYMBOL = "__tilelang_cubin"
_DYN_SMEM_TAG = "tirx.use_dyn_shared_memory"
_LAUNCH_DIMS = {
    "blockIdx.x": "gx",
    "blockIdx.y": "gy",
    "blockIdx.z": "gz",
    "threadIdx.x": "bx",
    "threadIdx.y": "by",
    "threadIdx.z": "bz",
    _DYN_SMEM_TAG: "smem",
}
# Kernel parameter types: (C type, TVMFFIAny field the host code fills).
_DIRECT_ARG_TYPES = {
    "handle": ("void*", "v_ptr"),
    "int8": ("int8_t", "v_int64"),
    "int16": ("int16_t", "v_int64"),
    "int32": ("int32_t", "v_int64"),
    "int64": ("int64_t", "v_int64"),
    "uint8": ("uint8_t", "v_int64"),
    "uint16": ("uint16_t", "v_int64"),
    "uint32": ("uint32_t", "v_int64"),
    "uint64": ("uint64_t", "v_int64"),
    "float32": ("float", "v_float64"),
    "float64": ("double", "v_float64"),
}
_PACKED_CALL_RE = re.compile(
    r"TVMFFIFunctionCall\((\w+)_packed, \(TVMFFIAny\*\) (\w+), (\d+), &(\w+)\)"
)
_SET_DEVICE_RE = re.compile(r"TVMBackendSetDevice\(2, (\w+)\)")

# The shared part of the direct-launch C code: libcuda entry points resolved with dlopen /
# dlsym on first use, the per-device module (cuModuleLoadData of the embedded cubin in the
# context current at first launch on that device), kernel lookup, the dynamic shared
# memory opt-in and error reporting. Launches go through the packed call whenever the
# current context is not the one the module was loaded in, or anything failed at init.
_DIRECT_PRELUDE = r"""
/* ---- tilelang direct launch (tilelang/backends/cuda/build.py, DIRECT_LAUNCH) ---- */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#define TL_DL_MAX_DEVICES 64
#define TL_DL_DEFAULT_SMEM 49152
#define TL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
typedef int tl_CUresult;
extern const unsigned char __tilelang_cubin[] __attribute__((visibility("hidden")));
static struct {
  int state; /* 0: not tried, 1: resolved, -1: unavailable */
  tl_CUresult (*ctxGetCurrent)(void**);
  tl_CUresult (*moduleLoadData)(void**, const void*);
  tl_CUresult (*moduleGetFunction)(void**, void*, const char*);
  tl_CUresult (*funcSetAttribute)(void*, int, int);
  tl_CUresult (*launchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, void*, void**, void**);
  tl_CUresult (*getErrorName)(tl_CUresult, const char**);
  tl_CUresult (*getErrorString)(tl_CUresult, const char**);
} __tl_cu;
static pthread_mutex_t __tl_dl_lock = PTHREAD_MUTEX_INITIALIZER;
static void* __tl_dl_module[TL_DL_MAX_DEVICES];
static void* __tl_dl_context[TL_DL_MAX_DEVICES];
typedef struct {
  const char* name;
  void* fn[TL_DL_MAX_DEVICES];
  int smem[TL_DL_MAX_DEVICES];
  unsigned char failed[TL_DL_MAX_DEVICES];
} __tl_dl_kernel;

/* Under __tl_dl_lock. */
static int __tl_dl_driver(void) {
  if (__tl_cu.state == 0) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    __tl_cu.state = -1;
    if (lib != NULL) {
      *(void**)(&__tl_cu.ctxGetCurrent) = dlsym(lib, "cuCtxGetCurrent");
      *(void**)(&__tl_cu.moduleLoadData) = dlsym(lib, "cuModuleLoadData");
      *(void**)(&__tl_cu.moduleGetFunction) = dlsym(lib, "cuModuleGetFunction");
      *(void**)(&__tl_cu.funcSetAttribute) = dlsym(lib, "cuFuncSetAttribute");
      *(void**)(&__tl_cu.launchKernel) = dlsym(lib, "cuLaunchKernel");
      *(void**)(&__tl_cu.getErrorName) = dlsym(lib, "cuGetErrorName");
      *(void**)(&__tl_cu.getErrorString) = dlsym(lib, "cuGetErrorString");
      if (__tl_cu.ctxGetCurrent && __tl_cu.moduleLoadData && __tl_cu.moduleGetFunction &&
          __tl_cu.funcSetAttribute && __tl_cu.launchKernel) {
        __tl_cu.state = 1;
      }
    }
  }
  return __tl_cu.state == 1;
}

/* First launch of kernel k on device dev: load the module in the current context and look
   the kernel up. NULL (and k->failed[dev]) when anything fails: the packed call is used. */
static void* __tl_dl_resolve(__tl_dl_kernel* k, int dev) {
  void* fn = NULL;
  pthread_mutex_lock(&__tl_dl_lock);
  fn = k->fn[dev];
  if (fn == NULL && !k->failed[dev]) {
    void* ctx = NULL;
    if (__tl_dl_driver() && __tl_cu.ctxGetCurrent(&ctx) == 0 && ctx != NULL) {
      if (__tl_dl_module[dev] == NULL) {
        void* mod = NULL;
        if (__tl_cu.moduleLoadData(&mod, __tilelang_cubin) == 0 && mod != NULL) {
          __tl_dl_context[dev] = ctx;
          __tl_dl_module[dev] = mod;
        }
      }
      if (__tl_dl_module[dev] == NULL || __tl_dl_context[dev] != ctx ||
          __tl_cu.moduleGetFunction(&fn, __tl_dl_module[dev], k->name) != 0) {
        fn = NULL;
      }
    }
    if (fn != NULL) {
      __atomic_store_n(&k->fn[dev], fn, __ATOMIC_RELEASE);
    } else {
      k->failed[dev] = 1;
    }
  }
  pthread_mutex_unlock(&__tl_dl_lock);
  return fn;
}

static int __tl_dl_error(const char* kernel, const char* what, tl_CUresult rc, unsigned gx,
                         unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                         unsigned smem) {
  const char* name = "?";
  const char* text = "?";
  char message[768];
  if (__tl_cu.getErrorName == NULL || __tl_cu.getErrorName(rc, &name) != 0 || name == NULL) {
    name = "?";
  }
  if (__tl_cu.getErrorString == NULL || __tl_cu.getErrorString(rc, &text) != 0 ||
      text == NULL) {
    text = "?";
  }
  snprintf(message, sizeof(message),
           "CUDA kernel '%s' (tilelang direct launch): %s failed with %s (%d): %s "
           "[grid=(%u, %u, %u), block=(%u, %u, %u), dynamic shared memory=%u bytes]",
           kernel, what, name, (int)rc, text, gx, gy, gz, bx, by, bz, smem);
  TVMFFIErrorSetRaisedFromCStr("RuntimeError", message);
  return -1;
}

/* Raise the kernel's dynamic shared memory limit to smem bytes (once per size increase). */
static tl_CUresult __tl_dl_smem(__tl_dl_kernel* k, int dev, void* fn, unsigned smem) {
  tl_CUresult rc = 0;
  pthread_mutex_lock(&__tl_dl_lock);
  if ((int)smem > k->smem[dev]) {
    rc = __tl_cu.funcSetAttribute(fn, TL_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  (int)smem);
    if (rc == 0) {
      __atomic_store_n(&k->smem[dev], (int)smem, __ATOMIC_RELEASE);
    }
  }
  pthread_mutex_unlock(&__tl_dl_lock);
  return rc;
}
/* ---- end of the shared direct-launch code ---- */
"""

_DIRECT_KERNEL = r"""
static __tl_dl_kernel __tl_dl_k{index} = {{"{name}"}};
/* Launches {name}: args = its {nargs} parameters then the launch values {tags}. */
static int __tl_dl_launch{index}(void* packed, TVMFFIAny* args, int num_args, TVMFFIAny* result,
                               int32_t dev) {{
  if (dev >= 0 && dev < TL_DL_MAX_DEVICES && num_args == {nvalues}) {{
    void* fn = __atomic_load_n(&__tl_dl_k{index}.fn[dev], __ATOMIC_ACQUIRE);
    void* ctx = NULL;
    if (fn == NULL && !__tl_dl_k{index}.failed[dev]) {{
      fn = __tl_dl_resolve(&__tl_dl_k{index}, dev);
    }}
    if (fn != NULL && __tl_cu.ctxGetCurrent(&ctx) == 0 && ctx == __tl_dl_context[dev]) {{
{locals}      void* params[{nparams}] = {{{params}}};
      unsigned gx = {gx}, gy = {gy}, gz = {gz};
      unsigned bx = {bx}, by = {by}, bz = {bz};
      unsigned smem = {smem};
      void* stream = TVMFFIEnvGetStream(2, dev);
      tl_CUresult rc;
      if (smem > TL_DL_DEFAULT_SMEM &&
          (int)smem > __atomic_load_n(&__tl_dl_k{index}.smem[dev], __ATOMIC_ACQUIRE)) {{
        rc = __tl_dl_smem(&__tl_dl_k{index}, dev, fn, smem);
        if (rc != 0) {{
          return __tl_dl_error("{name}",
                               "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                               rc, gx, gy, gz, bx, by, bz, smem);
        }}
      }}
      rc = __tl_cu.launchKernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, NULL);
      if (rc != 0) {{
        return __tl_dl_error("{name}", "cuLaunchKernel", rc, gx, gy, gz, bx, by, bz, smem);
      }}
      return 0;
    }}
  }}
  return TVMFFIFunctionCall(packed, args, num_args, result);
}}
"""


def _plain_function_info(fmap: Any) -> dict[str, dict[str, Any]]:
    """The parts of TIRx's CUDA ``fmap`` (name -> ``runtime.FunctionInfo``) direct launch needs."""
    info: dict[str, dict[str, Any]] = {}
    for name, item in fmap.items():
        try:
            info[str(name)] = {
                "arg_types": [str(t) for t in item.arg_types],
                "launch_param_tags": [str(t) for t in item.launch_param_tags],
                "arg_extra_tags": [int(t) for t in getattr(item, "arg_extra_tags", ())],
                "cuda_launch_fields": len(getattr(item, "cuda_launch_fields", ())),
                "cuda_kernel_attrs": len(getattr(item, "cuda_kernel_attrs", {})),
            }
        except Exception as err:  # noqa: BLE001 - an unknown layout: that kernel keeps the packed call
            info[str(name)] = {"error": f"unreadable FunctionInfo: {err}"}
    return info


def _direct_launch_unsupported(info: dict[str, Any] | None) -> str | None:
    """Why a kernel cannot be launched directly, or None when it can."""
    if info is None:
        return "no FunctionInfo was captured for it"
    if "error" in info:
        return info["error"]
    for dtype in info["arg_types"]:
        if dtype not in _DIRECT_ARG_TYPES:
            return f"parameter type {dtype!r}"
    if any(info["arg_extra_tags"]):
        return f"parameter tags {info['arg_extra_tags']} (e.g. grid-constant tensor maps)"
    for tag in info["launch_param_tags"]:
        if tag not in _LAUNCH_DIMS:
            return f"launch tag {tag!r}"
    if info["cuda_launch_fields"] or info["cuda_kernel_attrs"]:
        return "CUDA launch fields / kernel attributes (clusters, PDL, ...)"
    return None


def _direct_kernel_code(index: int, name: str, info: dict[str, Any]) -> str:
    arg_types = info["arg_types"]
    tags = info["launch_param_tags"]
    locals_, params = [], []
    for i, dtype in enumerate(arg_types):
        ctype, field_name = _DIRECT_ARG_TYPES[dtype]
        locals_.append(f"      {ctype} a{i} = ({ctype})args[{i}].{field_name};\n")
        params.append(f"&a{i}")
    dims = dict.fromkeys(("gx", "gy", "gz", "bx", "by", "bz"), "1")
    dims["smem"] = "0"
    for j, tag in enumerate(tags):
        dims[_LAUNCH_DIMS[tag]] = f"(unsigned)args[{len(arg_types) + j}].v_int64"
    return _DIRECT_KERNEL.format(
        index=index,
        name=name,
        nargs=len(arg_types),
        tags=", ".join(tags) or "(none)",
        nvalues=len(arg_types) + len(tags),
        locals="".join(locals_),
        nparams=max(1, len(params)),
        params=", ".join(params) or "NULL",
        **dims,
    )


def _direct_launch_source(
    host_c: str, kernels: dict[str, dict[str, Any]]
) -> tuple[str, list[str], dict[str, str]]:
    """Replace the packed kernel-launch calls of TIRx's C host code by direct launches.

    Each ``TVMFFIFunctionCall(<kernel>_packed, (TVMFFIAny*) stack, n, &result)`` whose
    kernel is in ``kernels`` (name -> FunctionInfo fields, see :func:`_plain_function_info`)
    and can be launched directly becomes ``__tl_dl_launch<i>(<kernel>_packed, stack, n,
    &result, <device id>)``: the stack holds the kernel's parameters then one value per
    launch tag (``blockIdx.*`` = grid, ``threadIdx.*`` = block, ``tirx.use_dyn_shared_memory``
    = dynamic shared memory bytes), exactly what TIRx's CUDA module reads. The device id is
    the variable of the preceding ``TVMBackendSetDevice(kDLCUDA, ...)``.

    Returns (source, kernels launched directly, {kernel: why not} for the others).
    """
    reasons: dict[str, str] = {}
    indices: dict[str, int] = {}
    parts: list[str] = []
    pos = 0
    for match in _PACKED_CALL_RE.finditer(host_c):
        name, stack, count, result = match.groups()
        if name not in kernels:
            continue  # not a kernel launch (or an unknown one): left alone
        why = _direct_launch_unsupported(kernels.get(name))
        devices = _SET_DEVICE_RE.findall(host_c, 0, match.start())
        if why is None and not devices:
            why = "no TVMBackendSetDevice(2, ...) before its launch"
        if why is None:
            info = kernels[name]
            expected = len(info["arg_types"]) + len(info["launch_param_tags"])
            if int(count) != expected:
                why = f"the packed call passes {count} values, FunctionInfo describes {expected}"
        if why is not None:
            reasons[name] = why
            continue
        index = indices.setdefault(name, len(indices))
        parts.append(host_c[pos : match.start()])
        parts.append(
            f"__tl_dl_launch{index}({name}_packed, (TVMFFIAny*) {stack}, {count}, "
            f"&{result}, {devices[-1]})"
        )
        pos = match.end()
    if not indices:
        return host_c, [], reasons
    parts.append(host_c[pos:])
    body = "".join(parts)
    code = _DIRECT_PRELUDE + "".join(
        _direct_kernel_code(index, name, kernels[name]) for name, index in indices.items()
    )
    # After the includes and the declarations TIRx emits, before the first function.
    anchor = body.find("#ifdef __cplusplus")
    if anchor < 0:
        anchor = 0
    for name in indices:
        reasons.pop(name, None)
    return body[:anchor] + code + body[anchor:], list(indices), reasons


def _direct_cubin_asm(blob_path: str) -> str:
    return (
        "\t.section .rodata\n"
        f"\t.globl {_DIRECT_CUBIN_SYMBOL}\n"
        f"\t.hidden {_DIRECT_CUBIN_SYMBOL}\n"
        f"\t.type {_DIRECT_CUBIN_SYMBOL}, %object\n"
        "\t.p2align 4\n"
        f"{_DIRECT_CUBIN_SYMBOL}:\n"
        f'\t.incbin "{blob_path}"\n'
        "\t.byte 0\n"  # a NUL after the image (harmless for cubin/fatbin)
        f"\t.size {_DIRECT_CUBIN_SYMBOL}, .-{_DIRECT_CUBIN_SYMBOL}\n"
        '\t.section .note.GNU-stack,"",%progbits\n'
    )


@dataclass
class _DirectLaunch:
    """Inputs and outcome of the direct-launch rewrite for one host library export."""

    kernels: dict[str, dict[str, Any]]
    device_binary: bytes
    applied: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    host_source: str | None = None
    error: str | None = None


def _shared_library_compiler(cc: list[str], direct: _DirectLaunch | None = None) -> Any:
    """An ``export_library`` ``fcompile``: compile every input in parallel, then link.

    With ``direct``, the C host file's kernel launches are rewritten for direct launch
    (:func:`_direct_launch_source`) and the device binary is embedded a second time as
    the raw image ``__tilelang_cubin``. If the rewritten file fails to compile, the
    original file is compiled instead (``direct.error`` says why).
    """

    def run_all(jobs: list[tuple[list[str], str]]) -> list[tuple[str, str]]:
        procs = [
            (cmd, source, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            for cmd, source in jobs
        ]
        failures = []
        for cmd, source, proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                failures.append((source, f"{' '.join(cmd)}\n{out.decode(errors='replace')}"))
        return failures

    def fcompile(output: str, objects: Sequence[str], options: Sequence[str] | None = None):
        options = list(options or ())
        jobs, linked, originals = [], [], {}
        sources = [objects] if isinstance(objects, str) else list(objects)
        if direct is not None:
            sources = _apply_direct_launch(sources, output, direct, originals)
        for source in sources:
            if source.endswith((".o", ".a", ".so")):
                linked.append(source)
                continue
            obj = os.path.splitext(source)[0] + ".o"
            cmd = [*cc, "-c", "-fPIC", "-o", obj]
            if not source.endswith(".s"):  # -include / -I are for the C files
                cmd += options
            cmd.append(source)
            jobs.append((cmd, source))
            linked.append(obj)
        failures = run_all(jobs)
        if failures and direct is not None and all(src in originals for src, _ in failures):
            # The rewritten host code did not compile: keep the packed calls.
            direct.error = "the rewritten host code did not compile:\n" + failures[0][1]
            direct.applied, direct.host_source = [], None
            for source, _ in failures:
                Path(source).write_text(originals[source])
            failures = run_all([job for job in jobs if job[1] in originals])
        if failures:
            raise RuntimeError("Compilation error:\n" + "\n".join(text for _, text in failures))
        extra = ["-ldl", "-lpthread"] if direct is not None and direct.applied else []
        cmd = [*cc, "-shared", "-fPIC", "-o", output, *linked, *extra]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"Link error:\n{' '.join(cmd)}\n{proc.stdout.decode(errors='replace')}"
            )

    fcompile.output_format = "so"
    return fcompile


def _apply_direct_launch(
    sources: list[str], output: str, direct: _DirectLaunch, originals: dict[str, str]
) -> list[str]:
    """Rewrite the C host file(s) among ``sources`` for direct launch; returns the sources
    to compile (plus the assembler file embedding the raw device binary when rewritten)."""
    for source in sources:
        if not source.endswith(".c"):
            continue
        text = Path(source).read_text()
        if "TVMFFIFunctionCall(" not in text:
            continue
        patched, applied, skipped = _direct_launch_source(text, direct.kernels)
        direct.skipped.update(skipped)
        if applied:
            originals[source] = text
            Path(source).write_text(patched)
            direct.applied += applied
            direct.host_source = patched
    if not direct.applied:
        return sources
    folder = os.path.dirname(os.path.abspath(output))
    blob = os.path.join(folder, "tilelang_cubin.bin")
    Path(blob).write_bytes(direct.device_binary)
    asm = os.path.join(folder, "tilelang_cubin.s")
    Path(asm).write_text(_direct_cubin_asm(blob))
    return [*sources, asm]


def _export_host_library(executable: Any, direct: _DirectLaunch | None = None) -> bytes:
    """Export the C host module (with its device import) as a shared library's bytes.

    With a C compiler on PATH (``$CC``, gcc, cc, clang) the host C file and the packed
    device module (an ``.incbin`` assembler file on Linux) compile in parallel and are
    then linked; otherwise TIRx's default compiler builds the C host and a C byte array.
    ``direct`` (Linux with a C compiler only) turns on the direct-launch rewrite; its
    ``applied`` / ``skipped`` / ``error`` fields report what happened.
    """
    cc = _c_compiler()
    linux = sys.platform.startswith("linux")
    if direct is not None and not (cc and linux):
        direct.error = "direct launch needs Linux and a C compiler ($CC, gcc, cc or clang)"
        direct = None
    with tempfile.TemporaryDirectory(prefix="tilelang_cuda_") as tmp:
        if direct is not None and not re.fullmatch(r"[A-Za-z0-9_./-]+", tmp):
            direct.error = f"the temporary directory {tmp!r} cannot be named in .incbin"
            direct = None
        types_header = os.path.join(tmp, "tilelang_host_types.h")
        Path(types_header).write_text(_HOST_TYPES_HEADER)
        library_path = os.path.join(tmp, HOST_LIBRARY_FILE)
        workspace = os.path.join(tmp, "workspace")
        os.mkdir(workspace)
        try:
            executable.export_library(
                library_path,
                fcompile=_shared_library_compiler(cc, direct) if cc else None,
                fpack_imports=_pack_imports_to_asm if cc and linux else _pack_imports_to_c,
                workspace_dir=workspace,
                options=["-include", types_header],
            )
        except Exception as err:
            raise CudaBuildError(f"exporting the host library failed: {err}") from err
        return Path(library_path).read_bytes()


def _compile_device_source(source: str, config: dict[str, Any]) -> tuple[bytes, str]:
    """Compile CUDA source with a resolved backend config; returns (binary, format)."""
    from tvm_tirx.backend.cuda.compiler import compile_source

    try:
        result = compile_source(
            source, {"cuda": config}, target={"kind": "cuda", "arch": config["arch"]}
        )
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


def _nvrtc_available() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        return False


def build_cuda(
    mod: Any,
    *,
    arch: str = "sm_90a",
    compiler: str = "nvrtc",
    compile_flags: Sequence[str] = (),
    ptxas_flags: Sequence[str] = (),
    extra_headers: bool | str | Sequence[str] = "auto",
    fast_math: bool = True,
    entry_name: str | None = None,
    pipeline: str = "default",
    direct_launch: bool | None = None,
) -> CudaArtifact:
    """Compile a thread-level TIRx module for CUDA and package it as a CudaArtifact.

    Args:
        mod: a ``tvm_tirx.IRModule`` or ``tvm_tirx.tirx.Function`` whose kernels are
            already thread-level (``T.launch_thread`` / ``T.device_entry``).
        arch: real GPU architecture, e.g. ``"sm_80"`` or ``"sm_90a"``.
        compiler: ``"nvrtc"`` (needs the ``cuda-bindings`` package) or ``"nvcc"``.
        compile_flags: extra argv items for the chosen compiler (e.g. ``["-lineinfo"]``),
            appended after TIRx's defaults. Architecture/output options are reserved.
        ptxas_flags: extra ptxas options, appended after TIRx's defaults.
        extra_headers: paste tilelang's device headers in front of the generated source:
            ``"auto"`` (common.h and the headers whose ``tl::`` helpers the generated code
            calls, see :func:`select_headers`), ``True`` (all), ``False`` (none) or a
            sequence of names such as ``["copy.h"]``. cuda_fp16.h / cuda_bf16.h are left
            out when neither the kernel nor the pasted headers use half / bfloat16.
        fast_math: keep TIRx's default ``--use_fast_math``.
        entry_name: host function to expose; default: the only public function.
        pipeline: TIRx pipeline name passed to ``tvm_tirx.tirx.compile``.
        direct_launch: launch the kernels from the host library with ``cuLaunchKernel``
            instead of a packed call into TIRx's CUDA module (see
            :func:`_direct_launch_source`); ``None`` reads the module flag
            :data:`DIRECT_LAUNCH`. Kernels it cannot handle keep the packed call.

    Returns:
        A :class:`CudaArtifact`. Its ``meta`` holds ``entry_name``, ``functions`` (each
        parameter's name, kind, dtype and shape, symbolic dims as strings),
        ``symbolic_dims``, ``kernel_names``, ``arch``, ``compiler``, ``compile_flags``,
        ``ptxas_flags``, ``extra_headers`` (the pasted headers), ``backend_config``, ``device_format`` and
        ``host_embeds`` (``"binary"`` or ``"source"``), ``direct_launch`` (the option),
        ``direct_launch_kernels`` (kernels launched directly) and ``direct_launch_skipped``
        ({kernel or "*": why it keeps the packed call}).

    Raises:
        TypeError / ValueError: a bad argument (the message names it).
        CudaBuildError: TIRx compilation, device compilation or export failed.
    """
    import tvm_tirx
    from tvm_tirx import tirx

    if isinstance(mod, tirx.Function):
        mod = tvm_tirx.IRModule.from_expr(mod)
    elif not isinstance(mod, tvm_tirx.IRModule):
        raise TypeError(
            f"mod must be a tvm_tirx.IRModule or tvm_tirx.tirx.Function, got {type(mod).__name__}"
        )
    if not isinstance(arch, str) or not _ARCH_RE.fullmatch(arch):
        raise ValueError(f"arch must name a real architecture such as 'sm_90a', got {arch!r}")
    if compiler not in ("nvcc", "nvrtc"):
        raise ValueError(f"compiler must be 'nvcc' or 'nvrtc', got {compiler!r}")
    compile_flags = _check_flags("compile_flags", compile_flags)
    ptxas_flags = _check_flags("ptxas_flags", ptxas_flags)
    if direct_launch is None:
        direct_launch = DIRECT_LAUNCH
    direct_launch = bool(direct_launch)
    header_request = _resolve_header_request(extra_headers)
    if header_request != "auto":
        header_prelude(header_request)  # a missing header fails here, before compiling

    functions = _public_functions(mod)
    if entry_name is None:
        if len(functions) != 1:
            raise ValueError(
                f"entry_name is required when the module has {len(functions)} public "
                f"functions: {sorted(functions)}"
            )
        entry_name = next(iter(functions))
    elif entry_name not in functions:
        raise ValueError(f"entry_name {entry_name!r} is not one of {sorted(functions)}")

    config = _backend_config(
        arch, compiler, compile_flags, ptxas_flags, fast_math, template_dir().parent.parent
    )
    if compiler == "nvrtc" and not _nvrtc_available():
        warnings.warn(
            "compiler='nvrtc' needs the cuda-bindings package, which is not installed: "
            "the artifact will hold no device binary and the CUDA source will be compiled "
            "when it is loaded. Use compiler='nvcc' to compile now.",
            RuntimeWarning,
            stacklevel=2,
        )
    target = {
        "kind": "cuda",
        "arch": arch,
        "host": {"kind": "c"},
        "backend_config": {"cuda": config},
    }

    _install_postproc_hook()
    state = _STATE
    if state.active:
        raise CudaBuildError("build_cuda is not re-entrant on one thread")
    compile_here = compiler == "nvcc" or _nvrtc_available()
    state.active, state.request, state.headers, state.captured = True, header_request, [], []
    state.config = config if compile_here else None
    state.fmap = None
    try:
        with _device_factory(record=direct_launch):
            executable = tirx.compile(mod, target=target, pipeline=pipeline)
    except Exception as err:
        raise CudaBuildError(
            f"TIRx compilation for {arch} with {compiler} failed: {_summarize_error(err)}"
        ) from err
    finally:
        captured = state.captured
        header_list = state.headers
        function_info = state.fmap
        state.active, state.request, state.headers, state.captured = False, [], [], []
        state.config, state.fmap = None, None

    host = executable.mod
    devices = [m for m in host.imports if m.kind == "cuda"]
    if len(devices) != 1:
        raise CudaBuildError(
            f"expected exactly one CUDA device module, got {len(devices)}: every kernel must "
            "share one target and backend_config, and the module must launch at least one "
            "kernel (T.launch_thread / T.device_entry)"
        )
    if len(captured) != 1:
        raise CudaBuildError(
            "the tvm_callback_cuda_postproc hook did not see the generated CUDA source "
            f"({len(captured)} calls); another component may have replaced it"
        )
    kernel_source = captured[0]
    payload, device_format, names = devices[0]["__tvm_cuda_binary"]()
    device_format = str(device_format)
    kernel_names = [str(name) for name in names]
    host_embeds = "source" if device_format == "cuda" else "binary"
    if host_embeds == "binary":
        device_binary = bytes(payload)
    elif compile_here:  # the CUDA runtime deferred compilation: compile a copy here
        device_binary, device_format = _compile_device_source(bytes(payload).decode(), config)
    else:  # no device compiler can run here (NVRTC without cuda-bindings)
        device_binary, device_format = None, None

    direct = None
    direct_skipped: dict[str, str] = {}
    if direct_launch:
        if device_binary is None or device_format not in ("cubin", "fatbin"):
            direct_skipped["*"] = f"no cubin/fatbin device binary (format {device_format!r})"
        elif function_info is None:
            direct_skipped["*"] = "the kernels' FunctionInfo was not captured"
        else:
            direct = _DirectLaunch(kernels=function_info, device_binary=device_binary)
    host_library = (
        _export_host_library(executable, direct) if direct else (_export_host_library(executable))
    )
    host_source = str(host.inspect_source())
    direct_kernels: list[str] = []
    if direct is not None:
        direct_kernels = list(direct.applied)
        direct_skipped.update(direct.skipped)
        if direct.error:
            direct_skipped["*"] = direct.error
        if direct.host_source is not None:
            host_source = direct.host_source

    import tvm_ffi

    described = {name: _describe_params(func) for name, func in functions.items()}
    meta = {
        "kind": ARTIFACT_KIND,
        "format_version": FORMAT_VERSION,
        "entry_name": entry_name,
        "functions": described,
        "symbolic_dims": _symbolic_dims(described),
        "kernel_names": kernel_names,
        "arch": arch,
        "compiler": compiler,
        "compile_flags": compile_flags,
        "ptxas_flags": ptxas_flags,
        "fast_math": fast_math,
        "extra_headers": header_list,
        "backend_config": config,
        "device_format": device_format,
        "host_embeds": host_embeds,
        "direct_launch": direct_launch,
        "direct_launch_kernels": direct_kernels,
        "direct_launch_skipped": direct_skipped,
        "tvm_tirx_version": getattr(tvm_tirx, "__version__", "unknown"),
        "tvm_ffi_version": getattr(tvm_ffi, "__version__", "unknown"),
    }
    return CudaArtifact(
        kernel_source=kernel_source,
        host_source=host_source,
        host_library=host_library,
        device_binary=device_binary,
        meta=meta,
    )
