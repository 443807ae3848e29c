"""CPU rules of the explicit Hopper API: only ``T.ws``'s marker (the scope's ``if`` on the
thread index already keeps the warpgroup's threads; ``backends/cpu/lower_threads.py`` runs
its tile work once, its per-thread statements over those threads)."""

from __future__ import annotations

from ..registry import lower_rule


@lower_rule("ws", "cpu")
def lower_ws_cpu(v, ctx):
    """Nothing: the marker only tells the CUDA passes where a ``T.ws`` scope starts."""
    return None
