"""Direct kernel launch from the CUDA host library (the ``DIRECT_LAUNCH`` build option).

TIRx's C host code launches each kernel with a tvm-ffi packed call into TIRx's CUDA
module. With the option on, :func:`_direct_launch_source` rewrites those calls into a
``cuLaunchKernel`` of a function loaded from a second, raw copy of the device binary
(embedded as ``__tilelang_cubin`` by :func:`_direct_cubin_asm`); kernels it cannot handle
keep the packed call. :func:`direct_launch_enabled` is the default of
``build_cuda(direct_launch=None)``: the environment variable ``TILELANG_CUDA_DIRECT_LAUNCH``
(default on), read at each build, unless :data:`DIRECT_LAUNCH` here is set to True/False
(``direct_launch.DIRECT_LAUNCH = ...`` changes it in a running process).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .env_switches import DIRECT_LAUNCH_ENV, switch

# Build option: replace each kernel launch of the C host code (a tvm-ffi packed call into
# TIRx's CUDA module) by a direct cuLaunchKernel; see :func:`_direct_launch_source`.
# On by default (checked on the H200: every cuda-marked test passes with it, and a cached
# call costs 4.6 us instead of 5.8 us); ``TILELANG_CUDA_DIRECT_LAUNCH=0`` turns it off (the
# cache key includes that variable). ``True``/``False`` here overrides the variable in this
# process; that does not change cache keys, so clear the cache (or bypass it) when toggling
# it in a process.
DIRECT_LAUNCH: bool | None = None


def direct_launch_enabled() -> bool:
    """The default of ``build_cuda(direct_launch=None)``: :data:`DIRECT_LAUNCH` when set,
    else ``TILELANG_CUDA_DIRECT_LAUNCH`` (default on), read now."""
    return switch(DIRECT_LAUNCH, DIRECT_LAUNCH_ENV)


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
# FunctionInfo.arg_extra_tags value of a grid-constant tensor map (TIRx ArgExtraTags::kTensorMap).
_TENSOR_MAP_TAG = 1
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
/* ---- tilelang direct launch (tilelang/backends/cuda/direct_launch.py, DIRECT_LAUNCH) ---- */
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
/* Launches of this library's kernels: [0] direct, [1] through the packed call (fallback). */
static uint64_t __tl_dl_counts[2];
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
/* The exported function __tilelang_direct_launch_counts(which): which = 0 gives the number
   of direct launches so far, 1 the number of launches that fell back to the packed call. */
TVM_DLL int32_t __tvm_ffi___tilelang_direct_launch_counts(void* self, void* args,
                                                          int32_t num_args, void* result) {
  TVMFFIAny* in = (TVMFFIAny*)args;
  TVMFFIAny* out = (TVMFFIAny*)result;
  int which = (num_args >= 1 && in[0].type_index == kTVMFFIInt) ? (int)in[0].v_int64 : 0;
  out->type_index = kTVMFFIInt;
  out->zero_padding = 0;
  out->v_int64 = (int64_t)__atomic_load_n(&__tl_dl_counts[which == 1], __ATOMIC_RELAXED);
  return 0;
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
      __atomic_fetch_add(&__tl_dl_counts[0], 1, __ATOMIC_RELAXED);
      return 0;
    }}
  }}
  __atomic_fetch_add(&__tl_dl_counts[1], 1, __ATOMIC_RELAXED);
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
    tags = info["arg_extra_tags"]
    for i, tag in enumerate(tags):
        # 1: a grid-constant CUtensorMap passed by value (TMA): its handle points to the map
        if tag not in (0, _TENSOR_MAP_TAG) or (tag and info["arg_types"][i] != "handle"):
            return f"parameter tags {tags}"
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
    extra = info.get("arg_extra_tags") or [0] * len(arg_types)
    for i, dtype in enumerate(arg_types):
        if i < len(extra) and extra[i] == _TENSOR_MAP_TAG:
            # cuLaunchKernel copies the parameter's bytes from the pointer: the map itself
            params.append(f"args[{i}].v_ptr")
            continue
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
