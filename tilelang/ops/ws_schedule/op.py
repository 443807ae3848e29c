"""IR forms of the warp-specialization schedule markers.

- ``tl.ws_schedule(spec=<json>, buffers=[tiles])``: ``T.annotate_ws_schedule``; the JSON
  names each pipeline buffer by its index in ``buffers``.
- ``tl.ws_pipeline_depth(depths=[...], buffers=[tiles])``: ``T.annotate_ws_pipeline_depth``.
- ``tl.ws_op_begin(id=...)`` / ``tl.ws_op_end(id=...)``: the statements between them (in one
  statement list) are the op ``id`` (a tile op with ``annotations={T.WSID: id}``, or a
  ``with T.ws_op(id):`` body). Loops carry the id as their ``tl.ws_op_id`` annotation.
"""

from __future__ import annotations

from ..registry import TileOpDef, lower_rule

WS_SCHEDULE = TileOpDef("ws_schedule", (), {"spec": "", "buffers": []})
WS_PIPELINE_DEPTH = TileOpDef("ws_pipeline_depth", (), {"depths": [], "buffers": []})
WS_OP_BEGIN = TileOpDef("ws_op_begin", (), {"id": ""})
WS_OP_END = TileOpDef("ws_op_end", (), {"id": ""})

#: Every marker op name (the stage that consumes them removes exactly these).
MARKERS = frozenset(op.name for op in (WS_SCHEDULE, WS_PIPELINE_DEPTH, WS_OP_BEGIN, WS_OP_END))


def _nothing(view, ctx):
    return None


# ROCm and Metal run the straight-line program (the schedule's meaning) unvalidated
for _op in MARKERS:
    for _backend in ("rocm", "metal"):
        lower_rule(_op, _backend)(_nothing)
