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

from ..lowering.global_layouts import no_vectors_for, vectorizable  # noqa: F401 - re-exported
from ..lowering.thread_utils import is_global, layout_indices
from ..ops.registry import tile_op_of


def collect_global_layouts(body) -> dict:
    """``{tensor handle: (tensor Var, Layout)}`` of the global tensors annotated in ``body``."""
    from ..ops.annotate_layout.op import annotation_of

    found = {}

    def visit(stmt):
        op = tile_op_of(stmt)
        if op is not None and op[0].name == "annotate_layout":
            var, layout = annotation_of(*op)
            if is_global(var):
                found[var.__chandle__()] = (var, layout)

    tvm_ffi.structural_walk(body, visit)
    return found


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
