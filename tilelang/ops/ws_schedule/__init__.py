"""The warp-specialization schedule's IR markers (``T.annotate_ws_schedule``, ``T.WSID``,
``T.ws_op``, ``T.annotate_ws_pipeline_depth``).

``op.py`` holds the IR forms. The CPU and CUDA pipelines consume the markers in their first
stage (``tilelang/transform/ws_schedule.py``); ROCm and Metal lower them to nothing (the
program runs in program order, which is the schedule's meaning).
"""

from . import op  # noqa: F401 - registers the rules
