"""ApplyGlobalLayouts: global tensors laid out by ``T.annotate_layout`` (both backends).

A Layout on a global tensor permutes its storage: element ``idx`` lives at the row-major
offset of ``layout(idx)`` in the layout's output shape (``layout.annotation.
check_permutation``). The pipelines handle it in three steps:

1. :func:`collect_global_layouts` reads the annotations of global tensors from the body
   (before layout inference, which only deals with shared tiles and fragments, and
   before the annotation statements are dropped);
2. while the tile ops and parallel loops are lowered, :func:`no_vectors_for` keeps every
   access to those tensors scalar (``transform/vectorize.py`` asks
   :func:`vectorizable`): a vector of logically consecutive elements is not contiguous
   in storage;
3. :func:`apply_global_layouts`, the last stage before code generation, maps every
   remaining ``TensorLoad``/``TensorStore`` of such a tensor (also the ones inside
   ``address_of``, e.g. atomics) to its storage indices (``thread_utils.layout_indices``).
   Tail guards were computed on logical indices before, so they stay right.
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, sym

from ..lowering.global_layouts import (  # noqa: F401 - the pass's helpers
    collect_global_layouts,
    no_vectors_for,
    vectorizable,
)
from ..lowering.thread_utils import layout_indices


def apply_global_layouts(body, layouts: dict):
    """Every access of a laid-out global tensor in ``body`` goes to its storage place."""
    if not layouts:
        return body
    simplify = sym.Analyzer().simplify

    def load(x):
        entry = layouts.get(x.source.__chandle__())
        if entry is None:
            return x
        return ir.TensorLoad(x.source, layout_indices(x.source, entry[1], x.indices, simplify))

    def store(x):
        entry = layouts.get(x.dest.__chandle__())
        if entry is None:
            return x
        idx = layout_indices(x.dest, entry[1], x.indices, simplify)
        return ir.TensorStore(x.dest, idx, x.value, x.loc)

    return tvm_ffi.structural_map(body, [(ir.TensorLoad, load), (ir.TensorStore, store)])
