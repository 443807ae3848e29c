"""Copies between the blocks of a thread-block cluster: ``T.copy_cluster`` and the
multicast of ``T.tma_copy(..., cluster_mask=...)``.

Two forms, as upstream's ``T.copy_cluster(src, dst, *, dst_block=None, cluster_mask=None,
remote_barrier=None, ...)``:

- **Multicast** (``cluster_mask``, global -> shared): the lowest-ranked block of the mask
  loads its tile and every block of the mask receives *that* tile; a block outside the mask
  loads its own. Here every block of the mask copies the leader's region itself (the source
  indices re-evaluated with the leader's block indices), synchronously, as ``T.tma_copy``
  does: each block holds upstream's tile when the statement ends; the L2 saving of one load
  is given up (the pass config ``tl.cluster_multicast`` multicasts pipelined GEMM loads).
- **Block to block** (``dst_block``, shared -> shared): the executing block's threads store
  ``src`` into ``dst`` of block ``dst_block`` of the cluster (``st.shared::cluster`` through
  ``mapa``, CUDA sm_90+). With ``remote_barrier`` (a ``T.alloc_cluster_barrier`` element),
  the block then synchronises and one thread arrives on that barrier in ``dst_block``
  (release at cluster scope), so the receiver waits on its copy of the barrier
  (``T.mbarrier_wait_parity(bar, 0)``, which acquires at cluster scope on a cluster barrier)
  and reads ``dst``; without it the program orders the copy with ``T.cluster_sync()``.
"""

from __future__ import annotations

import math

from tvm_tirx import ir

from .. import errors
from ..lowering.region import is_tensor, region_extents, to_region
from ..lowering.stmt import substitute
from . import builder


def _cluster_dims(what: str):
    st = builder.state()
    kernel = st.kernels[-1] if st.kernels else None
    dims = getattr(kernel, "cluster_dims", None)
    if dims is None:
        raise errors.TraceError(
            f"{what} needs a cluster launch (T.Kernel(..., cluster_dims=...) or T.ClusterKernel)"
        )
    return kernel, dims


def check_cluster_mask(cluster_mask, what: str):
    """``(kernel, cluster shape)`` of the current cluster launch, after checking that
    ``cluster_mask`` is a bitmask of its blocks (hand it on to :func:`multicast_copy`)."""
    if isinstance(cluster_mask, bool) or not isinstance(cluster_mask, int) or cluster_mask <= 0:
        raise errors.TraceError(
            f"{what}: cluster_mask must be a positive int bitmask, got {cluster_mask!r}"
        )
    kernel, dims = _cluster_dims(f"{what}(cluster_mask=...): a multicast")
    size = math.prod(dims)
    if cluster_mask >> size:
        raise errors.TraceError(
            f"{what}: cluster_mask {cluster_mask:#b} names blocks beyond the cluster's {size}"
        )
    return kernel, dims


def _rank_and_leader_blocks(kernel, dims, leader: int):
    """This block's rank in its cluster and the block indices of rank ``leader`` of it."""
    rank = ir.const(0, "int32")
    stride = 1
    leader_blocks = {}
    for axis, var in enumerate(kernel.block_vars[:3]):
        d = dims[axis]
        if d == 1:
            continue
        rank = rank + (var % d) * stride
        leader_blocks[var] = var - var % d + (leader // stride) % d
        stride *= d
    return rank, leader_blocks


def multicast_copy(src, dst, cluster_mask: int, cluster, copy_fn):
    """``copy_fn(src', dst)``: ``src'`` is the region the lowest-ranked block of
    ``cluster_mask`` names for blocks in the mask, ``src`` for the others; ``cluster`` is
    what :func:`check_cluster_mask` returned for the mask."""
    kernel, dims = cluster
    leader = (cluster_mask & -cluster_mask).bit_length() - 1
    rank, leader_blocks = _rank_and_leader_blocks(kernel, dims, leader)
    src_value = builder.unwrap(src)
    leader_src = substitute(src_value, leader_blocks) if leader_blocks else src_value
    if leader_src.same_as(src_value):  # the region does not depend on the block: one copy
        copy_fn(src_value, dst)
        return
    in_mask = ((ir.const(cluster_mask, "int32") >> rank) & 1) == 1
    with builder.if_(builder.unwrap(in_mask)) as branch:
        with branch.then():
            copy_fn(leader_src, dst)
        with branch.orelse():
            copy_fn(src_value, dst)


def _shared_region(value, other_extents, what: str):
    value = builder.unwrap(value)
    if isinstance(value, int | float):
        raise errors.TraceError(f"T.copy_cluster: {what} must be a tensor, a slice or an element")
    region = to_region(value, other_extents, what)
    scope = str(region.source.ty.scope) or "global"
    return region, scope


def _block_to_block(src, dst, dst_block, remote_barrier, coalesced_width):
    from .hopper import _barrier, is_cluster_barrier, mbarrier_arrive
    from .kernel import get_thread_binding
    from .loops import Parallel
    from .misc import sync_threads

    _, dims = _cluster_dims("T.copy_cluster(dst_block=...)")
    size = math.prod(dims)
    block = builder.unwrap(dst_block)
    if isinstance(block, bool) or not (isinstance(block, int) or builder.is_expr(block)):
        raise errors.TraceError(f"T.copy_cluster: dst_block must be a block rank, got {block!r}")
    if isinstance(block, int) and not 0 <= block < size:
        raise errors.TraceError(
            f"T.copy_cluster: dst_block {block} is outside the cluster's {size} blocks"
        )
    s_ext, d_ext = region_extents(builder.unwrap(src)), region_extents(builder.unwrap(dst))
    s_reg, s_scope = _shared_region(src, d_ext, "src")
    d_reg, d_scope = _shared_region(dst, s_ext or [r.extent for r in s_reg.region], "dst")
    if not (s_scope.startswith("shared") and d_scope.startswith("shared")):
        raise errors.TraceError(
            f"T.copy_cluster(dst_block=...) copies shared -> shared of another block, got "
            f"{s_scope} -> {d_scope} (a global source multicasts with cluster_mask=)"
        )
    if s_reg.source.ty.dtype != d_reg.source.ty.dtype:
        raise errors.TraceError(
            f"T.copy_cluster: src is {s_reg.source.ty.dtype} and dst {d_reg.source.ty.dtype}; "
            "the block-to-block copy moves elements unchanged"
        )
    s_extents = [r.extent for r in s_reg.region if builder.static_value(r.extent) != 1]
    d_extents = [r.extent for r in d_reg.region if builder.static_value(r.extent) != 1]
    if [builder.static_value(e) for e in s_extents] != [builder.static_value(e) for e in d_extents]:
        raise errors.TraceError(
            f"T.copy_cluster: src extents {[r.extent for r in s_reg.region]} and dst extents "
            f"{[r.extent for r in d_reg.region]} differ"
        )
    bar = None
    if remote_barrier is not None:
        bar = _barrier(remote_barrier, "copy_cluster")
        if not is_cluster_barrier(bar):
            raise errors.TraceError(
                "T.copy_cluster: remote_barrier must be an element of a cluster barrier "
                "(T.alloc_cluster_barrier), which another block arrives on"
            )
    cta = builder.unwrap(block if builder.is_expr(block) else ir.const(block, "int32"))
    extents = s_extents or [ir.const(1, "int32")]
    spec = Parallel(*extents, coalesced_width=coalesced_width)
    for idx in builder.for_(spec, ", ".join(f"i{k}" for k in range(len(extents)))):
        idx = list(idx) if isinstance(idx, tuple) else [idx]
        _store_remote(s_reg, d_reg, idx, cta)
    if bar is not None:
        sync_threads()
        with builder.if_(builder.unwrap(get_thread_binding(0) == 0)) as branch:
            with branch.then():
                mbarrier_arrive(bar, cta_id=block)


def _element(region, idx):
    """``region``'s element at the loop indices ``idx`` (over its non-unit extents)."""
    it = iter(idx)
    indices = []
    for r in region.region:
        if builder.static_value(r.extent) == 1:
            indices.append(r.begin)
        else:
            indices.append(r.begin + next(it))
    return ir.TensorLoad(region.source, indices)


def _store_remote(s_reg, d_reg, idx, cta):
    from tvm_tirx import tirx as _tirx
    from tvm_tirx.script import tirx as _T

    from .math import address_of

    target = address_of(_element(d_reg, idx))
    call = _tirx.call_extern("tl::st_cluster", target, _element(s_reg, idx), cta, ty="int32")
    _T.emit_(ir.Evaluate(call, loc=builder.user_loc()))


def copy_cluster(
    src,
    dst,
    *,
    dst_block=None,
    cluster_mask=None,
    remote_barrier=None,
    eviction_policy=None,
    coalesced_width=None,
    annotations=None,
    loop_layout=None,
):
    """Copy within a thread-block cluster: a multicast load (``cluster_mask``) or a store
    into another block's shared memory (``dst_block``); see the module docstring."""
    from .tileop import copy

    builder.state()
    if (dst_block is None) == (cluster_mask is None):
        raise errors.TraceError(
            "T.copy_cluster takes exactly one of dst_block= (shared -> another block's "
            "shared) and cluster_mask= (a multicast load)"
        )
    if cluster_mask is not None:
        cluster = check_cluster_mask(cluster_mask, "T.copy_cluster")
        if remote_barrier is not None or loop_layout is not None:
            raise errors.TraceError(
                "T.copy_cluster(cluster_mask=...) takes no remote_barrier or loop_layout"
            )
        s = builder.unwrap(src)
        d = builder.unwrap(dst)
        s_scope = str((s if is_tensor(s) else s.source).ty.scope) or "global"
        d_scope = str((d if is_tensor(d) else d.source).ty.scope) or "global"
        if not (s_scope == "global" and d_scope.startswith("shared")):
            raise errors.TraceError(
                f"T.copy_cluster(cluster_mask=...) multicasts global -> shared loads, got "
                f"{s_scope} -> {d_scope}"
            )

        def load(a, b):
            copy(a, b, eviction_policy=eviction_policy, annotations=annotations)

        multicast_copy(src, dst, cluster_mask, cluster, load)
        return
    if loop_layout is not None:
        raise errors.TraceError("T.copy_cluster: loop_layout is not supported (the layout of "
                                "the block-to-block loop is the compiler's)")  # fmt: skip
    _block_to_block(src, dst, dst_block, remote_barrier, coalesced_width)
