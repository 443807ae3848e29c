"""``T.sync_threads()``: a block-wide barrier. IR: ``tl.sync_threads()``."""

from __future__ import annotations

from ..registry import TileOpDef, lower_rule

SYNC = TileOpDef("sync_threads", (), {})


@lower_rule("sync_threads", "cpu")
def lower_sync_cpu(v, ctx):
    """A block's threads run one after another on the CPU: nothing to wait for."""
    return None
