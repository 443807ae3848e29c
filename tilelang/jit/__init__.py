"""``@tilelang.jit`` and ``tilelang.compile``: compile a traced kernel once, call it many times.

This package owns compilation (:class:`JITKernel`), the in-memory cache of
``tilelang.compile`` and the use of the disk cache (:func:`cached_kernel`); ``tilelang.cache``
below it stores artifacts and knows nothing of kernels.
"""

from __future__ import annotations

import threading

import tvm_ffi

from .. import cache as _disk
from .impl import JITImpl  # noqa: F401
from .kernel import JITKernel
from .torch_op import torch_op  # noqa: F401

_MEMORY_CACHE: dict = {}
_LOCK = threading.Lock()


def clear_memory_cache() -> None:
    """Forget the kernels ``tilelang.compile`` keeps in memory (``tilelang.cache.clear_cache``)."""
    with _LOCK:
        _MEMORY_CACHE.clear()


_disk.register_memory_cache(clear_memory_cache)


def cached_kernel(func, *, out_idx, target, execution_backend, pass_configs, compile_flags):
    """A JITKernel for ``func``: loaded from the disk cache, or compiled now and stored.

    ``target`` is a resolved target dict. The build runs inside an observation session
    (``tilelang.engine.instrument``) so IR dumps and pass timing cover TIRx's passes
    too; while those are requested the disk cache is bypassed.
    """
    from ..engine import instrument

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

    if not _disk.is_cache_enabled() or instrument.observation(pass_configs).active:
        return build()
    kind = target["kind"] if isinstance(target, dict) else str(target)
    cls = _disk.artifact_type(kind)
    if cls is None:
        return build()
    return _disk.KernelCache().get_or_build(
        _disk.key_material(func, **options),
        build,
        expected_type=cls,
        wrap=lambda artifact: JITKernel(func, artifact=artifact, **options),
        artifact_of=lambda kernel: kernel.artifact,
    )


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _out_idx_of(func, out_idx):
    attrs = getattr(func, "attrs", None)
    if not attrs or "tilelang_out_idx" not in attrs:
        return out_idx
    declared = [int(i) for i in attrs["tilelang_out_idx"]]
    if out_idx is None:
        return declared
    given = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    n = len(func.params)
    if [i % n for i in given] != [i % n for i in declared]:
        raise ValueError(
            f"out_idx {out_idx} conflicts with the function's T.empty outputs {declared}"
        )
    return out_idx


def compile(  # noqa: A001 - upstream name
    func,
    out_idx=None,
    execution_backend="auto",
    target="auto",
    target_host=None,
    verbose=False,
    pass_configs=None,
    compile_flags=None,
):
    """Compile a ``T.prim_func`` for ``target``; cached in memory by IR, target and options.

    A function traced from an eager ``@tilelang.jit`` body names its ``T.empty`` outputs
    in its ``tilelang_out_idx`` attribute; it is used when ``out_idx`` is not given.
    """
    from ..backends.registry import resolve_target

    out_idx = _out_idx_of(func, out_idx)
    resolved = resolve_target(target)
    key = (
        tvm_ffi.structural_hash(func),
        _freeze(out_idx),
        _freeze(resolved),
        _freeze(pass_configs or {}),
        _freeze(compile_flags or []),
    )
    with _LOCK:
        hit = _MEMORY_CACHE.get(key)
    if hit is not None and tvm_ffi.structural_equal(hit.prim_func, func):
        return hit
    kernel = cached_kernel(
        func,
        out_idx=out_idx,
        target=resolved,
        execution_backend=execution_backend,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )
    with _LOCK:
        _MEMORY_CACHE[key] = kernel
    return kernel


def jit(
    func=None,
    *,
    out_idx=None,
    target="auto",
    target_host=None,
    execution_backend="auto",
    verbose=False,
    pass_configs=None,
    debug_root_path=None,
    compile_flags=None,
    mode="auto",
):
    """Decorator: compile a kernel on first use, as upstream TileLang does.

    Over a factory returning a ``@T.prim_func`` (lazy form) calls return the kernel; over
    a kernel body (eager form: tensors annotated in the body, ``T.const``, ``T.empty``)
    calls run it and return its outputs. ``mode`` ("auto", "lazy", "eager") forces the
    form; upstream sets it as the ``mode`` attribute of the returned ``JITImpl``.
    """
    options = dict(
        out_idx=out_idx,
        target=target,
        execution_backend=execution_backend,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )

    def wrap(fn):
        if callable(fn) and not hasattr(fn, "params"):
            return JITImpl(fn, options, mode=mode, debug_root_path=debug_root_path)
        return compile(fn, **options)  # a prim_func given directly

    return wrap if func is None else wrap(func)
