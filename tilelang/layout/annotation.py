"""Layouts given by ``T.annotate_layout``: checks, IR encoding and storage facts.

``T.annotate_layout({buf: layout})`` records one ``tl.annotate_layout(buf)`` statement per
buffer. The layout travels in the call's attributes as a TIRx ``IndexMap`` (its variables
are definitions, so structurally equal annotations hash equally and the kernel cache
keys on them) plus the input shape, the kind ("layout" or "fragment") and the
replication of a fragment:

* a Layout ``f`` becomes ``IndexMap(vars -> f(vars))``,
* a Fragment becomes ``IndexMap(vars + [rep] -> index(vars) + [thread(vars, rep)])``
  (:meth:`Fragment.as_layout`).

:func:`encode` / :func:`decode` convert between the two; :func:`check_layout` validates
an annotation against its buffer (shape, injectivity, non-negative offsets);
:func:`storage_elements` is the number of elements a shared tile needs under its layout
(a padded layout needs more than the tile has); :func:`contiguous_vectors` says whether
every aligned group of ``vec`` elements along the last axis lands on ``vec`` consecutive,
``vec``-aligned storage elements (what a 16-byte ``ldmatrix`` row read needs).
"""

from __future__ import annotations

import numpy as np

from . import expr as E
from .fragment import Fragment
from .layout import Layout

#: Tiles with at most this many elements are checked by enumeration (else Z3).
_ENUMERATE_LIMIT = 1 << 16
#: Tiles with at most this many elements get exact storage sizes from a table.
_TABLE_LIMIT = 1 << 22

KINDS = ("layout", "fragment")


def encode(layout: Layout) -> dict:
    """The attributes of a ``tl.annotate_layout`` call that carry ``layout``."""
    from tvm_tirx.tirx import IndexMap

    shape = [int(d) for d in layout.get_input_shape()]
    if isinstance(layout, Fragment):
        rep = layout._rep
        index = list(layout.get_forward_index()) + [layout.thread]
        imap = IndexMap(list(layout._vars) + [rep], index, None)
        return {
            "kind": "fragment",
            "shape": shape,
            "replicate": layout.get_replicate(),
            "map": imap,
        }
    imap = IndexMap(list(layout._vars), list(layout.get_forward_index()), None)
    return {"kind": "layout", "shape": shape, "replicate": 1, "map": imap}


def decode(attrs) -> Layout:
    """The Layout or Fragment that :func:`encode` wrote into ``attrs``."""
    kind = str(attrs["kind"])
    shape = [int(d) for d in attrs["shape"]]
    imap = attrs["map"]
    variables = list(imap.initial_indices)
    index = list(imap.final_indices)
    if kind == "fragment":
        replicate = int(attrs["replicate"])
        return Fragment.from_parts(
            shape, variables[:-1], index[:-1], index[-1], replicate, variables[-1]
        )
    if kind != "layout":
        raise ValueError(f"unknown annotation kind {kind!r} (expected one of {KINDS})")
    return Layout.from_index(shape, variables, index)


def _enumerable(layout: Layout) -> bool:
    return int(E.prod(layout.get_input_shape())) <= _ENUMERATE_LIMIT


def check_layout(layout: Layout, shape, name: str) -> None:
    """Raise ValueError unless ``layout`` fits a buffer ``name`` of static ``shape``.

    The input shape must equal the buffer's, every output coordinate must be
    non-negative and bounded, and no two elements may share a physical place
    (:func:`tilelang.layout.proofs.prove_injective`; a fragment: no two
    (element, replica) pairs share a (thread, register) slot).
    """
    from .proofs import prove_fragment, prove_injective

    want = [E.as_const_int(d) for d in shape]
    if None in want:
        raise ValueError(f"{name} has a symbolic shape {list(shape)}; layouts need static shapes")
    got = [E.as_const_int(d) for d in layout.get_input_shape()]
    if got != want:
        raise ValueError(
            f"the layout of {name} is over shape {got} but {name} has shape {want} "
            f"(layout: {layout!r})"
        )
    if layout.output_dim == 0:
        raise ValueError(f"the layout of {name} has no output coordinates")
    try:
        layout.get_output_shape()  # raises on negative or unbounded outputs
        if isinstance(layout, Fragment):
            layout.get_thread_size()  # raises on a negative thread
    except ValueError as err:
        raise ValueError(f"the layout of {name} is out of range: {err}") from None
    method = "enumerate" if _enumerable(layout) else "z3"
    if isinstance(layout, Fragment):
        result = prove_fragment(layout, method=method)
    else:
        result = prove_injective(layout, method=method)
    if result.holds is not True:
        raise ValueError(f"the layout of {name} is not one-to-one: {result.message}")


def check_permutation(layout: Layout, shape, name: str) -> None:
    """Raise ValueError unless ``layout`` (already checked one-to-one by
    :func:`check_layout`) maps ``shape`` onto exactly as many elements: a permutation of
    a global tensor's storage, which has no room for padding."""
    out = [E.as_const_int(d) for d in layout.get_output_shape()]
    total = int(E.prod([E.as_const_int(d) for d in shape]))
    if None in out or int(np.prod(out)) != total:
        raise ValueError(
            f"the layout of the global tensor {name} maps its {total} elements into an output "
            f"of shape {out}; a global tensor's layout must permute its storage (as many "
            "output elements as the tensor has)"
        )


def _flat_offsets(layout: Layout) -> np.ndarray:
    """Row-major storage offset of every logical element, shaped like the input."""
    table = layout.forward_table().astype(np.int64)
    out_shape = [int(d) for d in layout.get_output_shape()]
    flat = np.zeros(table.shape[:-1], np.int64)
    for axis, extent in enumerate(out_shape):
        flat = flat * extent + table[..., axis]
    return flat


def storage_elements(layout: Layout) -> int:
    """Elements of storage the tile needs under ``layout``: the largest offset + 1.

    Equals the tile's element count for a bijective layout (a swizzle) and exceeds it
    for a padded one (rows of ``bK + 8``).
    """
    out_shape = [E.as_const_int(d) for d in layout.get_output_shape()]
    if None in out_shape:
        raise ValueError(f"{layout!r} has a symbolic output shape")
    if int(E.prod(layout.get_input_shape())) > _TABLE_LIMIT:
        return int(np.prod(out_shape))  # the output box bounds every offset
    return int(_flat_offsets(layout).max()) + 1


def contiguous_vectors(layout: Layout, vec: int) -> bool:
    """Whether each aligned run of ``vec`` elements of the last axis is stored contiguously.

    True when for every logical index with ``j % vec == 0`` on the last axis, elements
    ``j .. j + vec - 1`` sit at offsets ``o .. o + vec - 1`` with ``o % vec == 0``.
    """
    shape = [int(d) for d in layout.get_input_shape()]
    if vec <= 1:
        return True
    if shape[-1] % vec:
        return False
    flat = _flat_offsets(layout)
    runs = flat.reshape(*shape[:-1], shape[-1] // vec, vec)
    first = runs[..., :1]
    return bool(np.all(runs == first + np.arange(vec)) and np.all(first % vec == 0))


__all__ = [
    "check_layout",
    "check_permutation",
    "contiguous_vectors",
    "decode",
    "encode",
    "storage_elements",
]
