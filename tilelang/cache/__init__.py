"""Kernel cache: compile a kernel, or reuse one built before (see ``kernel_cache.py``).

Public API (upstream names): :func:`clear_cache`, :func:`disable_cache`,
:func:`enable_cache`, :func:`is_cache_enabled`, :func:`get_cache_dir`; ours:
:func:`prune_cache`, :func:`get_cache_max_bytes` (``TILELANG_CACHE_MAX_BYTES``).
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
    prune_cache,
)

__all__ = [
    "KernelCache",
    "cache_key",
    "cached_kernel",
    "clear_cache",
    "disable_cache",
    "enable_cache",
    "get_cache_dir",
    "get_cache_max_bytes",
    "is_cache_enabled",
    "prune_cache",
]


def cached_kernel(func, *, out_idx, target, execution_backend, pass_configs, compile_flags):
    """A JITKernel for ``func``: loaded from the disk cache, or compiled now and stored.

    ``target`` is a resolved target dict. The build runs inside an observation session
    (``tilelang.engine.instrument``) so IR dumps and pass timing cover TIRx's passes
    too; while those are requested the disk cache is bypassed.
    """
    from ..engine import instrument
    from ..jit.kernel import JITKernel

    options = dict(
        out_idx=out_idx,
        target=target,
        execution_backend=execution_backend,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )

    def build():
        with instrument.session(pass_configs, func=func):
            return JITKernel(func, **options)

    if not is_cache_enabled() or instrument.observation(pass_configs).active:
        return build()
    kind = target["kind"] if isinstance(target, dict) else str(target)
    cls = artifact_type(kind)
    if cls is None:
        return build()
    return KernelCache().get_or_build(func, build, expected_type=cls, **options)
