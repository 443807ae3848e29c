"""Build glue of the CUDA backend: thread-level TIRx -> device binary + host library.

``build_cuda`` is the last stage of the CUDA pipeline. Its input is a TIRx ``IRModule``
(or ``tvm_tirx.tirx.Function``) that is already thread-level (``T.launch_thread``,
``T.alloc_shared``, ``T.call_extern``, ...). It compiles it with
``tvm_tirx.tirx.compile`` against a C host (``{"kind": "c"}``: the host side is plain C
built with the system C compiler, so neither TIRx's LLVM backend nor orcjit is needed),
and packages the result as a :class:`CudaArtifact`:

* the CUDA source, with tilelang's device headers
  (``tilelang/backends/cuda/include/tl_templates/cuda/*.h``) pasted in front of it (by
  default only the headers whose ``tl::`` helpers the generated code calls; see
  :func:`select_headers`),
* the compiled device binary (a cubin),
* the host shared library (the C host module exported with ``export_library``; it
  embeds the device module and is what ``runtime.load_kernel`` loads),
* JSON metadata (entry name, parameters with dtypes and symbolic shapes, arch,
  compiler, flags, file sizes and sha256 hashes).

This module holds the artifact, its metadata, the backend config and ``build_cuda``; the
rest lives next to it: ``headers.py`` (device headers and the TIRx postproc / module
factory hooks), ``host_library.py`` (C compiler, packing the device module, exporting the
host library), ``direct_launch.py`` (the ``DIRECT_LAUNCH`` option and its host-code
rewrite) and ``errors.py`` (the exceptions). The public names of ``headers.py`` and the
exceptions are re-exported here. Module flags and hooks are read from the module that owns
them: set or patch ``direct_launch.DIRECT_LAUNCH`` (None: the environment variable, see
``env_switches.py``), ``host_library._c_compiler`` /
``host_library._export_host_library`` and ``headers._PREVIOUS_HOOK`` there.

How the TIRx hooks are used (see also the module docstring of ``runtime``):

* Header injection (``headers.py``): the CUDA code generator (``target.build.cuda``)
  passes the complete generated source through the global function
  ``tvm_callback_cuda_postproc(code, target) -> code`` before handing it to the device
  compiler. ``headers.py`` registers one dispatcher for it that is a no-op except inside
  ``build_cuda`` on the calling thread, where it prepends the header text and records the
  final source. It also drops the ``<cuda/std/type_traits>`` block of TIRx's prelude when
  nothing uses ``std::`` traits: under NVRTC that one include costs about half a second
  of every compile.
* Host library (``host_library.py``): the C host code is compiled by a C compiler
  (``$CC``, gcc, cc or clang; TIRx's default is the slower C++ compiler), in parallel with
  the packed device module, which is an assembler ``.incbin`` of its bytes rather than a C
  byte array; then linked.
* Compiler choice and flags: ``target["backend_config"]["cuda"]`` with the keys
  ``compiler`` ("nvcc" | "nvrtc"), ``target_format``, and argv lists ``nvcc``,
  ``nvrtc``, ``ptxas``. A list replaces TIRx's default list, so the defaults are kept
  here and the caller's flags appended. Architecture and output options are reserved.
* Direct launch (``direct_launch.py``, on by default): the host library's kernel launches
  become ``cuLaunchKernel`` calls of a raw copy of the cubin; see ``build_cuda``.
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
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...lowering.kernel_hints import ATTR_MIN_BLOCKS_PER_SM, ATTR_NON_RESTRICT
from . import direct_launch as _direct_launch_module
from . import host_library as _host_library_module
from . import overlap as _overlap_module
from .compact_source import compact_pipeline, unroll_in_device_compiler
from .direct_launch import _DirectLaunch
from .errors import CorruptArtifactError, CudaBuildError
from .headers import (
    _STATE,
    _compile_device_source,
    _device_factory,
    _install_postproc_hook,
    _resolve_header_request,
    _summarize_error,
    header_names,
    header_prelude,
    select_headers,
    template_dir,
)
from .host_library import HOST_LIBRARY_FILE

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
SOURCE_FILE = "kernel.cu"
HOST_SOURCE_FILE = "host.c"
META_FILE = "meta.json"
_ARCH_RE = re.compile(r"sm_[0-9]+[af]?")
# TIRx's own defaults (tvm_tirx.backend.cuda.backend_config.default_backend_config).
_DEFAULT_PTXAS = ("-v", "--warn-on-local-memory-usage", "--register-usage-level=10")


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


def _nvrtc_available() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        return False


def _source_hints(functions) -> dict:
    """The hints of ``language/hints.py`` the CUDA source carries, over all ``functions``."""

    min_blocks, names = None, []
    for func in functions.values():
        attrs = func.attrs or {}
        if ATTR_MIN_BLOCKS_PER_SM in attrs:
            min_blocks = max(min_blocks or 0, int(attrs[ATTR_MIN_BLOCKS_PER_SM]))
        names += [str(n) for n in attrs.get(ATTR_NON_RESTRICT, [])]
    hints = {}
    if min_blocks:
        hints["min_blocks"] = min_blocks
    if names:
        hints["non_restrict"] = sorted(set(names))
    return hints


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
    compact: bool | None = None,
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
            :func:`.direct_launch._direct_launch_source`); ``None`` asks
            :func:`.direct_launch.direct_launch_enabled` (the module flag
            ``DIRECT_LAUNCH`` when set, else ``TILELANG_CUDA_DIRECT_LAUNCH``). Kernels it cannot
            handle keep the packed call.
        compact: keep ``T.unroll`` loops as ``#pragma unroll`` loops for the device
            compiler to unroll, and skip TIRx's device-side StmtSimplify (which re-inlines
            CSE's bindings); see ``compact_source.py``. ``None`` means True;
            ``pipeline.build`` passes the pass config ``tl.compact_source``. The code means
            the same either way.

    Returns:
        A :class:`CudaArtifact`. Its ``meta`` holds ``entry_name``, ``functions`` (each
        parameter's name, kind, dtype and shape, symbolic dims as strings),
        ``symbolic_dims``, ``kernel_names``, ``arch``, ``compiler``, ``compile_flags``,
        ``ptxas_flags``, ``extra_headers`` (the pasted headers), ``backend_config``, ``device_format`` and
        ``host_embeds`` (``"binary"`` or ``"source"``), ``direct_launch`` (the option),
        ``direct_launch_kernels`` (kernels launched directly), ``direct_launch_skipped``
        ({kernel or "*": why it keeps the packed call}) and ``compact`` (the option).

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
        direct_launch = _direct_launch_module.direct_launch_enabled()
    direct_launch = bool(direct_launch)
    compact = True if compact is None else bool(compact)
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
    state.hints = _source_hints(functions)
    request = None  # overlap.py: the host C compile started during tirx.compile
    try:
        with contextlib.ExitStack() as stack:
            if compact:
                pipeline = compact_pipeline(pipeline)
                stack.enter_context(unroll_in_device_compiler())
            # (the recording wrapper of a CUDA runtime's factory is also what defers it)
            record = direct_launch or _overlap_module.overlap_enabled()
            stack.enter_context(_device_factory(record=record))
            request = stack.enter_context(_overlap_module.overlapped(direct_launch))
            executable = tirx.compile(mod, target=target, pipeline=pipeline)
    except Exception as err:
        if request is not None and request.early is not None:
            request.early.close()
        raise CudaBuildError(
            f"TIRx compilation for {arch} with {compiler} failed: {_summarize_error(err)}"
        ) from err
    finally:
        captured = state.captured
        header_list = state.headers
        function_info = state.fmap
        state.active, state.request, state.headers, state.captured = False, [], [], []
        state.config, state.fmap, state.hints = None, None, {}

    early = request.early if request is not None else None
    try:
        return _package(
            executable,
            config,
            captured,
            header_list,
            function_info,
            functions,
            entry_name,
            arch=arch,
            compiler=compiler,
            compile_flags=compile_flags,
            ptxas_flags=ptxas_flags,
            fast_math=fast_math,
            direct_launch=direct_launch,
            compact=compact,
            compile_here=compile_here,
            early=early,
        )
    finally:
        if early is not None:
            early.close()  # (idempotent: the export closes it)


def _package(
    executable,
    config,
    captured,
    header_list,
    function_info,
    functions,
    entry_name,
    *,
    arch,
    compiler,
    compile_flags,
    ptxas_flags,
    fast_math,
    direct_launch,
    compact,
    compile_here,
    early,
) -> CudaArtifact:
    """The artifact of a compiled executable: device binary, host library, metadata."""
    import tvm_tirx

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
    export = _host_library_module._export_host_library  # looked up at call time
    extra = {"early": early} if early is not None else {}
    host_library = export(executable, direct, **extra) if direct else export(executable, **extra)
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
        "compact": compact,
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
