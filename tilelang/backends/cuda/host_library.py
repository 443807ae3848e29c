"""Host library of a CUDA artifact: the C host module exported as a shared library.

The C host code is compiled by a C compiler (:func:`_c_compiler`: ``$CC``, gcc, cc or
clang; TIRx's default is the slower C++ compiler); the packed device module is an
assembler ``.incbin`` of its bytes (:func:`_pack_imports_to_asm`) rather than a C byte
array, assembled by the link command itself (:func:`_shared_library_compiler`). With a
:class:`~.direct_launch._DirectLaunch` the kernel launches are rewritten for direct launch
on the way. Entry point: :func:`_export_host_library`.

The C file can be compiled before the export, while the device compiler runs
(:func:`start_host_object`, used by ``overlap.py``): the export then links that object
when the C file it writes and the compiler options are exactly the ones compiled early,
and compiles the file itself otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .direct_launch import _apply_direct_launch, _direct_launch_source, _DirectLaunch
from .errors import CudaBuildError
from .tensor_map import HOST_HELPERS

HOST_LIBRARY_FILE = "host.so"  # also the artifact's file name (see build.py)

# The C host code generator spells float16 pointers `half*`, a type C does not have.
_HOST_TYPES_HEADER = (
    """#include <stdint.h>
typedef uint16_t half;
"""
    + HOST_HELPERS
)

# The grid of a persistent kernel (tl.persistent_tiles, passes/persistent_tiles.py) is
# min(tiles, __tl_sm_count()): the multiprocessor count of the current context's device
# (libcuda through dlopen, resolved once; cached per device). Where the driver cannot say,
# INT32_MAX: one block per tile, which computes the same result. Test hook: a positive
# TILELANG_CUDA_SM_COUNT (read once per library, at its first persistent launch) replaces
# the device's count, so a GPU test can run fewer blocks than SMs.
SM_COUNT_ENV = "TILELANG_CUDA_SM_COUNT"
SM_COUNT_HELPER = """
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#define TL_SM_MAX_DEVICES 64
#ifdef __cplusplus
extern "C" { /* TIRx's host code declares the callee with C linkage */
#endif
static int (*__tl_sm_ctx_get_device)(int*);
static int (*__tl_sm_device_attribute)(int*, int, int);
static pthread_once_t __tl_sm_once = PTHREAD_ONCE_INIT;
static int __tl_sm_counts[TL_SM_MAX_DEVICES];
static int __tl_sm_override;
static void __tl_sm_resolve(void) {
  const char* env = getenv("TILELANG_CUDA_SM_COUNT");
  char* end = NULL;
  long value = env != NULL ? strtol(env, &end, 10) : 0;
  if (env != NULL && *env != 0 && *end == 0 && value > 0 && value < INT32_MAX)
    __tl_sm_override = (int)value;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return;
  *(void**)(&__tl_sm_ctx_get_device) = dlsym(lib, "cuCtxGetDevice");
  *(void**)(&__tl_sm_device_attribute) = dlsym(lib, "cuDeviceGetAttribute");
}
static int32_t __tl_sm_count(void) {
  int device = -1, count = 0;
  pthread_once(&__tl_sm_once, __tl_sm_resolve);
  if (__tl_sm_override > 0) return __tl_sm_override;
  if (__tl_sm_ctx_get_device == NULL || __tl_sm_device_attribute == NULL ||
      __tl_sm_ctx_get_device(&device) != 0 || device < 0 || device >= TL_SM_MAX_DEVICES)
    return INT32_MAX;
  count = __atomic_load_n(&__tl_sm_counts[device], __ATOMIC_RELAXED);
  if (count > 0) return count;
  /* 16: CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  if (__tl_sm_device_attribute(&count, 16, device) != 0 || count <= 0) return INT32_MAX;
  __atomic_store_n(&__tl_sm_counts[device], count, __ATOMIC_RELAXED);
  return count;
}
#ifdef __cplusplus
}
#endif
"""
_HOST_TYPES_HEADER += SM_COUNT_HELPER


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


def _apply_c_postproc(sources, originals: dict) -> None:
    """The registered C host hook (``tilelang.register_c_postproc``) on each C source file
    (and on the file before the direct-launch rewrite, which a failed rewrite falls back to)."""
    from ...engine import callback

    for source in sources:
        if source.endswith(".c"):
            path = Path(source)
            text = path.read_text()
            changed = callback.apply("c", text, {"kind": "c"})
            if changed != text:
                path.write_text(changed)
            if source in originals:
                originals[source] = callback.apply("c", originals[source], {"kind": "c"})


_TYPES_HEADER_FILE = "tilelang_host_types.h"
_EARLY_FOLDER = "early"  # beside "workspace": the early compile's C file and object


def _default_include_options() -> list[str]:
    """The ``-I`` options TIRx's ``export_library`` adds for a C host module."""
    import tvm_ffi.libinfo
    import tvm_tirx.libinfo

    paths = [
        tvm_tirx.libinfo.find_include_path(),
        tvm_ffi.libinfo.find_include_path(),
        tvm_ffi.libinfo.find_dlpack_include_path(),
    ]
    return ["-I" + path for path in paths]


class HostObject:
    """A C host file being compiled to an object in the background (:func:`start_host_object`).

    Owns a temporary directory (the export's, see :func:`_export_host_library`) holding the
    host types header, ``early/lib0.c`` and ``early/lib0.o``. :meth:`close` stops the
    compiler if it still runs and removes the directory.
    """

    def __init__(self, folder: tempfile.TemporaryDirectory, text: str, options: list[str]):
        self.folder = folder
        self.root = folder.name
        self.text = text
        self.options = list(options)
        early = os.path.join(self.root, _EARLY_FOLDER)
        os.mkdir(early)
        self.source = os.path.join(early, "lib0.c")
        self.obj = os.path.join(early, "lib0.o")
        Path(self.source).write_text(text)
        self.proc: subprocess.Popen | None = None
        self.used = False

    def start(self, cc: list[str]) -> None:
        """Start ``cc -c`` on the C file (the command :func:`_shared_library_compiler` runs)."""
        self.cc = list(cc)
        self.cmd = [*cc, "-c", "-fPIC", "-o", self.obj, *self.options, self.source]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def matches(self, cc: list[str], text: str, options: Sequence[str]) -> bool:
        """Whether ``cc`` compiling ``text`` with ``options`` is what this object is from."""
        return (
            self.proc is not None
            and list(cc) == self.cc
            and text == self.text
            and list(options) == self.options
        )

    def wait(self) -> str | None:
        """Wait for the compiler; None when it succeeded, else its command and output."""
        assert self.proc is not None
        out, _ = self.proc.communicate()
        if self.proc.returncode == 0:
            return None
        return f"{' '.join(self.cmd)}\n{out.decode(errors='replace')}"

    def close(self) -> None:
        """Stop the compiler if it still runs; remove the temporary directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self.folder.cleanup()


def start_host_object(host_module: Any, kernels: dict | None) -> HostObject | None:
    """Compile ``host_module``'s C source to an object now, in the background.

    ``kernels`` (the device module's FunctionInfo, see ``direct_launch``) when the export
    will rewrite the launches for direct launch: the early compile takes the rewritten text.
    Returns None where the export would not use a C compiler (no ``$CC``/gcc/cc/clang,
    not Linux) or a C host hook is registered (``tilelang.register_c_postproc``: the export
    runs it, once). The result is a guess the export checks (:meth:`HostObject.matches`).
    """
    import tvm_ffi

    from ...engine.callback import GLOBAL_NAMES

    cc = _c_compiler()
    if not cc or not sys.platform.startswith("linux"):
        return None
    if tvm_ffi.get_global_func(GLOBAL_NAMES["c"], allow_missing=True) is not None:
        return None  # a C host hook (register_c_postproc) runs at the export, once
    text = str(host_module.inspect_source())
    if kernels and "TVMFFIFunctionCall(" in text:
        patched, applied, _skipped = _direct_launch_source(text, kernels)
        if applied:
            text = patched
    folder = tempfile.TemporaryDirectory(prefix="tilelang_cuda_")
    try:
        header = os.path.join(folder.name, _TYPES_HEADER_FILE)
        Path(header).write_text(_HOST_TYPES_HEADER)
        job = HostObject(folder, text, ["-include", header, *_default_include_options()])
        job.start(cc)
    except Exception:
        folder.cleanup()
        raise
    return job


def _shared_library_compiler(
    cc: list[str], direct: _DirectLaunch | None = None, early: HostObject | None = None
) -> Any:
    """An ``export_library`` ``fcompile``: compile the C inputs in parallel, then link.

    Assembler inputs (the ``.incbin`` files) go to the link command, which assembles them.
    With ``direct``, the C host file's kernel launches are rewritten for direct launch
    (:func:`_direct_launch_source`) and the device binary is embedded a second time as
    the raw image ``__tilelang_cubin``. If the rewritten file fails to compile, the
    original file is compiled instead (``direct.error`` says why). A C file that ``early``
    (:func:`start_host_object`) compiled with the same text and options is not compiled
    again: its object is linked.
    """

    def run_all(jobs: list[tuple[list[str], str, HostObject | None]]) -> list[tuple[str, str]]:
        procs = [
            (
                cmd,
                source,
                job,
                None
                if job is not None
                else subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT),
            )
            for cmd, source, job in jobs
        ]
        failures = []
        for cmd, source, job, proc in procs:
            if job is not None:
                error = job.wait()
                if error is not None:
                    failures.append((source, error))
                continue
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
        _apply_c_postproc(sources, originals)
        for source in sources:
            if source.endswith((".o", ".a", ".so", ".s")):
                linked.append(source)
                continue
            obj = os.path.splitext(source)[0] + ".o"
            cmd = [*cc, "-c", "-fPIC", "-o", obj, *options, source]
            if early is not None and not early.used and source.endswith(".c"):
                if early.matches(cc, Path(source).read_text(), options):
                    early.used = True
                    jobs.append((cmd, source, early))
                    linked.append(early.obj)
                    continue
            jobs.append((cmd, source, None))
            linked.append(obj)
        failures = run_all(jobs)
        if failures and direct is not None and all(src in originals for src, _ in failures):
            # The rewritten host code did not compile: keep the packed calls.
            direct.error = "the rewritten host code did not compile:\n" + failures[0][1]
            direct.applied, direct.host_source = [], None
            for source, _ in failures:
                Path(source).write_text(originals[source])
            retry = []
            for cmd, source, job in jobs:
                if source in originals:
                    retry.append((cmd, source, None))
                    if job is not None:  # compiled early: link the fresh object instead
                        linked[linked.index(job.obj)] = os.path.splitext(source)[0] + ".o"
            failures = run_all(retry)
        if failures:
            raise RuntimeError("Compilation error:\n" + "\n".join(text for _, text in failures))
        extra = ["-ldl", "-lpthread"]  # direct launch, __tl_sm_count (persistent kernels)
        cmd = [*cc, "-shared", "-fPIC", "-o", output, *linked, *extra]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"Link error:\n{' '.join(cmd)}\n{proc.stdout.decode(errors='replace')}"
            )

    fcompile.output_format = "so"
    return fcompile


def _export_host_library(
    executable: Any, direct: _DirectLaunch | None = None, early: HostObject | None = None
) -> bytes:
    """Export the C host module (with its device import) as a shared library's bytes.

    With a C compiler on PATH (``$CC``, gcc, cc, clang) the host C file is compiled and
    linked with the packed device module (an ``.incbin`` assembler file on Linux);
    otherwise TIRx's default compiler builds the C host and a C byte array.
    ``direct`` (Linux with a C compiler only) turns on the direct-launch rewrite; its
    ``applied`` / ``skipped`` / ``error`` fields report what happened. ``early``
    (:func:`start_host_object`): the C file compiled ahead, whose directory the export
    uses and then removes (closing it in every case).
    """
    cc = _c_compiler()
    linux = sys.platform.startswith("linux")
    if direct is not None and not (cc and linux):
        direct.error = "direct launch needs Linux and a C compiler ($CC, gcc, cc or clang)"
        direct = None
    if early is not None and not cc:
        early.close()
        early = None
    folder = (
        early.folder if early is not None else tempfile.TemporaryDirectory(prefix="tilelang_cuda_")
    )
    tmp = folder.name
    try:
        if direct is not None and not re.fullmatch(r"[A-Za-z0-9_./-]+", tmp):
            direct.error = f"the temporary directory {tmp!r} cannot be named in .incbin"
            direct = None
        types_header = os.path.join(tmp, _TYPES_HEADER_FILE)
        if early is None:  # (the early compile may be reading its copy right now)
            Path(types_header).write_text(_HOST_TYPES_HEADER)
        library_path = os.path.join(tmp, HOST_LIBRARY_FILE)
        workspace = os.path.join(tmp, "workspace")
        os.mkdir(workspace)
        try:
            executable.export_library(
                library_path,
                fcompile=_shared_library_compiler(cc, direct, early) if cc else None,
                fpack_imports=_pack_imports_to_asm if cc and linux else _pack_imports_to_c,
                workspace_dir=workspace,
                options=["-include", types_header],
            )
        except Exception as err:
            raise CudaBuildError(f"exporting the host library failed: {err}") from err
        return Path(library_path).read_bytes()
    finally:
        if early is not None:
            early.close()  # stops its compiler first if the export did not use it
        else:
            folder.cleanup()
