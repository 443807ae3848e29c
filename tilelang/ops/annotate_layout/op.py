"""``T.annotate_layout({buf: layout})``: the IR form of a user-fixed buffer layout.

IR: ``tl.annotate_layout(buf)`` with attributes ``kind`` ("layout" for a shared tile,
"fragment" for a ``local.fragment``), ``shape``, ``replicate`` and ``map`` (a TIRx
``IndexMap``; :mod:`tilelang.layout.annotation` encodes and decodes it). The call carries
the user's ``file:line``.

CUDA: ``transform/layout_inference.py`` collects the annotations and fixes those layouts
before any op rule runs; the statement then lowers to nothing. CPU: a shared tile is
plain memory there (a layout is a performance hint) and fragments are whole per-block
arrays, so the statement lowers to nothing.
"""

from __future__ import annotations

from ..registry import TileOpDef, lower_rule

ANNOTATE_LAYOUT = TileOpDef(
    "annotate_layout", ("buffer",), {"kind": "layout", "shape": [], "replicate": 1, "map": None}
)


def annotation_of(op, call):
    """``(tensor Var, Layout or Fragment)`` of an annotate_layout call."""
    from ...layout.annotation import decode

    return call.args[0], decode(call.attrs)


@lower_rule("annotate_layout", "cpu")
def lower_annotate_layout_cpu(v, ctx):
    """Nothing to do: the CPU backend keeps shared tiles row-major."""
    return None


@lower_rule("annotate_layout", "cuda")
def lower_annotate_layout_cuda(v, ctx):
    """Already applied by layout inference."""
    return None
