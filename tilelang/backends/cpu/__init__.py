"""The CPU backend: LLVM through TIRx; see ``pipeline.py`` for the pass order."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import tvm_ffi

from ..registry import register_backend
from . import pipeline


@dataclass
class CpuArtifact:
    """A built CPU kernel: the shared library, its entry point and its source views."""

    lib_path: str  # "" once the build's temporary directory is gone (see CpuBackend.build)
    entry: str
    kernel_source: str
    files: dict = field(default_factory=dict)
    # the library's bytes and the loaded module: a kernel keeps working when the file it
    # was loaded from is deleted (cache eviction, clear_cache, temp-dir cleanup)
    lib_bytes: bytes | None = field(default=None, repr=False, compare=False)
    module: object = field(default=None, repr=False, compare=False)

    def library_bytes(self) -> bytes:
        """The shared library's contents."""
        if self.lib_bytes is None:
            self.lib_bytes = Path(self.lib_path).read_bytes()
        return self.lib_bytes

    def function(self):
        """The kernel's packed function (the library is loaded once, when first needed)."""
        if self.module is None:
            if not self.lib_path or not os.path.exists(self.lib_path):
                raise FileNotFoundError(
                    f"the CPU kernel library {self.lib_path!r} is gone and was never loaded"
                )
            self.module = tvm_ffi.load_module(self.lib_path)
        return self.module[self.entry]

    def save(self, directory) -> Path:
        """Write the artifact as plain files into ``directory`` (created if missing).

        Files: ``kernel.so``, ``kernel_source.py`` and ``meta.json``, which records the
        entry name and each file's size and sha256. Each file goes through a temporary
        file and ``os.replace``; meta.json is written last.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        payload = {
            _LIB_FILE: self.library_bytes(),
            _SOURCE_FILE: self.kernel_source.encode(),
        }
        for name, data in payload.items():
            _atomic_write(path / name, data)
        meta = {
            "kind": _ARTIFACT_KIND,
            "format_version": _FORMAT_VERSION,
            "entry": self.entry,
            "files": {
                name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in payload.items()
            },
        }
        _atomic_write(path / _META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())
        return path

    @classmethod
    def load(cls, directory) -> CpuArtifact:
        """Read an artifact written by :meth:`save`, verifying every file's size and sha256.

        Raises ``ValueError`` naming the directory and the file when something is missing,
        truncated or altered. The returned ``lib_path`` points into ``directory``.
        """
        path = Path(directory)
        try:
            meta = json.loads((path / _META_FILE).read_bytes())
        except (OSError, ValueError) as err:
            raise ValueError(
                f"CPU artifact {str(path)!r}: {_META_FILE} is unreadable: {err}"
            ) from err
        if not isinstance(meta, dict) or meta.get("kind") != _ARTIFACT_KIND:
            raise ValueError(f"CPU artifact {str(path)!r}: {_META_FILE} is not a CPU artifact")
        if meta.get("format_version") != _FORMAT_VERSION or not isinstance(meta.get("entry"), str):
            raise ValueError(f"CPU artifact {str(path)!r}: unsupported {_META_FILE}")
        files = meta.get("files")
        if not isinstance(files, dict) or set(files) != {_LIB_FILE, _SOURCE_FILE}:
            raise ValueError(f"CPU artifact {str(path)!r}: {_META_FILE} lists the wrong files")
        data = {}
        for name, info in files.items():
            try:
                blob = (path / name).read_bytes()
            except OSError as err:
                raise ValueError(f"CPU artifact {str(path)!r}: file {name!r}: {err}") from err
            if not isinstance(info, dict) or len(blob) != info.get("size"):
                raise ValueError(f"CPU artifact {str(path)!r}: file {name!r} has the wrong size")
            if hashlib.sha256(blob).hexdigest() != info.get("sha256"):
                raise ValueError(f"CPU artifact {str(path)!r}: file {name!r} fails its sha256")
            data[name] = blob
        lib_path = str(path / _LIB_FILE)
        artifact = cls(lib_path, meta["entry"], data[_SOURCE_FILE].decode(), {_LIB_FILE: lib_path})
        artifact.lib_bytes = data[_LIB_FILE]
        artifact.function()  # load now: the entry may be evicted before the first call
        return artifact


_ARTIFACT_KIND = "tilelang.cpu"
_FORMAT_VERSION = 1
_LIB_FILE = "kernel.so"
_SOURCE_FILE = "kernel_source.py"
_META_FILE = "meta.json"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CpuBackend:
    """Compiles kernels to host code; blocks run in parallel over cores."""

    name = "cpu"
    artifact_type = CpuArtifact  # save(dir) / load(dir): what the disk cache stores

    def build(self, func, *, target, pass_configs=None, compile_flags=None, out_dir=None):
        """Compile ``func``; the library is loaded now and, without ``out_dir``, its
        temporary directory removed (the artifact keeps the bytes for the disk cache)."""
        entry = (
            str(func.attrs["global_symbol"])
            if func.attrs and "global_symbol" in func.attrs
            else "main"
        )
        keep = out_dir is not None
        work = out_dir if keep else tempfile.mkdtemp(prefix="tilelang_cpu_")
        try:
            lib_path, lowered = pipeline.build(func, pass_configs, out_dir=work)
            artifact = CpuArtifact(lib_path, entry, lowered.script(), {"kernel.so": lib_path})
            artifact.library_bytes()
            artifact.function()
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
        if not keep:
            artifact.lib_path, artifact.files = "", {}
        return artifact

    def load(self, artifact: CpuArtifact):
        """The packed function of a built or cached artifact."""
        return artifact.function()


register_backend("cpu", CpuBackend())
