"""TMA and mbarrier support of the CUDA emulator (:mod:`tilelang.testing.cuda_emulator`).

Models what ``backends/cuda/passes/tma_lowering.py`` emits:

* host side: ``map = stack_alloca("tensormap")`` and ``tensormap_encode_tiled(map, ptr,
  dims..., byte strides..., box..., element strides...)`` record the map's parameters,
  checked like ``cuTensorMapEncodeTiled`` does (16-byte aligned strides, box extents in
  1..256, the inner box within the swizzle span);
* ``tl::tma_load_<R>d(smem, &map, bar, coords...)``: the box is copied at once, elements
  outside the tensor zero-filled, written compactly (innermost fastest) through the
  swizzle (``tensor_map.hw_swizzle`` on shared-pool byte addresses), and its bytes are
  counted on ``bar``;
* mbarriers: ``tl::mbarrier_init`` / ``_arrive_expect_tx`` / ``_wait`` (and hopper.h's
  ``_arrive`` / ``_expect_tx``) track arrivals,
  pending transaction bytes and completed phases; a wait whose phase cannot have completed
  (it would spin forever on a GPU) raises :class:`EmulationError`, as does a load counted
  on a barrier that expects fewer bytes;
* ``tl::tma_store_<R>d(&map, smem, coords...)`` (``backends/cuda/passes/tma_store.py``):
  the box is read through the swizzle and written at once, parts outside the tensor
  dropped; ``tl::tma_store_commit`` / ``tl::tma_store_wait_read<N>`` track the bulk groups
  whose shared source is still being read: a ``stmatrix`` over such bytes, or a block that
  ends with one (its shared memory is gone), raises :class:`EmulationError`;
* ``tl::tma_store_add_<R>d(&map, smem, coords...)`` (``passes/tma_reduce.py``,
  ``cp.reduce.async.bulk.tensor .add``): as a store, but the box is added into the tensor
  (in its element type); with ``race_check`` its read of the tile is an async-proxy read
  at the issue and again at the ``wait_group.read`` that retires it (a warp's write of it
  with no ``fence.proxy.async`` since, or one in the same barrier interval as either,
  raises);
* ``tl::st_shared_pair<T>(smem, regs)``: ``regs[0..1]`` converted, one aligned vector store;
* ``tl::ptx_stmatrix_x{1,2,4}<T>(smem, regs)`` (PTX ``stmatrix .m8n8 .b16``, ldsm.h): lane
  ``l``'s register ``q`` (its values ``regs[2q]``, ``regs[2q+1]`` converted to ``T``) goes
  to row ``l // 4``, elements ``2 (l % 4)``, ``+1`` of matrix ``q``, whose 16-byte row
  addresses lanes ``8q .. 8q+7`` give.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
from tvm_tirx import ir

from ..backends.cuda.tensor_map import MAX_BOX, hw_swizzle
from ..layout.swizzle import SwizzleMode

ENCODE_OP = "tirx.cuda.tensormap_encode_tiled"


class TensorMapState:
    """The parameters of one encoded tensor map (innermost first, like the driver's)."""

    def __init__(self):
        self.encoded = False

    def encode(self, machine, call, error):
        attrs = call.attrs
        rank = int(attrs.rank)
        args = list(call.args)
        self.buf, flat = machine._pointer(args[1], True)
        self.base = int(np.asarray(flat).flat[0])
        vals = [int(machine.scalar(a)) for a in args[2:]]
        self.dims = vals[:rank]
        self.strides = vals[rank : 2 * rank - 1]
        self.box = vals[2 * rank - 1 : 3 * rank - 1]
        self.elem_strides = vals[3 * rank - 1 : 4 * rank - 1]
        self.swizzle = SwizzleMode(int(attrs.swizzle))
        self.itemsize = self.buf.data.dtype.itemsize
        if any(s % 16 for s in self.strides):
            raise error(
                f"tensor map of {self.buf.name}: byte strides {self.strides} not 16-aligned"
            )
        if any(not 1 <= b <= MAX_BOX for b in self.box):
            raise error(f"tensor map of {self.buf.name}: box {self.box} outside 1..{MAX_BOX}")
        inner = self.box[0] * self.itemsize
        if inner % 16 or (
            self.swizzle is not SwizzleMode.NONE and inner > self.swizzle.swizzle_byte_size()
        ):
            raise error(f"tensor map of {self.buf.name}: inner box of {inner} bytes")
        if any(e != 1 for e in self.elem_strides):
            raise error("the emulator models element strides of 1 only")
        self.encoded = True

    def box_elements(self, coords):
        """(flat tensor element, inside the tensor) of every box element at ``coords``
        (innermost first), innermost fastest."""
        grids = np.meshgrid(*[np.arange(b) for b in reversed(self.box)], indexing="ij")
        idx = [g.reshape(-1) for g in reversed(grids)]  # innermost first
        inside = np.ones(idx[0].shape, bool)
        flat = np.full(idx[0].shape, self.base, np.int64)
        elem_strides = [1] + [s // self.itemsize for s in self.strides]
        for d, (i, c) in enumerate(zip(idx, coords)):
            g = i + c
            inside &= (g >= 0) & (g < self.dims[d])
            flat += np.where(inside, g, 0) * elem_strides[d]
        return flat, inside

    def box_values(self, coords):
        """The box at ``coords`` (innermost first) as a flat array, innermost fastest."""
        flat, inside = self.box_elements(coords)
        out = np.zeros(flat.shape, self.buf.data.dtype)
        out[inside] = self.buf.data[flat[inside]]
        return out


def is_address(e) -> bool:
    """Whether ``e`` is ``address_of(tensor[...])``."""
    return isinstance(e, ir.Call) and e.op.name == "tirx.address_of"


def address_value(machine, e, mask):
    """A byte address for ``address_of(tensor[...])`` (the host's alignment test of a TMA
    map's base): the element offset in bytes, plus one element when the emulator runs with
    ``aligned=False`` (tensors that start off a 16-byte boundary)."""
    b, flat = machine._pointer(e, mask)
    size = b.data.dtype.itemsize
    extra = 0 if machine.aligned or size >= 16 else size
    return (np.asarray(flat, np.int64) * size + extra).astype(np.uint64)


def _pool_offset(arr) -> int:
    """Byte offset of ``arr`` in the array its memory belongs to (the shared-memory pool)."""
    root = arr
    while root.base is not None and isinstance(root.base, np.ndarray):
        root = root.base
    return arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]


class Barriers:
    """mbarrier states keyed by (buffer name, element)."""

    def __init__(self, error):
        self.error = error
        self.state = {}
        self.version = 0  # bumped by every change (the task scheduler detects deadlocks by it)

    def _key(self, machine, ptr, mask):
        b, flat = machine._pointer(ptr, mask)
        active = np.broadcast_to(mask, (machine.lanes,))
        return [(b.name, int(flat[t])) for t in np.nonzero(active)[0]]

    def init(self, machine, args, mask):
        count = int(machine.scalar(args[1]))
        for key in self._key(machine, args[0], mask):
            self.state[key] = {"count": count, "arrived": 0, "tx": 0, "phase": 0}

    def _get(self, key):
        if key not in self.state:
            raise self.error(f"mbarrier {key[0]}[{key[1]}] used before mbarrier_init")
        return self.state[key]

    def _maybe_complete(self, s):
        self.version += 1
        if s["arrived"] >= s["count"] and s["tx"] == 0:
            s["phase"] += 1
            s["arrived"] = 0

    def arrive_expect_tx(self, machine, args, mask):
        nbytes = int(machine.scalar(args[1]))
        for key in self._key(machine, args[0], mask):
            s = self._get(key)
            s["tx"] += nbytes
            s["arrived"] += 1
            self._maybe_complete(s)

    def arrive(self, machine, args, mask):
        """``tl::mbarrier_arrive(bar)`` (hopper.h): one arrival per active thread."""
        for key in self._key(machine, args[0], mask):
            s = self._get(key)
            s["arrived"] += 1
            self._maybe_complete(s)

    def arrive_warp(self, machine, args, mask):
        """``tl::mbarrier_arrive_warp(bar)`` (hopper.h): one arrival per warp, whose lanes
        must all be active (``__syncwarp``)."""
        active = np.broadcast_to(mask, (machine.lanes,))
        keys = self._key(machine, args[0], mask)
        idx = np.nonzero(active)[0]
        for w in range(0, machine.lanes, 32):
            lanes = active[w : w + 32]
            if not lanes.any():
                continue
            if not lanes.all():
                raise self.error(f"mbarrier_arrive_warp: warp {w // 32} is not wholly active")
            s = self._get(keys[int(np.searchsorted(idx, w))])
            s["arrived"] += 1
            self._maybe_complete(s)

    def expect_tx(self, machine, args, mask):
        """``tl::mbarrier_expect_tx(bar, n)`` (hopper.h): n more pending bytes, no arrival."""
        nbytes = int(machine.scalar(args[1]))
        for key in self._key(machine, args[0], mask):
            self._get(key)["tx"] += nbytes
        self.version += 1

    def complete_tx(self, key, nbytes, early=False):
        """``nbytes`` of a TMA load arrived; ``early``: a peer block's multicast, which may
        come before this block's ``arrive.expect_tx`` (the phase cannot complete before)."""
        s = self._get(key)
        s["tx"] -= nbytes
        if s["tx"] < 0 and (not early or s["arrived"] >= s["count"]):
            raise self.error(f"mbarrier {key[0]}[{key[1]}] received more bytes than expected")
        self._maybe_complete(s)

    def wait(self, machine, args, mask):
        parity = np.broadcast_to(np.asarray(machine.eval(args[1], mask)), (machine.lanes,))
        active = np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]
        keys = self._key(machine, args[0], mask)
        for t, key in zip(active, keys):
            self._get(key)
            want = int(parity[t]) % 2

            def ready(key=key, want=want):
                # try_wait.parity(p) returns once the phase of parity p has completed: the
                # current (incomplete) phase has the other parity
                return self.state[key]["phase"] % 2 != want

            def describe(key=key, t=t):
                s = self.state[key]
                return (
                    f"mbarrier_wait on {key[0]}[{key[1]}] with parity {int(parity[t])} would "
                    f"never return (phase {s['phase']}, {s['tx']} bytes pending) in block "
                    f"{machine.block_index}, thread {t}"
                )

            if ready():
                continue
            task = getattr(machine.task, "current", None)
            if task is None:
                raise self.error(describe())
            tasks, index = task
            tasks.block(index, ready, describe)


def _tensor_map(machine, mref, rank, fname, error):
    if not (isinstance(mref, ir.Call) and mref.op.name == "tirx.address_of"):
        raise error(f"{fname}: the tensor map operand is not address_of(map)")
    tmap = machine.env.get(mref.args[0].__chandle__())
    if not isinstance(tmap, TensorMapState) or not tmap.encoded:
        raise error(f"{fname}: tensor map {mref.args[0].name} is not encoded")
    if len(tmap.dims) != rank:
        raise error(f"{fname} with a rank-{len(tmap.dims)} tensor map")
    return tmap


def _box_elements(tmap, sb, pool, first, n, fname, error):
    """Elements of shared buffer ``sb`` a box of ``n`` elements starting at element
    ``first`` occupies (through the map's swizzle), after the alignment checks."""
    size = tmap.itemsize
    start = pool + first * size
    align = 128 if tmap.swizzle is SwizzleMode.NONE else tmap.swizzle.smem_alignment()
    if start % 128:
        raise error(f"{fname}: shared box at byte {start} is not 128-byte aligned")
    if tmap.swizzle is not SwizzleMode.NONE and start % align:
        raise error(f"{fname}: swizzled shared box at byte {start} not {align}-aligned")
    addr = hw_swizzle(start + np.arange(n, dtype=np.int64) * size, tmap.swizzle)
    elem = (addr - pool) // size
    if elem.min() < 0 or elem.max() >= sb.data.size:
        raise error(f"{fname}: box past {sb.name}")
    return elem


def tma_load(machine, barriers, fname, args, mask, error, target=None, early=False):
    """``tl::tma_load_<R>d(smem, &map, bar, coords...)`` for every active thread
    (``target``: maps the shared buffer to the one written, a peer block's for a multicast
    (``cuda_emulator_cluster``); ``early``: see :meth:`Barriers.complete_tx`)."""
    rank = int(fname[len("tl::tma_load_")])
    tmap = _tensor_map(machine, args[1], rank, fname, error)
    sb, sflat = machine._pointer(args[0], mask)
    if target is not None:
        sb = target(sb)
    keys = barriers._key(machine, args[2], mask)
    coords = [
        np.broadcast_to(np.asarray(machine.eval(c, mask)), (machine.lanes,)) for c in args[3:]
    ]
    active = np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]
    size = tmap.itemsize
    if sb.data.dtype.itemsize != size:
        raise error(f"{fname}: shared {sb.name} and the tensor map differ in element size")
    pool = _pool_offset(sb.data)
    for t, key in zip(active, keys):
        values = tmap.box_values([int(c[t]) for c in coords])
        elem = _box_elements(tmap, sb, pool, int(sflat[t]), values.size, fname, error)
        if getattr(machine, "race", None) is not None:
            machine.race.async_write(sb, elem, fname)
        sb.data[elem] = values
        barriers.complete_tx(key, values.size * size, early)


class BulkStores:
    """The bulk async-groups of TMA stores per thread: (pool offset, byte ranges) read."""

    def __init__(self, error):
        self.error = error
        self.open = {}  # thread -> byte ranges of stores not yet committed
        self.groups = {}  # thread -> list of committed groups (lists of byte ranges)
        self.on_done = {}  # (thread, lo, hi) -> called when the wait retires the read

    def add(self, t, lo, hi, on_done=None):
        self.open.setdefault(t, []).append((lo, hi))
        if on_done is not None:
            self.on_done.setdefault((t, lo, hi), []).append(on_done)

    def commit(self, threads):
        for t in threads:
            self.groups.setdefault(t, []).append(self.open.pop(t, []))

    def wait_read(self, threads, n):
        """The groups of ``threads`` but the last ``n`` are read: their ``on_done`` run (the
        race checker's record of the reads, which last until this wait)."""
        for t in threads:
            groups = self.groups.get(t, [])
            keep = len(groups) - n if n else len(groups)
            for lo, hi in [r for g in groups[:keep] for r in g]:
                for done in self.on_done.pop((t, lo, hi), []):
                    done()
            self.groups[t] = groups[keep:]

    def check_write(self, lo, hi, what):
        """Fail when shared bytes [lo, hi) are still read by a TMA store."""
        for t, groups in self.groups.items():
            for lo2, hi2 in [r for g in groups for r in g] + self.open.get(t, []):
                if lo < hi2 and lo2 < hi:
                    raise self.error(
                        f"{what} overwrites shared bytes a TMA store of thread {t} may still "
                        "read (no tl::tma_store_wait_read before the reuse)"
                    )

    def end_of_block(self, block):
        pending = [
            t
            for t in set(self.open) | set(self.groups)
            if self.open.get(t) or any(self.groups.get(t, []))
        ]
        self.open, self.groups, self.on_done = {}, {}, {}
        if pending:
            raise self.error(
                f"block {block} ends while TMA stores of threads {sorted(pending)} may still "
                "read shared memory (tl::tma_store_commit + tl::tma_store_wait_read<0> missing)"
            )


def bulk_stores(machine, error) -> BulkStores:
    """The machine's :class:`BulkStores` (created on first use)."""
    state = getattr(machine, "bulk_stores", None)
    if state is None:
        state = machine.bulk_stores = BulkStores(error)
    return state


def tma_store(machine, fname, args, mask, error):
    """``tl::tma_store_<R>d(&map, smem, coords...)`` for every active thread: the box read
    through the swizzle, its elements inside the tensor written (the rest clipped);
    ``tl::tma_store_add_<R>d``: added into them instead."""
    add = fname.startswith("tl::tma_store_add_")
    rank = int(fname[len("tl::tma_store_add_" if add else "tl::tma_store_")])
    tmap = _tensor_map(machine, args[0], rank, fname, error)
    sb, sflat = machine._pointer(args[1], mask)
    if sb.local or sb.data.dtype.itemsize != tmap.itemsize:
        raise error(f"{fname}: {sb.name} is not shared memory of the map's element size")
    coords = [
        np.broadcast_to(np.asarray(machine.eval(c, mask)), (machine.lanes,)) for c in args[2:]
    ]
    sflat = np.broadcast_to(np.asarray(sflat), (machine.lanes,))
    pool = _pool_offset(sb.data)
    n = int(np.prod(tmap.box))
    groups = bulk_stores(machine, error)
    for t in np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]:
        elem = _box_elements(tmap, sb, pool, int(sflat[t]), n, fname, error)
        flat, inside = tmap.box_elements([int(c[t]) for c in coords])
        if add:
            # one element at a time: a box never names an element twice
            tmap.buf.data[flat[inside]] += sb.data[elem][inside]
        else:
            tmap.buf.data[flat[inside]] = sb.data[elem][inside]
        lo = pool + int(elem.min()) * tmap.itemsize
        done = None
        race = getattr(machine, "race", None)
        if add and race is not None:  # an async-proxy read, from the issue to the wait

            def done(sb=sb, starts=elem * tmap.itemsize, t=int(t), race=race):
                race.access(sb, starts, tmap.itemsize, np.full(n, t), "read",
                            f"{fname} (its wait_group.read)", generic=False)  # fmt: skip

            done()
        groups.add(int(t), lo, pool + (int(elem.max()) + 1) * tmap.itemsize, done)


def bulk_group_op(machine, fname, mask, error):
    """``tl::tma_store_commit`` / ``tl::tma_store_wait_read<N>`` of the active threads."""
    threads = [int(t) for t in np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]]
    groups = bulk_stores(machine, error)
    if fname == "tl::tma_store_commit":
        groups.commit(threads)
    else:
        groups.wait_read(threads, int(fname[fname.index("<") + 1 : fname.index(">")]))


_STMATRIX_TYPES = {"half_t": np.float16, "bfloat16_t": ml_dtypes.bfloat16}
_PAIR_TYPES = {**_STMATRIX_TYPES, "float": np.float32, "double": np.float64, "int": np.int32}


def st_shared_pair(machine, fname, args, mask, error):
    """``tl::st_shared_pair<T>(smem, regs)``: each active thread stores ``regs[0..1]``
    converted to ``T`` as one 2-element vector (its address aligned to it)."""
    m = re.fullmatch(r"tl::st_shared_pair<(\w+)>", fname)
    if m is None or m.group(1) not in _PAIR_TYPES:
        raise error(f"the emulator does not handle the extern call {fname}")
    sb, sflat = machine._pointer(args[0], mask)
    lb, lflat = machine._pointer(args[1], mask)
    if sb.local or sb.data.dtype != np.dtype(_PAIR_TYPES[m.group(1)]) or not lb.local:
        raise error(f"{fname}: operands are not shared {m.group(1)} and registers")
    sflat = np.broadcast_to(np.asarray(sflat), (machine.lanes,))
    lflat = np.broadcast_to(np.asarray(lflat), (machine.lanes,))
    pool, size = _pool_offset(sb.data), sb.data.itemsize
    groups = bulk_stores(machine, error)
    for t in np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]:
        first = int(sflat[t])
        if (pool + first * size) % (2 * size) or first < 0 or first + 2 > sb.data.size:
            raise error(f"{fname}: element {first} of {sb.name} is no aligned pair inside it")
        groups.check_write(pool + first * size, pool + (first + 2) * size, fname)
        slot = int(lflat[t])
        sb.data[first : first + 2] = lb.data[t, slot : slot + 2]
    return None


def stmatrix(machine, fname, args, mask, error):
    """``tl::ptx_stmatrix_x{1,2,4}<T>(smem, regs)``, warp by warp (all 32 lanes)."""
    m = re.fullmatch(r"tl::ptx_stmatrix_x([124])<(\w+)>", fname)
    if m is None or m.group(2) not in _STMATRIX_TYPES:
        raise error(f"the emulator does not handle the extern call {fname}")
    nmat, dtype = int(m.group(1)), _STMATRIX_TYPES[m.group(2)]
    warps = machine._warps(fname, mask)
    sb, sflat = machine._pointer(args[0], mask)
    if sb.local or sb.data.dtype != np.dtype(dtype):
        raise error(f"{fname}: {sb.name} is not shared memory of {m.group(2)}")
    lb, lflat = machine._pointer(args[1], mask)
    sflat = np.broadcast_to(np.asarray(sflat), (machine.lanes,))
    lflat = np.broadcast_to(np.asarray(lflat), (machine.lanes,))
    if not lb.local:
        raise error(f"{fname}: register operand {lb.name} is not a local tensor")
    size = sb.data.itemsize
    pool = _pool_offset(sb.data)
    groups = bulk_stores(machine, error)
    for lanes in warps:
        for q in range(nmat):
            for r in range(8):
                first = int(sflat[lanes[8 * q + r]])
                if (first * size) % 16 or first < 0 or first + 8 > sb.data.size:
                    raise error(
                        f"{fname}: row address of {sb.name} (lane {8 * q + r}, block "
                        f"{machine.block_index}) is not a 16-byte row inside it"
                    )
                groups.check_write(pool + first * size, pool + first * size + 16, fname)
                for c in range(4):  # lane 4 r + c holds word c of the row
                    t = lanes[4 * r + c]
                    slot = int(lflat[t]) + 2 * q
                    sb.data[first + 2 * c : first + 2 * c + 2] = lb.data[t, slot : slot + 2]
    return None


__all__ = [
    "ENCODE_OP",
    "BulkStores",
    "bulk_group_op",
    "bulk_stores",
    "stmatrix",
    "tma_store",
    "Barriers",
    "TensorMapState",
    "address_value",
    "is_address",
    "tma_load",
]
