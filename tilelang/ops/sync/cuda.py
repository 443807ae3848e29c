"""CUDA lowering of ``T.sync_threads``: ``__syncthreads()``."""

from __future__ import annotations

from ...lowering.thread_utils import sync_threads
from ..registry import lower_rule


@lower_rule("sync_threads", "cuda")
def lower_sync_cuda(v, ctx):
    return sync_threads()
