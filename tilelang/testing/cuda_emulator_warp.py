"""Warp votes, ``__shfl_up_sync``, ``tl::warp_reduce_*`` and block votes for the CUDA emulator.

The emulator holds one value per thread of the block (a numpy vector over lanes); a warp is 32
consecutive entries. :func:`warp_extern` returns the result vector of one call, or None when
``fname`` is not one of these intrinsics. Inactive lanes (``mask`` False) take part with the
values they would have had; their results are not stored by the caller.

Every ``*_sync`` call (shuffles, votes, matches, and the warp reductions, whose helpers
shuffle with the full mask) must be reached by every lane its member mask names
(:func:`check_converged`); the block votes by the whole block.
"""

from __future__ import annotations

import numpy as np

_REDUCE = {
    "sum": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "bitand": np.bitwise_and,
    "bitor": np.bitwise_or,
}


FULL_MASK = 0xFFFFFFFF


def check_converged(machine, fname, member_mask, mask):
    """A ``*_sync`` warp intrinsic must be reached by every lane its member mask names
    (``member_mask``: an expression, or an int for all lanes alike): on the GPU the lanes
    that arrive wait for the others forever (independent thread scheduling)."""
    active = np.broadcast_to(np.asarray(mask, bool), (machine.lanes,))
    if not active.any():
        return
    if isinstance(member_mask, int):
        named = np.full(machine.lanes, member_mask, np.int64)
    else:
        named = np.broadcast_to(np.asarray(machine.eval(member_mask, mask)), (machine.lanes,))
    for w0 in range(0, machine.lanes, 32):
        warp = active[w0 : w0 + 32]
        for t in np.nonzero(warp)[0]:
            bits = int(named[w0 + t]) & FULL_MASK
            missing = [i for i in range(warp.size) if (bits >> i) & 1 and not warp[i]]
            if missing:
                raise machine.error_type(
                    f"{fname} with member mask {bits:#x} reached by only part of warp "
                    f"{w0 // 32} of block {machine.block_index} (lanes {missing[:8]} do not "
                    "reach it): the arriving lanes would wait forever on the GPU"
                )


def _per_warp(values, lanes, fold):
    """Each lane gets ``fold`` of the values of its warp."""
    out = np.empty_like(values)
    for base in range(0, lanes, 32):
        out[base : base + 32] = fold(values[base : base + 32])
    return out


def warp_extern(m, fname, args, e, mask):
    """The value of ``fname(*args)`` for every lane, or None (see module docstring)."""
    lanes = m.lanes
    lane = np.arange(lanes)

    def vec(x):
        return np.broadcast_to(m.eval(x, mask), (lanes,)).copy()

    if fname == "__shfl_up_sync":
        check_converged(m, fname, args[0], mask)
        value = vec(args[1])
        k = vec(args[2]).astype(np.int64)
        width = int(m.scalar(args[3])) if len(args) > 3 else 32
        src = np.where(lane % width >= k, lane - k, lane)
        return value[src]
    if fname.startswith("tl::warp_reduce_"):
        kind = fname[len("tl::warp_reduce_") :].split("<")[0]
        check_converged(m, fname, FULL_MASK, mask)
        value = vec(args[0])
        return _per_warp(value, lanes, lambda w: _REDUCE[kind].reduce(w))
    if fname in ("__any_sync", "__all_sync", "__ballot_sync", "__match_any_sync"):
        check_converged(m, fname, args[0], mask)
        wmask = vec(args[0]).astype(np.uint64)
        value = vec(args[1])
        out = np.zeros(lanes, np.uint64 if fname != "__any_sync" else np.int64)
        for t in range(lanes):
            base = t - t % 32
            group = value[base : base + 32]
            if fname == "__any_sync":
                out[t] = int((group != 0).any())
            elif fname == "__all_sync":
                out[t] = int((group != 0).all())
            else:
                hit = group != 0 if fname == "__ballot_sync" else group == value[t]
                bits = sum(1 << j for j in range(len(group)) if hit[j] and (wmask[t] >> j) & 1)
                out[t] = bits
        return m._as(out, e.ty)
    if fname == "tl::match_all_sync":
        check_converged(m, fname, args[0], mask)
        wmask = vec(args[0]).astype(np.uint64)
        value = vec(args[1])
        out = np.zeros(lanes, np.uint64)
        for t in range(lanes):
            base = t - t % 32
            group = value[base : base + 32]
            inside = [j for j in range(len(group)) if (wmask[t] >> j) & 1]
            out[t] = wmask[t] if all(group[j] == group[inside[0]] for j in inside) else 0
        return m._as(out, e.ty)
    if fname == "__activemask":
        return m._as(
            np.array([(1 << min(32, lanes - (t - t % 32))) - 1 for t in range(lanes)], np.uint64),
            e.ty,
        )
    if fname in ("__syncthreads_count", "__syncthreads_and", "__syncthreads_or"):
        if not np.all(np.broadcast_to(mask, (lanes,))):
            raise m.error_type(
                f"{fname} reached by only part of block {m.block_index}: a divergent barrier"
            )
        hit = vec(args[0]) != 0
        total = {"count": hit.sum(), "and": hit.all(), "or": hit.any()}[fname.rsplit("_", 1)[1]]
        return m._as(np.full(lanes, int(total)), e.ty)
    return None
