"""The disk cache of compiled kernels (see ``kernel_cache.py``).

Public API (upstream names): :func:`clear_cache`, :func:`disable_cache`,
:func:`enable_cache`, :func:`is_cache_enabled`, :func:`get_cache_dir`; ours:
:func:`prune_cache`, :func:`get_cache_max_bytes` (``TILELANG_CACHE_MAX_BYTES``).

A store of artifacts only: ``tilelang.jit`` (``cached_kernel``) compiles kernels and wraps
loaded artifacts into ``JITKernel``s; in-memory caches register their clear functions with
:func:`register_memory_cache` so that :func:`clear_cache` empties them too.
"""

from __future__ import annotations

from .kernel_cache import (
    KernelCache,
    artifact_type,
    cache_key,
    clear_cache,
    disable_cache,
    enable_cache,
    get_cache_dir,
    get_cache_max_bytes,
    is_cache_enabled,
    key_material,
    prune_cache,
    register_memory_cache,
)

__all__ = [
    "KernelCache",
    "artifact_type",
    "cache_key",
    "clear_cache",
    "disable_cache",
    "enable_cache",
    "get_cache_dir",
    "get_cache_max_bytes",
    "is_cache_enabled",
    "key_material",
    "prune_cache",
    "register_memory_cache",
]
