"""Passes shared by the backends; ``from tilelang.transform import PassConfigKey`` (upstream's
import path; the pass configs live in ``tilelang.engine.pass_config``)."""

import functools

from ..engine.pass_config import PassConfigKey  # noqa: F401

__all__ = ["PassConfigKey", "simplify_prim_func"]


def simplify_prim_func(func):
    """Upstream's decorator that simplifies the PrimFunc ``func`` returns. Every tilelang
    backend pipeline simplifies a kernel when it compiles it, so the PrimFunc is returned as
    it is (a decorated builder still returns the same kernel)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


_UPSTREAM_PASSES = (
    "FlattenBuffer",
    "LegalizeNegativeIndex",
    "LowerAccessPtr",
    "LowerOpaqueBlock",
    "MergeSharedMemoryAllocations",
    "Simplify",
)


def __getattr__(name: str):
    """Upstream's individual TVM-fork passes: an AttributeError saying why they are absent."""
    if name in _UPSTREAM_PASSES:
        raise AttributeError(
            f"tilelang.transform.{name} is a pass of upstream's TVM-fork pipeline, which "
            "tilelang does not expose one by one: each backend's pipeline "
            "(tilelang.backends.<target>.pipeline) runs its own passes when a kernel compiles"
        )
    raise AttributeError(f"module 'tilelang.transform' has no attribute {name!r}")
