"""Kernel cache: compile a kernel, or reuse one built before (see ``kernel_cache.py``)."""

from __future__ import annotations


def cached_kernel(func, *, out_idx, target, execution_backend, pass_configs, compile_flags):
    """A JITKernel for ``func`` (compiled now; the disk cache plugs in here)."""
    from ..jit.kernel import JITKernel

    return JITKernel(
        func,
        out_idx=out_idx,
        target=target,
        execution_backend=execution_backend,
        pass_configs=pass_configs,
        compile_flags=compile_flags,
    )
