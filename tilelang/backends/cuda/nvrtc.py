"""tilelang's NVRTC driver: TIRx's NVRTC invocation with a lighter preamble.

``build_cuda`` compiles device code with NVRTC through this module (see
``headers._compile_device_source`` and the ``tvm_callback_cuda_compile`` dispatcher there)
instead of ``tvm_tirx.support.nvcc._compile_cuda_nvrtc``. The compile options are TIRx's
(architecture, ``-default-device``, ``--device-int128``, ``--no-cache`` on NVRTC >= 12.9,
the CUDA include directories, the deprecation macros, the half/bfloat16 operator
undefines, then the backend config's ``nvrtc`` and ``ptxas`` options), and so is the
source preamble (fixed-width integer types, the ``__asm__`` / ``__volatile__`` spellings,
the ``CUtensorMap`` type when the code names it, no ``#include <cuda.h>``), except:

* ``<cuda/std/limits>`` (TIRx includes it for ``INFINITY`` alone) is included only when
  the code spells ``INFINITY``: that header costs NVRTC about 50 ms of a 300 ms compile
  (NVRTC 13.0, README GEMM);
* the CUDA installation is looked up once per process, not with a ``which nvcc``
  subprocess per compile.

NVRTC keeps no precompiled header across processes (a PCH file written by
``--create-pch`` is rejected by another process: "incompatible precompiled header heap
allocation address"), and its automatic PCH makes the first compile of a process slower,
so neither is used. ``--split-compile`` moves about a third of the work off the calling
thread but the call waits for it: no shorter wall time (README GEMM, 2 idle cores), so it
is not used either. NVSHMEM kernels still go through TIRx's driver.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from .env_switches import NVRTC_DRIVER_ENV, switch

__all__ = ["USE_TILELANG_NVRTC", "compile_nvrtc", "nvrtc_source", "use_tilelang_nvrtc"]

#: ``True``/``False`` forces tilelang's driver on/off in this process (tests and
#: ``benchmark/compile_time.py`` set it); ``None`` (the default) leaves the choice to the
#: environment variable ``TILELANG_CUDA_NVRTC_DRIVER`` (``0``: TIRx's driver).
USE_TILELANG_NVRTC: bool | None = None


def use_tilelang_nvrtc() -> bool:
    """Whether NVRTC compiles go through this driver: :data:`USE_TILELANG_NVRTC` when set,
    else ``TILELANG_CUDA_NVRTC_DRIVER`` (default on), read at each call."""
    return switch(USE_TILELANG_NVRTC, NVRTC_DRIVER_ENV)


_INT_TYPES = """#include <cuda/std/cstdint>
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
using cuda::std::int8_t;
using cuda::std::int16_t;
using cuda::std::int32_t;
using cuda::std::int64_t;

#ifndef __asm__
#define __asm__ asm
#endif
#ifndef __volatile__
#define __volatile__ volatile
#endif

"""
_INFINITY = """#include <cuda/std/limits>
#ifndef INFINITY
#define INFINITY (::cuda::std::numeric_limits<float>::infinity())
#endif

"""
_TENSOR_MAP = """struct alignas(64) CUtensorMap_st {
  unsigned long long opaque[16];
};
typedef struct CUtensorMap_st CUtensorMap;

"""
_FIXED_OPTIONS = (
    "-default-device",
    "--device-int128",
    "-D__NV_SILENCE_DEPRECATION_BEGIN=",
    "-D__NV_SILENCE_DEPRECATION_END=",
    "-D__NV_SILENCE_HOST_DEPRECATION_BEGIN=",
    "-D__NV_SILENCE_HOST_DEPRECATION_END=",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__",
    "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
)
_COMMENT_OR_STRING_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_INFINITY_RE = re.compile(r"\bINFINITY\b")


def nvrtc_source(code: str) -> str:
    """The text handed to NVRTC for generated CUDA ``code`` (see the module docstring)."""
    body = "\n".join(line for line in code.splitlines() if line.strip() != "#include <cuda.h>")
    prefix = _INT_TYPES
    if _INFINITY_RE.search(_COMMENT_OR_STRING_RE.sub(" ", body)):
        prefix += _INFINITY
    if "CUtensorMap" in body:
        prefix += _TENSOR_MAP
    return prefix + body


@functools.lru_cache(maxsize=4)
def _include_options(cuda_path: str) -> tuple[str, ...]:
    from tvm_tirx.support.nvcc import _find_cuda_target_include

    paths = []
    standard = os.path.join(cuda_path, "include")
    if os.path.isdir(standard):
        paths.append(standard)
    arch_include = _find_cuda_target_include(cuda_path)
    if arch_include:
        paths.append(arch_include)
        cccl = os.path.join(arch_include, "cccl")
        if os.path.isdir(cccl):
            paths.append(cccl)
    if not any(os.path.isfile(os.path.join(p, "cuda_runtime.h")) for p in paths):
        raise RuntimeError(
            f"Cannot find CUDA headers in {cuda_path}. Searched in: {paths}. "
            "Please ensure CUDA is properly installed."
        )
    return tuple(f"-I{p}" for p in paths)


@functools.lru_cache(maxsize=1)
def _cuda_path_from_nvcc() -> str:
    from tvm_tirx.support.nvcc import find_cuda_path

    return find_cuda_path()


def _cuda_path() -> str:
    return os.environ.get("CUDA_PATH") or _cuda_path_from_nvcc()


@functools.lru_cache(maxsize=1)
def _no_cache_option() -> tuple[str, ...]:
    from cuda.bindings import nvrtc

    status, major, minor = nvrtc.nvrtcVersion()
    ok = status == nvrtc.nvrtcResult.NVRTC_SUCCESS and (major, minor) >= (12, 9)
    return ("--no-cache",) if ok else ()


def _log(nvrtc: Any, prog: Any) -> str:
    status, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode("utf-8", errors="replace").rstrip("\0")


def compile_nvrtc(code: str, config: dict[str, Any]) -> tuple[bytes, str]:
    """Compile CUDA ``code`` with NVRTC under a resolved CUDA backend ``config``.

    Returns ``(binary, format)`` with format ``"cubin"`` or ``"ptx"``
    (``config["target_format"]``, default cubin). Raises RuntimeError with NVRTC's log
    when compilation fails.
    """
    from cuda.bindings import nvrtc
    from tvm_tirx.backend.cuda.backend_config import compiler_options

    fmt = config.get("target_format") or "cubin"
    if fmt not in ("cubin", "ptx"):
        raise ValueError(f"NVRTC produces cubin or ptx, not {fmt!r}")
    arch = str(config["arch"])
    if fmt == "ptx" and arch.startswith("sm_"):
        arch = "compute_" + arch[3:]
    elif fmt == "cubin" and arch.startswith("compute_"):
        arch = "sm_" + arch[8:]
    options = [
        f"--gpu-architecture={arch}",
        *_FIXED_OPTIONS[:2],
        *_no_cache_option(),
        *_include_options(_cuda_path()),
        *_FIXED_OPTIONS[2:],
        *compiler_options(config),
    ]
    status, prog = nvrtc.nvrtcCreateProgram(
        nvrtc_source(code).encode(), b"tvm_kernels.cu", 0, None, None
    )
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"Failed to create NVRTC program: {status}")
    try:
        encoded = [option.encode() for option in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _log(nvrtc, prog)
            raise RuntimeError(
                f"NVRTC compilation failed:\n{log}"
                if log
                else f"NVRTC compilation failed: {status}"
            )
        get_size, get = (
            (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
            if fmt == "cubin"
            else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        )
        status, size = get_size(prog)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"Failed to get the {fmt} size: {status}")
        buf = bytearray(size)
        (status,) = get(prog, buf)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"Failed to get the {fmt}: {status}")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(buf), fmt
