"""Source post-processing hooks (upstream's ``tilelang.register_cuda_postproc`` and friends).

A hook is ``f(code: str, target) -> str``; it sees the source a backend generated and returns
the source that is compiled:

| register | global function | applied to |
|---|---|---|
| ``register_cuda_postproc`` | ``tilelang_callback_cuda_postproc`` | each CUDA kernel source, before the ``tl_templates`` headers are inlined (CUDA backend) |
| ``register_hip_postproc`` | ``tilelang_callback_hip_postproc`` | the HIP source (ROCm backend) |
| ``register_metal_postproc`` | ``tilelang_callback_metal_postproc`` | the MSL source (Metal backend) |
| ``register_c_postproc`` | ``tilelang_callback_c_host_postproc`` | the C host code of a CUDA kernel, before the C compiler runs |

Hooks are process-wide TVM-FFI global functions under upstream's names, so code that registers
them through ``tvm_ffi.register_global_func`` directly works too. A hook is part of the kernel
cache key (:func:`fingerprint`): a hook registered through these functions is identified by
its Python code, constants and closure; one registered directly by its identity in this
process. A disk-cache hit does not run the hook again (as upstream).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

GLOBAL_NAMES = {
    "cuda": "tilelang_callback_cuda_postproc",
    "hip": "tilelang_callback_hip_postproc",
    "metal": "tilelang_callback_metal_postproc",
    "c": "tilelang_callback_c_host_postproc",
}
#: global name -> (the Python function registered through this module, its FFI handle)
_PYTHON_HOOKS: dict[str, tuple] = {}


def _register(kind: str, func, override: bool) -> None:
    import tvm_ffi

    if not callable(func):
        raise TypeError(f"register_{kind}_postproc: func must be callable, got {func!r}")
    name = GLOBAL_NAMES[kind]
    if not override and tvm_ffi.get_global_func(name, allow_missing=True) is not None:
        raise ValueError(
            f"register_{kind}_postproc(override=False): a {kind} post-processing hook is "
            "already registered"
        )
    tvm_ffi.register_global_func(name, f=func, override=True)
    _PYTHON_HOOKS[name] = (func, tvm_ffi.get_global_func(name).__chandle__())


def register_cuda_postproc(func: Callable, override: bool = True) -> None:
    """Run ``func(code, target) -> code`` on every generated CUDA kernel source."""
    _register("cuda", func, override)


def register_hip_postproc(func: Callable, override: bool = True) -> None:
    """Run ``func(code, target) -> code`` on every generated HIP source."""
    _register("hip", func, override)


def register_metal_postproc(func: Callable, override: bool = True) -> None:
    """Run ``func(code, target) -> code`` on every generated Metal (MSL) source."""
    _register("metal", func, override)


def register_c_postproc(func: Callable, override: bool = True) -> None:
    """Run ``func(code, target) -> code`` on the C host code of every CUDA kernel."""
    _register("c", func, override)


def _decorator(kind: str):
    def decorator(func=None, override: bool = True):
        if callable(func):
            _register(kind, func, override)
            return func
        if func is None or isinstance(func, bool):
            flag = func if isinstance(func, bool) else override

            def register(fn):
                _register(kind, fn, flag)
                return fn

            return register
        raise TypeError(f"register_{kind}_postproc_callback: use it as @decorator or @decorator()")

    decorator.__name__ = f"register_{kind}_postproc_callback"
    decorator.__doc__ = f"Decorator form of ``register_{kind}_postproc`` (with or without ())."
    return decorator


register_cuda_postproc_callback = _decorator("cuda")
register_hip_postproc_callback = _decorator("hip")
register_metal_postproc_callback = _decorator("metal")
register_c_postproc_callback = _decorator("c")


def apply(kind: str, code: str, target=None) -> str:
    """``code`` after the registered ``kind`` hook (unchanged when none is registered)."""
    import tvm_ffi

    hook = tvm_ffi.get_global_func(GLOBAL_NAMES[kind], allow_missing=True)
    if hook is None:
        return code
    result = hook(code, target)
    if not isinstance(result, str):
        raise TypeError(
            f"the {kind} post-processing hook returned {type(result).__name__}, not the "
            "source as str"
        )
    return result


def _python_fingerprint(func) -> str:
    parts = []
    code = getattr(func, "__code__", None)
    if code is None:
        return f"object:{id(func)}"
    stack = [code]
    while stack:
        c = stack.pop()
        parts += [c.co_code.hex(), repr(c.co_names)]
        for const in c.co_consts:
            if hasattr(const, "co_code"):
                stack.append(const)
            else:
                parts.append(repr(const))
    parts.append(repr(getattr(func, "__defaults__", None)))
    for cell in getattr(func, "__closure__", None) or ():
        try:
            parts.append(repr(cell.cell_contents))
        except ValueError:  # an empty cell
            parts.append("<empty>")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def fingerprint() -> dict:
    """The registered hooks as cache-key material (empty when none is registered)."""
    import tvm_ffi

    found = {}
    for kind, name in GLOBAL_NAMES.items():
        hook = tvm_ffi.get_global_func(name, allow_missing=True)
        if hook is None:
            continue
        mine = _PYTHON_HOOKS.get(name)
        if mine is not None and mine[1] == hook.__chandle__():
            found[kind] = _python_fingerprint(mine[0])
        else:  # registered directly through tvm_ffi: only this process knows it
            found[kind] = f"foreign:{hook.__chandle__()}"
    return found


def clear(kind: str | None = None) -> None:
    """Remove the registered ``kind`` hook (every hook when ``kind`` is None)."""
    import tvm_ffi

    for k in [kind] if kind is not None else list(GLOBAL_NAMES):
        name = GLOBAL_NAMES[k]
        if tvm_ffi.get_global_func(name, allow_missing=True) is not None:
            tvm_ffi.remove_global_func(name)
        _PYTHON_HOOKS.pop(name, None)
