"""Build glue of the ROCm backend: thread-level TIRx -> HIP source -> code object.

``build_hip`` prints the HIP source (``codegen.py``) and, when a HIP toolchain is found
(:func:`find_toolchain`), compiles it with ``hipcc --offload-arch=<arch> --genco`` and
unbundles the device code object (an AMDGPU ELF: what ``hipModuleLoadData`` takes). Without
a toolchain the artifact holds the source only (``code_object is None``); loading it then
fails with a clear error. ``disassemble`` runs the toolchain's ``llvm-objdump``.

Toolchain discovery: ``$HIPCC`` or ``hipcc`` on PATH or ``$ROCM_PATH``/``/opt/rocm``; the
LLVM tools (``clang-offload-bundler``, ``llvm-objdump``) next to hipcc's clang
(``$HIP_CLANG_PATH``, ``/opt/rocm/llvm/bin``, else the newest ``/usr/lib/llvm-*/bin`` that has
them: Debian's ``hipcc`` package uses its system clang). ``HIP_PLATFORM=amd`` is set for
hipcc, which otherwise picks the NVIDIA platform when nvcc is installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import errors
from ..vendor_common import load_artifact, save_artifact, source_sha256
from .codegen import generate_hip, kernel_names

ARTIFACT_KIND = "tilelang.rocm"
_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_ELF_MAGIC = b"\x7fELF"


class HipBuildError(errors.CompileError):
    """hipcc (or the unbundler) failed on the generated HIP source."""


@dataclass(frozen=True)
class HipToolchain:
    """Paths of the HIP compiler and the LLVM tools of the same toolchain."""

    hipcc: str
    bundler: str | None
    objdump: str | None

    def env(self) -> dict:
        """The environment hipcc runs in (AMD platform)."""
        env = dict(os.environ)
        env["HIP_PLATFORM"] = "amd"
        return env


def _llvm_dirs() -> list[str]:
    dirs = []
    if os.environ.get("HIP_CLANG_PATH"):
        dirs.append(os.environ["HIP_CLANG_PATH"])
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    dirs.append(os.path.join(rocm, "llvm", "bin"))

    def version(path):
        tail = path.rstrip("/").split("/")[-2].rsplit("-", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    dirs += sorted(glob.glob("/usr/lib/llvm-*/bin"), key=version, reverse=True)
    return dirs


def _tool(name: str) -> str | None:
    for folder in _llvm_dirs():
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return shutil.which(name)


def find_toolchain() -> HipToolchain | None:
    """The HIP toolchain on this machine, or None (then only source is produced)."""
    hipcc = os.environ.get("HIPCC") or shutil.which("hipcc")
    if hipcc is None:
        rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
        candidate = os.path.join(rocm, "bin", "hipcc")
        hipcc = candidate if os.access(candidate, os.X_OK) else None
    if hipcc is None:
        return None
    return HipToolchain(hipcc, _tool("clang-offload-bundler"), _tool("llvm-objdump"))


def _tool_target(arch: str) -> str:
    return f"hipv4-amdgcn-amd-amdhsa--{arch}"


def compile_hip(source: str, arch: str, flags=(), toolchain: HipToolchain | None = None) -> bytes:
    """The device code object (AMDGPU ELF) of ``source`` for ``arch``.

    Raises HipBuildError with hipcc's diagnostics when compilation fails, and when no
    toolchain is installed.
    """
    tc = toolchain or find_toolchain()
    if tc is None:
        raise HipBuildError("no HIP toolchain: install hipcc (ROCm, or Debian's 'hipcc' package)")
    with tempfile.TemporaryDirectory(prefix="tl_hip_") as tmp:
        src, out = Path(tmp) / "kernel.hip", Path(tmp) / "kernel.hsaco"
        src.write_text(source)
        cmd = [tc.hipcc, f"--offload-arch={arch}", "--genco", "-O3", "-Wno-pragma-once-outside-header",
               *flags, str(src), "-o", str(out)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=tc.env(), check=False)
        if proc.returncode != 0 or not out.exists():
            log = (
                "\n".join(line for line in proc.stderr.splitlines() if "error" in line)
                or proc.stderr
            )
            hint = ""
            if f"invalid target ID '{arch}'" in proc.stderr:
                hint = (
                    f"\nthis HIP toolchain ({tc.hipcc}) does not know {arch}: install a ROCm "
                    "whose clang does (gfx942: ROCm 5.7 or newer; Debian 12's hipcc 5.2 with "
                    "clang 15 knows gfx90a and gfx940). A gfx940 code object checks the CDNA3 "
                    "code here but does not load on a gfx942 GPU."
                )
            raise HipBuildError(f"hipcc --offload-arch={arch} failed:\n{log[-4000:]}{hint}")
        data = out.read_bytes()
        if data.startswith(_ELF_MAGIC):
            return data
        if not data.startswith(_BUNDLE_MAGIC):
            raise HipBuildError(
                "hipcc --genco produced neither a code object nor an offload bundle"
            )
        if tc.bundler is None:
            raise HipBuildError(
                "hipcc produced an offload bundle but clang-offload-bundler is missing"
            )
        obj = Path(tmp) / "kernel.co"
        cmd = [tc.bundler, "--unbundle", "--type=o", f"--input={out}",
               f"--targets={_tool_target(arch)}", f"--output={obj}"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not obj.exists():
            raise HipBuildError(f"unbundling the {arch} code object failed: {proc.stderr[-2000:]}")
        return obj.read_bytes()


def disassemble(code_object: bytes, toolchain: HipToolchain | None = None) -> str:
    """``llvm-objdump -d`` of a code object (the ISA text)."""
    tc = toolchain or find_toolchain()
    if tc is None or tc.objdump is None:
        raise HipBuildError("llvm-objdump of the HIP toolchain not found")
    with tempfile.NamedTemporaryFile(suffix=".co") as handle:
        handle.write(code_object)
        handle.flush()
        proc = subprocess.run(
            [tc.objdump, "-d", handle.name], capture_output=True, text=True, check=False
        )
    if proc.returncode != 0:
        raise HipBuildError(f"llvm-objdump failed: {proc.stderr[-2000:]}")
    return proc.stdout


@dataclass(frozen=True)
class HipArtifact:
    """A built ROCm kernel: HIP source, code object (None without a toolchain), metadata.

    ``meta`` holds ``entry_name``, ``kernel_names``, ``arch``, ``params`` (name, dtype,
    shape of each tensor parameter; symbolic dims as strings), ``launch`` (grid and block
    extents as strings over the parameters' dims), ``dynamic_shared_bytes``,
    ``compile_flags`` and ``sha256`` of the source.
    """

    kernel_source: str
    code_object: bytes | None
    meta: dict[str, Any] = field(default_factory=dict)

    def get_kernel_source(self) -> str:
        """The HIP source (``tl_hip.h`` included)."""
        return self.kernel_source

    def save(self, directory) -> Path:
        """Write ``kernel.hip``, ``kernel.co`` (when compiled) and ``meta.json`` into ``directory``."""
        files = {"kernel.hip": self.kernel_source, "kernel.co": self.code_object}
        return save_artifact(directory, files, self.meta)

    @classmethod
    def load(cls, directory) -> HipArtifact:
        """The artifact :meth:`save` wrote (HipBuildError naming what is missing or damaged)."""
        source, meta, path = load_artifact(
            directory, "kernel.hip", "ROCm", HipBuildError, ARTIFACT_KIND
        )
        code = path / "kernel.co"
        return cls(source, code.read_bytes() if code.exists() else None, meta)


def _describe(func) -> tuple[list, dict, int]:
    """Parameters, launch extents and dynamic LDS bytes of a lowered function."""
    from ...lowering.stmt import launches_of

    params = []
    for p in func.params:
        ty = p.ty
        if hasattr(ty, "shape"):
            params.append(
                {"name": p.name, "dtype": str(ty.dtype), "shape": [str(s) for s in ty.shape]}
            )
        else:
            params.append({"name": p.name, "dtype": str(getattr(ty, "dtype", ty)), "shape": None})
    launches, _ = launches_of(func.body)
    launch = {tag: str(extent) for tag, extent, _ in launches}
    shared = 0
    if func.attrs and "tl.shared_memory" in func.attrs:
        for _, entry in func.attrs["tl.shared_memory"].items():
            shared = max(shared, int(entry[0]) + int(entry[1]))
    return params, launch, shared


def build_hip(func, arch: str = "gfx90a", compile_flags=(), fast_math: bool = True) -> HipArtifact:
    """HIP source of a lowered function, compiled to a code object when hipcc is present."""
    from tvm_tirx import tirx

    source = generate_hip(func)
    flags = list(compile_flags) + (["-ffast-math"] if fast_math else [])
    code_object = None
    if find_toolchain() is not None:
        code_object = compile_hip(source, arch, flags)
    params, launch, shared = _describe(func) if isinstance(func, tirx.Function) else ([], {}, 0)
    names = kernel_names(source)
    meta = {
        "kind": ARTIFACT_KIND,
        "entry_name": names[0] if names else None,
        "kernel_names": names,
        "arch": arch,
        "params": params,
        "launch": launch,
        "dynamic_shared_bytes": shared,
        "compile_flags": flags,
        "sha256": source_sha256(source),
    }
    return HipArtifact(source, code_object, meta)
