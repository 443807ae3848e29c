"""The contexts CUDA layout inference and tile-op lowering rules receive.

Contract between the CUDA pipeline (``pipeline.py``) and the per-op rules in
``tilelang/ops/*`` (registered with ``layout_rule(op, "cuda")`` and
``lower_rule(op, "cuda")``):

- Layout inference runs over every tile op and ``T.Parallel`` loop of a kernel,
  level by level ("strict", then "common", then "free"), until every
  ``local.fragment`` tensor has a :class:`tilelang.layout.Fragment` (logical index
  -> (thread, local register index)) and shared tensors may have a
  :class:`tilelang.layout.Layout` (logical -> physical index, e.g. a swizzle).
- Lowering then replaces each tile op by thread-level TIRx: code that runs in
  every thread of the block, with ``ctx.thread_var`` (threadIdx.x, range
  [0, ctx.threads)) naming the executing thread. A fragment tensor ``F`` of
  logical shape S is replaced by a per-thread local array ``ctx.local_of(F)`` of
  shape (local_size,); the element F[i, j] owned by this thread lives at
  ``ctx.local_of(F)[frag.map_forward_index([i, j])[0]]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.pass_config import build_options
from .context import LowerContext


@dataclass
class LayoutInferContext:
    """What a layout rule may read: threads, target arch, level and the layouts known so far."""

    threads: int
    arch: str
    level: str  # "strict" | "common" | "free"
    layout_map: dict  # tensor Var -> Layout | Fragment (keyed by Var; use .get_layout(var))
    thread_var: object = None
    options: dict = field(default_factory=lambda: build_options(None))

    def get_layout(self, var):
        for k, v in self.layout_map.items():
            if k.same_as(var):
                return v
        return None


@dataclass
class CudaLowerContext(LowerContext):
    """A LowerContext plus the thread variable, the layouts and the fragment-to-local mapping."""

    thread_var: object = None
    arch: str = "sm_90a"
    layout_map: dict = field(default_factory=dict)
    local_arrays: dict = field(default_factory=dict)  # fragment Var -> local array Var
    extra_allocs: list = field(default_factory=list)  # Binds the pipeline hoists to kernel scope
    launches: dict = field(default_factory=dict)  # "blockIdx.x"/... -> the launch's Var
    # code-generation choices from the pass configs (engine.pass_config.build_options)
    options: dict = field(default_factory=lambda: build_options(None))
    # TMA (sm_90+, backends/cuda/passes/tma_lowering.py): tensor maps to encode on the
    # host, and the pipelining decisions recorded as the ``tl.tma`` function attribute
    tma_maps: list = field(default_factory=list)
    tma_notes: list = field(default_factory=list)
    # thread-block cluster shape of the launch (backends/cuda/passes/cluster_multicast.py)
    cluster_dims: tuple = (1, 1, 1)
    # ``(lo, hi)`` under an ``if`` keeping threads ``lo <= t < hi`` only: shared/global
    # tiles are split over those threads (``backends/cuda/passes/thread_guard.py``)
    thread_range: tuple | None = None

    def get_layout(self, var):
        for k, v in self.layout_map.items():
            if k.same_as(var):
                return v
        return None

    def local_of(self, var):
        for k, v in self.local_arrays.items():
            if k.same_as(var):
                return v
        raise KeyError(f"{var.name} has no local array (is it a fragment?)")

    def with_range(self, var, begin, extent):
        ranges = dict(self.ranges)
        ranges[var] = (begin, extent)
        return CudaLowerContext(
            self.backend,
            ranges,
            self.threads,
            None,
            self.thread_var,
            self.arch,
            self.layout_map,
            self.local_arrays,
            self.extra_allocs,
            self.launches,
            self.options,
            thread_range=self.thread_range,
        )

    def with_thread_range(self, lo: int, hi: int):
        """This context for code that only threads ``[lo, hi)`` run."""
        inner = self.with_range(self.thread_var, lo, hi - lo)
        inner.thread_range = (lo, hi)
        inner.tma_maps, inner.tma_notes, inner.cluster_dims = (
            self.tma_maps,
            self.tma_notes,
            self.cluster_dims,
        )
        return inner

    def cooperating_threads(self):
        """``(thread index, thread count)`` that shared/global tile work is split over:
        ``(t - lo, hi - lo)`` under a thread range, else ``(t, threads)``."""
        if self.thread_range is None:
            return self.thread_var, self.threads
        lo, hi = self.thread_range
        return self.thread_var - lo, hi - lo
