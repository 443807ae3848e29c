"""MSL source from thread-level TIRx, through TIRx's Metal printer (``target.build.metal``).

While the printer runs, TIRx's ``tvm_callback_metal_compile(source, target)`` hook is
set to :func:`_inject`: it records each kernel's MSL, pastes ``include/tl_metal.h`` after
the printer's ``using namespace metal;`` and hands the text back as the module's payload
(format ``"metal"``, i.e. source that the Metal runtime compiles when it loads it). The
previous hook, if any, is restored afterwards.

No Metal compiler exists on Linux (Apple's ``metal`` toolchain is macOS-only; neither
PyPI nor Debian has an MSL front end), so the artifact is source only; the tests check its
structure, and ``syntax_check`` compiles it as C++ with clang against a shim header
(``include/msl_shim.h``) that declares the MSL names the kernels use -- a check of
the C++ syntax and of the calls' shapes, not of Metal semantics.
"""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import errors
from ..vendor_common import load_artifact, save_artifact, source_sha256, swapped_global_func

INCLUDE = Path(__file__).resolve().parent / "include"
_HOOK = "tvm_callback_metal_compile"
_LOCK = threading.Lock()
_NAMESPACE = "using namespace metal;\n"
_KERNEL_RE = re.compile(r"^kernel void (\w+)\(", re.M)


class MetalCodegenError(errors.CompileError):
    """TIRx's Metal printer failed on a lowered kernel."""


@dataclass(frozen=True)
class MetalArtifact:
    """A Metal kernel: MSL source (all kernels, helpers included) and metadata."""

    kernel_source: str
    meta: dict[str, Any] = field(default_factory=dict)

    def get_kernel_source(self) -> str:
        """The MSL source."""
        return self.kernel_source

    def save(self, directory) -> Path:
        """Write ``kernel.metal`` and ``meta.json`` into ``directory``."""
        return save_artifact(directory, {"kernel.metal": self.kernel_source}, self.meta)

    @classmethod
    def load(cls, directory) -> MetalArtifact:
        """The artifact :meth:`save` wrote (MetalCodegenError when missing or damaged)."""
        source, meta, _ = load_artifact(directory, "kernel.metal", "Metal", MetalCodegenError)
        return cls(source, meta)


def header_text() -> str:
    """The text of ``include/tl_metal.h``."""
    return (INCLUDE / "tl_metal.h").read_text()


def _inject(source: str) -> str:
    text = str(source)
    if _NAMESPACE in text:
        head, tail = text.split(_NAMESPACE, 1)
        return head + _NAMESPACE + header_text() + tail
    return header_text() + text


def generate_msl(func) -> str:
    """MSL source of a thread-level (lowered) TIRx function or module."""
    import tvm_tirx
    from tvm_tirx import tirx

    mod = tvm_tirx.IRModule.from_expr(func) if isinstance(func, tirx.Function) else func
    sources: list[str] = []

    def hook(source, target):
        text = _inject(source)
        sources.append(text)
        return text.encode(), "metal"

    with swapped_global_func(_HOOK, hook, _LOCK):
        try:
            tirx.compile(mod, target={"kind": "metal", "host": {"kind": "c"}})
        except Exception as err:  # noqa: BLE001 - reported as a compile error
            raise MetalCodegenError(f"printing the Metal kernel failed: {err}") from err
    if not sources:
        raise MetalCodegenError("the Metal printer produced no kernel")
    return "\n".join(sources)


def kernel_names(source: str) -> list[str]:
    """Names of the ``kernel void`` functions in ``source``."""
    return _KERNEL_RE.findall(source)


def build_metal(func, target=None) -> MetalArtifact:
    """A :class:`MetalArtifact` (source only: no Metal compiler runs on this platform)."""
    from ...engine import callback

    source = callback.apply("metal", generate_msl(func), target or {"kind": "metal"})
    meta = {
        "kind": "tilelang.metal",
        "arch": (target or {}).get("arch", "apple7"),
        "kernel_names": kernel_names(source),
        "sha256": source_sha256(source),
    }
    return MetalArtifact(source, meta)


def syntax_check(source: str, compiler: str | None = None) -> None:
    """Compile ``source`` as C++17 with clang against ``include/msl_shim.h``
    (``-fsyntax-only``); raises MetalCodegenError with the diagnostics when it fails.

    Not a Metal compiler: the shim declares address-space keywords, attributes, vector
    types and the ``simd_*``/``simdgroup_*``/atomic functions the generated code calls.
    """
    clang = (
        compiler
        or shutil.which("clang++")
        or next((c for c in sorted(glob.glob("/usr/bin/clang++-*"), reverse=True)), None)
    )
    if clang is None:
        raise MetalCodegenError("no clang for the MSL syntax check")
    with tempfile.TemporaryDirectory(prefix="tl_msl_") as tmp:
        path = Path(tmp) / "kernel.cpp"
        path.write_text(source.replace("#include <metal_stdlib>", '#include "msl_shim.h"'))
        cmd = [clang, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wno-everything",
               "-I", str(INCLUDE), str(path)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise MetalCodegenError(f"MSL syntax check failed:\n{proc.stderr[-4000:]}")
