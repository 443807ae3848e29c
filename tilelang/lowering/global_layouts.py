"""Global tensors with a storage layout (``T.annotate_layout`` on a global; see
``tilelang.transform.apply_global_layouts``): which they are, and keeping their accesses
scalar while tile ops and loops are lowered."""

from __future__ import annotations

import contextlib
import contextvars

import tvm_ffi

from ..ops.registry import tile_op_of
from .thread_utils import is_global

_NO_VECTORS: contextvars.ContextVar[frozenset] = contextvars.ContextVar(
    "tilelang_no_vector_tensors", default=frozenset()
)


def collect_global_layouts(body) -> dict:
    """``{tensor handle: (tensor Var, Layout)}`` of the global tensors annotated in ``body``."""
    from ..ops.annotate_layout.op import annotation_of  # the op's own reader

    found = {}

    def visit(stmt):
        op = tile_op_of(stmt)
        if op is not None and op[0].name == "annotate_layout":
            var, layout = annotation_of(*op)
            if is_global(var):
                found[var.__chandle__()] = (var, layout)

    tvm_ffi.structural_walk(body, visit)
    return found


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
