"""Global tensors with a storage layout (``T.annotate_layout`` on a global; see
``tilelang.transform.apply_global_layouts``, which also finds them): keeping their accesses
scalar while tile ops and loops are lowered."""

from __future__ import annotations

import contextlib
import contextvars

_NO_VECTORS: contextvars.ContextVar[frozenset] = contextvars.ContextVar(
    "tilelang_no_vector_tensors", default=frozenset()
)


@contextlib.contextmanager
def no_vectors_for(layouts: dict):
    """While lowering: accesses to the tensors of ``layouts`` are not vectorized."""
    token = _NO_VECTORS.set(frozenset(layouts))
    try:
        yield
    finally:
        _NO_VECTORS.reset(token)


def vectorizable(tensor) -> bool:
    """False for a global tensor with a storage layout (see :func:`no_vectors_for`)."""
    return tensor.__chandle__() not in _NO_VECTORS.get()
