"""IR forms of the explicit Hopper API. Each is ``tl.<name>(operands...)`` with options.

A barrier operand is the element expression ``bars[i]`` of a ``uint64`` shared tensor made
by ``T.alloc_barrier``; the CUDA rules pass its address. Apart from the named barriers
(below), there is no CPU (or ROCm/Metal) rule: those targets report the op as not
supported, naming the user's line.
"""

from __future__ import annotations

from ..registry import TileOpDef, lower_rule

#: T.alloc_barrier's initialisation: ``counts`` arrivals per barrier of ``bar``.
BARRIER_INIT = TileOpDef("alloc_barrier", ("bar",), {"counts": []})
MBARRIER_ARRIVE = TileOpDef("mbarrier_arrive", ("bar",), {})
#: ``T.mbarrier_arrive(bar, cta_id)``: one arrival on ``bar`` of block ``cta`` of the cluster.
MBARRIER_ARRIVE_CLUSTER = TileOpDef("mbarrier_arrive_cluster", ("bar", "cta"), {})
MBARRIER_EXPECT_TX = TileOpDef("mbarrier_expect_tx", ("bar", "tx"), {})
MBARRIER_ARRIVE_EXPECT_TX = TileOpDef("mbarrier_arrive_expect_tx", ("bar", "tx"), {})
#: ``cluster``: the barrier is a cluster barrier (peers arrive on it with cluster-scope
#: release), so the wait acquires at cluster scope (``tl::mbarrier_wait_cluster``).
MBARRIER_WAIT_PARITY = TileOpDef("mbarrier_wait_parity", ("bar", "parity"), {"cluster": 0})
FENCE_PROXY_ASYNC = TileOpDef("fence_proxy_async", (), {})
SET_MAX_NREG = TileOpDef("set_max_nreg", (), {"reg_count": 0, "is_inc": 0})
WARPGROUP_ARRIVE = TileOpDef("warpgroup_arrive", (), {})
WARPGROUP_COMMIT_BATCH = TileOpDef("warpgroup_commit_batch", (), {})
WARPGROUP_WAIT = TileOpDef("warpgroup_wait", (), {"num_mma": 0})
CLUSTER_ARRIVE = TileOpDef("cluster_arrive", (), {})
CLUSTER_ARRIVE_RELAXED = TileOpDef("cluster_arrive_relaxed", (), {})
CLUSTER_WAIT = TileOpDef("cluster_wait", (), {})
CLUSTER_SYNC = TileOpDef("cluster_sync", (), {})
NAMED_BARRIER_ARRIVE = TileOpDef("named_barrier_arrive", ("barrier_id", "thread_count"), {})
NAMED_BARRIER_SYNC = TileOpDef("named_barrier_sync", ("barrier_id", "thread_count"), {})


@lower_rule("named_barrier_sync", "cpu")
@lower_rule("named_barrier_arrive", "cpu")
def lower_named_barrier_cpu(v, ctx):
    """A block's threads run one after another on the CPU (``lower_threads`` splits its
    thread loops at the barrier, under an ``if`` keeping ``[lo, hi)`` too): nothing to do."""
    return None


#: First statement of a ``T.ws`` branch; the CUDA pipeline's ``merge_ws_branches`` removes it.
WS = TileOpDef("ws", (), {"groups": []})
#: ``T.Kernel(..., cluster_dims=(x, y, z))`` with a cluster of more than one block: the
#: launch shape, read (and removed) by the CUDA pipeline's first stage
#: (``backends/cuda/passes/cluster_multicast.py``); no other target has a rule.
CLUSTER_DIMS = TileOpDef("cluster_dims", (), {"dims": []})
#: ``T.block_rank_in_cluster()``: stores the rank into the one-element cell ``out``.
BLOCK_RANK_IN_CLUSTER = TileOpDef("block_rank_in_cluster", ("out",), {})
#: After ``T.wait_wgmma``: a compiler fence on the registers of an accumulator ``c`` of an
#: earlier ``T.wgmma_gemm`` (its reads must not move above the wait).
WGMMA_FENCE_ACCUM = TileOpDef("wait_wgmma", ("c",), {})

#: Call attribute of a ``tl.gemm`` recorded by ``T.wgmma_gemm``: it must lower to wgmma and
#: leaves its group pending (``tl_wgmma_defer_wait``).
ATTR_EXPLICIT_WGMMA = "tl_explicit_wgmma"
#: Emitted in front of the ``tl.gemm`` of a ``T.wgmma_gemm``: only CUDA has a rule (so the
#: other targets refuse it at the user's line); it lowers to nothing.
WGMMA_GEMM = TileOpDef("wgmma_gemm", (), {})
