"""Upstream's user-synchronized TMA copies: ``T.tma_copy``, ``T.tma_store_arrive``,
``T.tma_store_wait``.

Upstream's ``T.tma_copy(src, dst, barrier=bar)`` (global -> shared) issues the load and its
``expect_tx`` on ``bar`` without waiting; the program then arrives on ``bar``
(``T.barrier_arrive``) and waits on it before reading ``dst``. The store form
(shared -> global) issues the store and commits its group; ``T.tma_store_wait()`` waits.

tilelang performs the copy **synchronously**, as ``T.copy(src, dst)`` by the threads that
execute the statement (which lowers to TMA, cp.async or plain copies as the target allows):
the data is in place before those threads go on to arrive on ``bar``, so a consumer that waits
on ``bar`` sees it, and the barrier's phase completes with the arrivals alone (no transaction
bytes are expected). The store groups have nothing pending, so ``T.tma_store_arrive`` /
``T.tma_store_wait`` are no-ops. Results are those of upstream for every correctly
synchronized program; the overlap of the copy with later work is given up.

``cluster_mask`` (upstream: the lowest-ranked block of the mask multicasts its tile to every
block of the mask, the others issue nothing) is accepted for loads in a cluster launch
(``T.Kernel(..., cluster_dims=...)``): every block of the mask copies the leader's region
itself (its source indices evaluated with the leader's block indices), synchronously as
above, so each block holds upstream's tile; the L2 saving of a real multicast is given up
(the automatic multicast of the pass config ``tl.cluster_multicast`` has it).
``cluster_copy.py`` has the same for ``T.copy_cluster``.

Not supported (a TraceError at the user's line): ``leader_scope_threads`` (per-warp copies,
whose operands differ between warps while ``T.copy`` is a block-wide op).
"""

from __future__ import annotations

from tvm_tirx import ir

from .. import errors
from ..lowering.region import is_tensor
from . import builder
from .cluster_copy import check_cluster_mask, multicast_copy
from .hopper import _barrier
from .tileop import copy


def _tensor(value, what: str):
    value = builder.unwrap(value)
    if isinstance(value, ir.TensorLoad | ir.TensorRegion):
        value = value.source
    if not is_tensor(value):
        raise errors.TraceError(f"T.tma_copy: {what} must be a tensor, a slice or an element")
    return value


def tma_copy(
    src,
    dst,
    *,
    barrier=None,
    cluster_mask=None,
    leader_scope_threads=None,
    eviction_policy=None,
    annotations=None,
):
    """Copy ``src`` to ``dst`` (global -> shared with ``barrier``, or shared -> global)."""
    builder.state()
    cluster = None
    if cluster_mask is not None:
        cluster = check_cluster_mask(cluster_mask, "T.tma_copy")
    if leader_scope_threads is not None:
        raise errors.TraceError(
            "T.tma_copy(leader_scope_threads=...): per-warp copies are not supported; "
            "T.tma_copy copies one tile for the whole block"
        )
    src_scope = str(_tensor(src, "src").ty.scope) or "global"
    dst_scope = str(_tensor(dst, "dst").ty.scope) or "global"
    if cluster_mask is not None and not (src_scope == "global" and dst_scope.startswith("shared")):
        raise errors.TraceError("T.tma_copy(cluster_mask=...) multicasts loads only")
    if src_scope == "global" and dst_scope.startswith("shared"):
        if barrier is None:
            raise errors.TraceError(
                "T.tma_copy: a load (global -> shared) needs barrier= (the mbarrier the "
                "consumers wait on)"
            )
        _barrier(barrier, "tma_copy")
    elif not (src_scope.startswith("shared") and dst_scope == "global"):
        raise errors.TraceError(
            f"T.tma_copy copies global -> shared or shared -> global, got {src_scope} -> "
            f"{dst_scope} (use T.copy)"
        )

    def load(a, b):
        copy(a, b, eviction_policy=eviction_policy, annotations=annotations)

    if cluster_mask is not None:
        multicast_copy(src, dst, cluster_mask, cluster, load)
    else:
        load(src, dst)


def tma_store_arrive():
    """Commit the pending TMA stores as a group (none are pending here)."""
    builder.state()


def tma_store_wait(count: int = 0, read: bool = True):
    """Wait until at most ``count`` TMA store groups are pending (none ever is here)."""
    builder.state()
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise errors.TraceError(f"T.tma_store_wait: count must be an int >= 0, got {count!r}")
