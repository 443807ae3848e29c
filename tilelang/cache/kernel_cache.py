"""The disk cache of compiled kernels: plain files, atomic publication, verified loads.

Where: ``$TILELANG_CACHE_DIR`` or ``~/.tilelang/cache``; off with
``TILELANG_DISABLE_CACHE=1`` (or :func:`disable_cache`). Layout::

    <root>/kernels/<key[:2]>/<key>/entry.json     key material, file sizes + sha256
    <root>/kernels/<key[:2]>/<key>/artifact/...   the backend artifact's own files
    <root>/kernels/<key[:2]>/<key>.lock           fcntl.flock lock of that key
    <root>/tmp/                                   staging and discarded entries
    <root>/autotuner/<key>.json                   best configs (tilelang.autotuner)

The key (:func:`cache_key`) is the sha256 of: the traced function's structural hash and
``script()`` text, target (kind, arch ...), out_idx, execution backend, pass configs
(except the observation-only ones: IR dumps, pass timing), compile flags, the versions
of tilelang (VERSION), tvm_tirx and tvm_ffi, a fingerprint of tilelang's own sources
(``tilelang/**/*.py`` and the device headers ``tilelang/**/*.h``: editing a lowering
invalidates the kernels it built), the machine (OS, architecture) and the registered source
post-processing hooks (``tilelang/engine/callback.py``).

Entries are written into ``<root>/tmp/<random>/`` (the artifact's ``save(dir)``, then
``entry.json`` with every file's sha256) and published with one ``os.replace`` of the
directory, under an exclusive ``flock`` of the key held while compiling: concurrent
threads or processes compiling one kernel build it once and the others load it. A load
checks ``entry.json`` and every file's size and sha256 before the artifact's
``load(dir)``; a bad entry is discarded (under the lock) and rebuilt, never a crash.
Nothing is unpickled.

Size: after each store, entries beyond ``$TILELANG_CACHE_MAX_BYTES`` (default ``8G``; suffixes
K/M/G/T; ``0`` or ``none`` for no limit) are removed, least recently used first (a load
touches ``entry.json``; entries whose key lock is held are skipped; the new entry is kept).
:func:`prune_cache` does the same on demand.

A backend takes part when its artifact class has ``save(dir)`` and a classmethod
``load(dir)`` (``backend.artifact_type``, else CpuArtifact / CudaArtifact by kind);
others compile every time. While an IR dump or pass timing is requested, the cache is
bypassed so that the build really runs.

Layering: this module is a disk store. It knows nothing of ``JITKernel``, ``tilelang.jit``
or the autotuner: :meth:`KernelCache.get_or_build` gets the build function and a
``wrap(artifact)`` that turns a loaded artifact into the caller's object
(``tilelang.jit`` passes both), and the in-memory caches above it register their clear
functions with :func:`register_memory_cache`. It sits above ``backends`` and
``engine.pass_config`` in the package's layer order (``testing/python/test_floor_plan.py``),
so it may ask the backend registry for artifact types and the CPU backend for the host
CPU model, and normalise pass configs, when it computes a key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import threading
import time
import uuid
import warnings
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: threads still exclude each other, processes may both build
    fcntl = None

FORMAT = 1
ENTRY_FILE = "entry.json"
ARTIFACT_DIR = "artifact"
_TRUE = {"1", "true", "yes", "on"}
_DISABLED = False  # set by disable_cache()
_KEY_LOCKS: dict[str, threading.Lock] = {}
_KEY_LOCKS_GUARD = threading.Lock()
_FINGERPRINT: str | None = None
_MEMORY_CACHES: list = []  # clear functions of the in-memory caches above (jit, autotuner)
_FALLBACK_TYPES = {
    "cpu": ("tilelang.backends.cpu", "CpuArtifact"),
    "cuda": ("tilelang.backends.cuda", "CudaArtifact"),
}


# --------------------------------------------------------------------------- settings


def get_cache_dir() -> Path:
    """The cache root: ``$TILELANG_CACHE_DIR`` or ``~/.tilelang/cache`` (read on each call)."""
    root = os.environ.get("TILELANG_CACHE_DIR", "").strip()
    return Path(root).expanduser() if root else Path.home() / ".tilelang" / "cache"


def is_cache_enabled() -> bool:
    """False when ``TILELANG_DISABLE_CACHE`` is set (1/true/yes/on) or after :func:`disable_cache`."""
    env = os.environ.get("TILELANG_DISABLE_CACHE", "").strip().lower()
    return not _DISABLED and env not in _TRUE


def disable_cache() -> None:
    """Turn the disk cache off in this process (kernels still build and run)."""
    global _DISABLED
    _DISABLED = True


def enable_cache() -> None:
    """Undo :func:`disable_cache` (the environment variable still applies)."""
    global _DISABLED
    _DISABLED = False


_DEFAULT_MAX_BYTES = 8 << 30
_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str, name: str = "TILELANG_CACHE_MAX_BYTES") -> int | None:
    """Bytes of a size like ``"512M"``, ``"8G"``, ``"1000000"``; None for ``0``/``none``."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B") if text else ""
    if raw in ("0", "NONE", "OFF", "UNLIMITED"):
        return None
    number, unit = raw, ""
    if raw and raw[-1] in _SIZE_UNITS:
        number, unit = raw[:-1], raw[-1]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(
            f"{name}={text!r}: expected a size such as 8G, 512M or 1000000 (bytes), "
            "or 0/none for no limit"
        )
    return int(value * _SIZE_UNITS[unit])


def get_cache_max_bytes() -> int | None:
    """The size limit of the kernel cache (``$TILELANG_CACHE_MAX_BYTES``, default 8 GiB)."""
    text = os.environ.get("TILELANG_CACHE_MAX_BYTES", "").strip()
    return parse_size(text) if text else _DEFAULT_MAX_BYTES


def prune_cache(max_bytes: int | None = None) -> int:
    """Remove least recently used kernels until the cache holds at most ``max_bytes``.

    ``max_bytes`` defaults to :func:`get_cache_max_bytes`. Returns the bytes removed.
    """
    limit = get_cache_max_bytes() if max_bytes is None else max_bytes
    return 0 if limit is None else KernelCache().prune(limit)


def register_memory_cache(clear) -> None:
    """Have :func:`clear_cache` call ``clear()`` (an in-memory cache of kernels or results).

    ``tilelang.jit`` registers ``tilelang.compile``'s cache, ``tilelang.autotuner`` its
    results; registering one function twice registers it once.
    """
    if clear not in _MEMORY_CACHES:
        _MEMORY_CACHES.append(clear)


def clear_cache() -> None:
    """Delete every cached kernel and autotuning result, on disk and in this process's memory.

    In memory this clears the caches registered with :func:`register_memory_cache`
    (``tilelang.compile``'s cache and the autotuner's results); a ``@tilelang.jit``
    factory keeps the kernels it already returned, per argument tuple.
    """
    root = get_cache_dir()
    for sub in ("kernels", "autotuner", "tmp"):
        shutil.rmtree(root / sub, ignore_errors=True)
    for clear in list(_MEMORY_CACHES):
        clear()


# --------------------------------------------------------------------------- key


def versions() -> dict:
    """The versions of tilelang, tvm_tirx and tvm_ffi (part of every key)."""
    return _versions()


def _versions() -> dict:
    import tvm_ffi
    import tvm_tirx

    from ..version import __version__

    return {
        "tilelang": __version__,
        "tvm_tirx": getattr(tvm_tirx, "__version__", "?"),
        "tvm_ffi": getattr(tvm_ffi, "__version__", "?"),
    }


def source_fingerprint() -> str:
    """sha256 of tilelang's Python sources and device headers (computed once per process).

    Covers every ``.py``, ``.h`` and ``.cuh`` file of the installed ``tilelang`` package
    (the CUDA headers ship inside it, under ``backends/cuda/include``).
    """
    global _FINGERPRINT
    if _FINGERPRINT is None:
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        digest = hashlib.sha256()
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".py", ".h", ".cuh")):
                    path = os.path.join(dirpath, name)
                    digest.update(os.path.relpath(path, package).encode() + b"\0")
                    with contextlib.suppress(OSError), open(path, "rb") as handle:
                        digest.update(handle.read())
        _FINGERPRINT = digest.hexdigest()
    return _FINGERPRINT


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def _out_idx(out_idx, n: int) -> list[int]:
    if out_idx is None:
        return []
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    return [int(i) + n if int(i) < 0 else int(i) for i in items]


def _host_code_cpu(target) -> list[str]:
    """The CPU model a CPU-backend kernel is compiled for (its code uses that CPU's ISA)."""
    from ..backends.registry import resolve_target

    if resolve_target(target)["kind"] != "cpu":
        return []
    from ..backends.cpu.pipeline import host_cpu

    return [host_cpu() or "generic"]


def key_material(
    func, *, target, out_idx=None, execution_backend="auto", pass_configs=None, compile_flags=None
) -> dict:
    """Everything the cache key covers, as a JSON-able dict (see the module docstring)."""
    import tvm_ffi

    from ..engine.callback import fingerprint as postproc_fingerprint
    from ..engine.pass_config import OBSERVATION_KEYS, normalize_pass_configs

    try:
        script = func.script()
    except Exception:  # noqa: BLE001 - the structural hash still identifies the IR
        script = ""
    configs = {
        k: v for k, v in normalize_pass_configs(pass_configs).items() if k not in OBSERVATION_KEYS
    }
    return {
        "format": FORMAT,
        "func_hash": str(tvm_ffi.structural_hash(func)),
        "func_script_sha256": hashlib.sha256(script.encode()).hexdigest(),
        "target": _jsonable(target),
        "out_idx": _out_idx(out_idx, len(func.params)),
        "execution_backend": str(execution_backend),
        "pass_configs": _jsonable(configs),
        "compile_flags": _jsonable(list(compile_flags or [])),
        "versions": _versions(),
        "source_fingerprint": source_fingerprint(),
        "machine": [platform.system(), platform.machine(), *_host_code_cpu(target)],
        # source post-processing hooks (tilelang.register_cuda_postproc, ...)
        "postproc": postproc_fingerprint(),
        # build switches read from the environment (the CUDA host code's launch path)
        "env": {"TILELANG_CUDA_DIRECT_LAUNCH": os.environ.get("TILELANG_CUDA_DIRECT_LAUNCH", "")},
    }


def cache_key(func, **options) -> str:
    """The hex sha256 naming ``func``'s entry; ``options`` as for :func:`key_material`."""
    material = key_material(func, **options)
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------- artifacts


def artifact_type(kind: str):
    """The artifact class of backend ``kind`` if it can be saved and loaded, else None."""
    import importlib

    from ..backends.registry import get_backend

    try:
        cls = getattr(get_backend(kind), "artifact_type", None)
        if cls is None and kind in _FALLBACK_TYPES:
            module, name = _FALLBACK_TYPES[kind]
            cls = getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - no such backend here: no disk cache for it
        return None
    if cls is None or not callable(getattr(cls, "save", None)):
        return None
    return cls if callable(getattr(cls, "load", None)) else None


def _type_name(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_table(root: Path) -> dict:
    table = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != ENTRY_FILE:
            rel = path.relative_to(root).as_posix()
            table[rel] = {"size": path.stat().st_size, "sha256": _sha256_file(path)}
    return table


class CorruptEntry(Exception):
    """An entry on disk that fails verification (discarded and rebuilt by the cache)."""


# --------------------------------------------------------------------------- cache


class KernelCache:
    """Compiled kernels under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else get_cache_dir()

    def entry_dir(self, key: str) -> Path:
        """The directory of entry ``key``."""
        return self.root / "kernels" / key[:2] / key

    # -- reading -------------------------------------------------------------
    def verify(self, key: str, expected_type) -> Path:
        """Check entry ``key``'s metadata and files; its artifact directory, or CorruptEntry."""
        entry = self.entry_dir(key)
        try:
            meta = json.loads((entry / ENTRY_FILE).read_bytes())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as err:
            raise CorruptEntry(f"{entry}: {ENTRY_FILE} is unreadable: {err}") from err
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key:
            raise CorruptEntry(f"{entry}: {ENTRY_FILE} does not describe key {key}")
        if meta.get("artifact_type") != _type_name(expected_type):
            raise CorruptEntry(f"{entry}: holds a {meta.get('artifact_type')}")
        files = meta.get("files")
        if not isinstance(files, dict) or not files:
            raise CorruptEntry(f"{entry}: {ENTRY_FILE} lists no files")
        for rel, info in files.items():
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts or not isinstance(info, dict):
                raise CorruptEntry(f"{entry}: bad file entry {rel!r}")
            path = entry / rel
            try:
                good = path.stat().st_size == info.get("size")
                good = good and _sha256_file(path) == info.get("sha256")
            except OSError as err:
                raise CorruptEntry(f"{entry}: file {rel!r} is unreadable: {err}") from err
            if not good:
                raise CorruptEntry(f"{entry}: file {rel!r} does not match its sha256")
        return entry / ARTIFACT_DIR

    def load(self, key: str, expected_type, wrap=None):
        """Entry ``key``'s artifact, passed through ``wrap`` when given (None if absent).

        CorruptEntry if the entry fails verification or ``wrap`` fails on it.
        """
        try:
            artifact_dir = self.verify(key, expected_type)
        except FileNotFoundError:
            return None
        with contextlib.suppress(OSError):  # last use, for the size limit's LRU order
            os.utime(self.entry_dir(key) / ENTRY_FILE)
        try:
            artifact = expected_type.load(artifact_dir)
            return artifact if wrap is None else wrap(artifact)
        except Exception as err:  # noqa: BLE001 - a bad entry is rebuilt, not fatal
            raise CorruptEntry(f"{artifact_dir}: cannot be loaded: {err}") from err

    # -- writing -------------------------------------------------------------
    def store(self, key: str, artifact, material: dict) -> Path:
        """Publish ``artifact`` as entry ``key`` (the caller holds the key's lock)."""
        staging = self.root / "tmp" / f"{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            artifact.save(staging / ARTIFACT_DIR)
            meta = {
                "format": FORMAT,
                "key": key,
                "artifact_type": _type_name(type(artifact)),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "material": material,
                "files": _file_table(staging),
            }
            (staging / ENTRY_FILE).write_text(json.dumps(meta, indent=1, sort_keys=True))
            final = self.entry_dir(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                self.discard(key)
            os.replace(staging, final)
            return final
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def discard(self, key: str) -> None:
        """Remove entry ``key`` (moved aside first, so no reader sees half a directory)."""
        entry = self.entry_dir(key)
        trash = self.root / "tmp" / f"discard-{uuid.uuid4().hex}"
        with contextlib.suppress(OSError):
            trash.parent.mkdir(parents=True, exist_ok=True)
            os.replace(entry, trash)
            shutil.rmtree(trash, ignore_errors=True)
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)

    def entries(self) -> list[tuple[float, int, str]]:
        """``(last use, bytes, key)`` of every entry, oldest first (sizes from entry.json)."""
        out = []
        for meta_path in (self.root / "kernels").glob(f"*/*/{ENTRY_FILE}"):
            try:
                used = meta_path.stat().st_mtime
                files = json.loads(meta_path.read_bytes()).get("files", {})
                size = sum(int(info.get("size", 0)) for info in files.values())
                size += meta_path.stat().st_size
            except (OSError, ValueError, AttributeError, TypeError):
                used, size = 0.0, 0  # unreadable: oldest, removed first
            out.append((used, size, meta_path.parent.name))
        out.sort()
        return out

    def prune(self, max_bytes: int, keep: tuple[str, ...] = ()) -> int:
        """Discard least recently used entries until at most ``max_bytes`` remain.

        Entries in ``keep`` and entries whose key lock is held elsewhere stay. Returns the
        bytes removed.
        """
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = 0
        for _, size, key in entries:
            if total <= max_bytes:
                break
            if key in keep:
                continue
            with self.lock(key, timeout=0) as held:
                if not held:
                    continue
                self.discard(key)
            total -= size
            removed += size
        return removed

    @contextlib.contextmanager
    def lock(self, key: str, timeout: float | None = None):
        """Exclusive lock of ``key`` across threads and processes (``fcntl.flock``).

        Yields True when held, False when it could not be taken within ``timeout`` seconds
        (``$TILELANG_CACHE_LOCK_TIMEOUT``, default 600) or the cache is not writable.
        """
        if timeout is None:
            timeout = float(os.environ.get("TILELANG_CACHE_LOCK_TIMEOUT", "600"))
        with _KEY_LOCKS_GUARD:
            thread_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
        if not thread_lock.acquire(timeout=max(timeout, 0.0)):
            yield False
            return
        try:
            path = self.entry_dir(key).with_suffix(".lock")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                yield False
                return
            try:
                deadline = time.monotonic() + timeout
                held = fcntl is None  # without flock only the thread lock applies
                while not held:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        held = True
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            break
                        time.sleep(0.02)
                try:
                    yield held
                finally:
                    if held and fcntl is not None:
                        fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        finally:
            thread_lock.release()

    # -- the entry point -----------------------------------------------------
    def get_or_build(self, material: dict, build, *, expected_type, wrap, artifact_of):
        """The object of key ``material`` made from its entry on disk, or ``build()`` and stored.

        ``material``: the key material (:func:`key_material`); ``build()`` makes the object
        now; ``wrap(artifact)`` makes it from an artifact of ``expected_type`` loaded from
        disk; ``artifact_of(obj)`` is the artifact to store (``tilelang.jit`` passes a
        ``JITKernel`` built or wrapped around the artifact, and its ``.artifact``).
        """
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        with contextlib.suppress(CorruptEntry):  # fast path, no lock: entries are immutable
            kernel = self.load(key, expected_type, wrap)
            if kernel is not None:
                return kernel
        with self.lock(key) as held:
            if held:
                try:
                    kernel = self.load(key, expected_type, wrap)
                    if kernel is not None:
                        return kernel
                except CorruptEntry as err:
                    warnings.warn(f"tilelang cache: rebuilding a bad entry ({err})", stacklevel=3)
                    self.discard(key)
            kernel = build()
            if held:
                try:
                    self.store(key, artifact_of(kernel), material)
                except Exception as err:  # noqa: BLE001 - a full or read-only disk is not fatal
                    warnings.warn(
                        f"tilelang cache: could not store kernel in {self.root}: {err}",
                        stacklevel=3,
                    )
        if held:
            self._enforce_limit(keep=(key,))
        return kernel

    def _enforce_limit(self, keep: tuple[str, ...]) -> None:
        limit = get_cache_max_bytes()
        if limit is not None:
            try:
                self.prune(limit, keep=keep)
            except OSError as err:
                warnings.warn(f"tilelang cache: could not prune {self.root}: {err}", stacklevel=4)
