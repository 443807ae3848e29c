"""Proxy fences after generic writes that a gemm of another thread range reads (sm_90a).

A wgmma reads its shared operands through the async proxy; the threads that wrote them with
ordinary stores must each run ``fence.proxy.async`` between the stores and the barrier (or
mbarrier arrive) the gemm's threads wait on. A block-wide gemm starts with such a fence run
by every thread, so the writers are covered. A gemm under ``if tx < 128`` / ``T.ws(0)``
(``lowering/thread_range.py``) runs its fence on its own threads only: a tile written by the
whole block, or by the other branch (``T.copy`` of a producer warpgroup), would be read
unfenced (the emulator's race check reports it). :class:`RangeGemmReads` finds the shared
tiles such gemms read; ``LowerTileOps`` puts a ``tl::fence_proxy_async`` (one
``drop_proxy_fences`` keeps: its per-path model cannot see that other threads take the
branch) after each ``T.copy``/``T.fill`` writing one of them from another set of threads.
"""

from __future__ import annotations

from tvm_tirx import ir

from ..lowering.region import RegionView
from ..lowering.stmt import uses_any
from ..lowering.thread_range import guarded_range, negate, split_uniform
from ..lowering.thread_utils import extern_stmt, is_shared
from ..ops import tile_op_of

#: The fence kept by ``drop_proxy_fences`` (the user's ``T.fence_proxy_async``).
FENCE = "tl::fence_proxy_async"


class RangeGemmReads:
    """Shared tile handle -> the thread ranges ``(lo, hi)`` of the gemms under an ``if`` on
    the thread index that read it (gemms of the whole block are not recorded)."""

    def __init__(self, body, thread_var, threads: int):
        self.thread_var, self.threads = thread_var, threads
        self.readers: dict = {}
        self._walk(body, ())

    def _walk(self, stmt, conds):
        if isinstance(stmt, ir.If) and uses_any(stmt.condition, [self.thread_var]):
            on_threads, _ = split_uniform(stmt.condition, [self.thread_var])
            self._walk(stmt.then_case, conds + (on_threads,))
            if stmt.else_case is not None:
                self._walk(stmt.else_case, conds + (negate(stmt.condition),))
            return
        found = tile_op_of(stmt) if isinstance(stmt, ir.Evaluate) else None
        if found is not None:
            if found[0].name == "gemm" and conds:
                span = guarded_range(conds, self.thread_var, self.threads)
                view = found[0].view(found[1])
                for region in (view.A, view.B):
                    rv = RegionView.of(region)
                    if span is not None and is_shared(rv.tensor):
                        key = rv.tensor.__chandle__()
                        self.readers.setdefault(key, set()).add((span, _stage(rv)))
            return
        for child in _children(stmt):
            self._walk(child, conds)

    def fence_after(self, written, writer_span) -> list:
        """``[fence]`` when a gemm of a range other than ``writer_span`` reads the region
        ``written`` (a RegionView) writes: the same tile, and the same slot of its leading
        dimensions when both name constant ones (``K_shared[g, :, :]`` per warpgroup)."""
        mine = _stage(written)
        for span, stage in self.readers.get(written.tensor.__chandle__(), set()):
            if span != writer_span and (stage is None or mine is None or stage == mine):
                return [extern_stmt(FENCE)]
        return []


def _stage(view):
    """The constant indices of a region's leading (non-matrix) dimensions, each of extent
    1, or None when some is not constant (or the tile is 2-D: the whole tile)."""
    from ..lowering.region import _const

    lead = list(zip(view.begins[:-2], view.extents[:-2]))
    if not lead or any(_const(e) != 1 or _const(b) is None for b, e in lead):
        return None
    return tuple(_const(b) for b, _ in lead)


def _children(stmt) -> list:
    if isinstance(stmt, ir.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, ir.If):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, ir.Stmt) else []
