"""Upstream's ``tilelang.cuda`` package, the parts user programs import.

Only ``tilelang.cuda.intrinsics`` (the hand-written mma emitter and its layout helpers) is
provided; the rest of upstream's CUDA target package (its dialect, passes, other emitters)
is tilelang.backends.cuda and the one ``T`` namespace here, and importing it raises a
ModuleNotFoundError that says so (``tilelang/utils/upstream_modules.py``).
"""

from . import intrinsics  # noqa: F401,E402 - upstream's tilelang.cuda.intrinsics attribute
