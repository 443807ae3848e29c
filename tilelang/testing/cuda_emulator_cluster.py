"""Thread-block clusters in the CUDA emulator (:mod:`tilelang.testing.cuda_emulator`).

A kernel that calls ``tl::cluster_dims<x, y, z>()`` (``backends/cuda/passes/
cluster_multicast.py``) runs cluster by cluster: the blocks of one cluster are *members*,
each a copy of the emulator's machine with its own shared memory, mbarriers and block
indices (global tensors and the host's tensor maps are shared), run as cooperative tasks
(Python threads of which exactly one runs at a time, :class:`Scheduler`). A task that waits
(an mbarrier phase, a cluster barrier, its warp-specialized branches) hands the turn on and
resumes when it gets it back and its condition holds; a full round of turns in which no
task changed anything is the deadlock a GPU would hang in (:class:`EmulationError`, naming
each waiting task and what it waits for). The same scheduler runs the warp-specialized
branches of a block outside a cluster launch (``cuda_emulator_ws``).

Cluster operations (``cluster.h``, ``hopper.h``):

* ``tl::block_rank_in_cluster()``: ``x % cx + (y % cy) cx + (z % cz) cx cy``;
* ``tl::cluster_sync()`` / ``_arrive[_relaxed]`` / ``_wait``: a barrier over every thread of
  every member (lanes count by the active mask);
* ``tl::tma_load_multicast_<R>d(smem, map, bar, mask, c...)``: the box is written at the
  same shared address in every member whose rank bit is set, its bytes counted on the
  mbarrier at the same address in each (a peer's bytes may reach a barrier before its own
  ``arrive.expect_tx``: the pending count goes below zero, as on the GPU);
* ``tl::mbarrier_wait_cluster(bar, parity)``: ``tl::mbarrier_wait``;
* ``tl::st_cluster(&dst[i], value, cta)``: the store into member ``cta``'s copy of ``dst``;
* ``tl::mbarrier_arrive_cluster(bar, cta)`` / ``tl::mbarrier_arrive_cluster_warp<N>(bar)``
  (and its ``_release`` form, which differs in memory scope only): arrivals on a member's
  mbarrier (the warp form: one arrival per whole active warp on each of the members
  ``0..N-1``).

Without a cluster launch the same calls act on the one block (rank 0, the cluster barrier
is the block's). ``race_check`` does not cover the blocks of a cluster launch.
"""

from __future__ import annotations

import copy
import itertools
import re
import threading

import numpy as np
import tvm_ffi
from tvm_tirx import ir

from ..lowering.stmt import launch_of

_MARK_RE = re.compile(r"tl::cluster_dims<\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*>")


def cluster_dims_of(func):
    """The ``(x, y, z)`` of the kernel's ``tl::cluster_dims`` marker, or None."""
    found = []

    def visit(call):
        if getattr(call.op, "name", "") == "tirx.call_extern" and call.args:
            m = _MARK_RE.fullmatch(str(getattr(call.args[0], "value", "")))
            if m:
                found.append(tuple(int(g) for g in m.groups()))

    body = getattr(func, "body", None)  # (tests run single statements on stand-ins)
    if body is not None:
        tvm_ffi.structural_walk(body, [(ir.Call, visit)])
    return found[0] if found else None


class Scheduler:
    """Cooperative tasks: exactly one runs at a time (module doc). ``progress()`` returns a
    value that changes whenever a task does something another task may wait for (mbarrier
    and cluster-barrier states): a full round of turns that leaves it unchanged while every
    task waits is a deadlock."""

    def __init__(self, error, progress):
        self.error, self.progress = error, progress
        self.cv = threading.Condition()
        self.queue: list[int] = []  # unfinished tasks, in turn order
        self.current = None
        self.failure: BaseException | None = None
        self.finished = 0
        self._ids = itertools.count()
        self.threads: list[threading.Thread] = []
        self.labels: dict[int, str] = {}  # task -> what it runs (for error messages)
        self.waits: dict[int, object] = {}  # waiting task -> describe() of its wait

    def _state(self):
        return (self.progress(), self.finished)

    def spawn(self, fn, machine, after=None, label=None) -> int:
        """A new task running ``fn()`` with ``machine.task.current`` set to it (placed after
        task ``after`` in the turn order, else last); ``label`` names it in errors."""
        i = next(self._ids)
        with self.cv:
            at = self.queue.index(after) + 1 if after in self.queue else len(self.queue)
            self.queue.insert(at, i)
            self.labels[i] = label or f"task {i}"
        t = threading.Thread(target=self._worker, args=(i, fn, machine), daemon=True)
        self.threads.append(t)
        t.start()
        return i

    def _worker(self, i, fn, machine):
        with self.cv:
            while self.current != i and self.failure is None:
                self.cv.wait()
        machine.task.current = (self, i)
        try:
            if self.failure is None:
                fn()
        except BaseException as err:  # noqa: BLE001 - handed to the launching thread
            with self.cv:
                if self.failure is None:
                    self.failure = err
        finally:
            machine.task.current = None
            with self.cv:
                self.finished += 1
                self._pass(i)
                self.queue.remove(i)
                self.cv.notify_all()

    def _pass(self, i):
        q = self.queue
        if i not in q:
            self.current = q[0] if q else None
            return
        at = q.index(i)
        others = q[at + 1 :] + q[:at]
        self.current = others[0] if others else None

    def run(self, jobs):
        """From a thread that is no task: run ``(fn, machine, label)`` jobs to completion."""
        for fn, machine, label in jobs:
            self.spawn(fn, machine, label=label)
        with self.cv:
            self.current = self.queue[0] if self.queue else None
            self.cv.notify_all()
        for t in list(self.threads):
            t.join()
        if self.failure is not None:
            raise self.failure

    def run_children(self, me, jobs, what):
        """From task ``me``: run ``(fn, machine, label)`` jobs as tasks and wait for them
        (``what``: the jobs, for errors)."""
        kids = []
        after = me
        for fn, machine, label in jobs:
            after = self.spawn(fn, machine, after, f"{self.labels[me]}, {label}")
            kids.append(after)

        def done():
            return not any(k in self.queue for k in kids)

        self.block(me, done, lambda: f"waits for its {what}")
        if self.failure is not None:
            raise self.failure

    def block(self, me, ready, describe):
        """Task ``me`` waits until ``ready()``, handing the turn on (module doc)."""
        while not ready():
            with self.cv:
                if len(self.queue) < 2:
                    raise self.error(f"{self._wait(me, describe)}: no other task can complete it")
                seen = self._state()
                self.waits[me] = describe
                self._pass(me)
                self.cv.notify_all()
                while self.current != me and self.failure is None:
                    self.cv.wait()
                del self.waits[me]
                if self.failure is not None:
                    raise self.error(f"{self._wait(me, describe)}: another task failed")
                if self._state() == seen and not ready():
                    others = [f"\n  {self._wait(k, d)}" for k, d in self.waits.items() if k != me]
                    raise self.error(
                        f"{self._wait(me, describe)}: every task waits (deadlock)"
                        + ("; the others:" + "".join(others) if others else "")
                    )

    def _wait(self, task, describe):
        """``<task's label>: <what it waits for>``."""
        return f"{self.labels[task]}: {describe()}"


class Cluster:
    """The members of one cluster, their barrier and rank lookup."""

    def __init__(self, dims, error):
        self.dims, self.error = dims, error
        self.members: dict[int, object] = {}  # rank -> machine
        self.arrived = 0
        self.generation = 0
        self.total = 0
        self.sched = Scheduler(error, self._progress)

    def _progress(self):
        return (
            self.generation * 1_000_003
            + self.arrived
            + sum(m.barriers.version for m in self.members.values())
        )


def rank_of(block_index, dims) -> int:
    """``%cluster_ctarank`` of the block at ``block_index`` in clusters of ``dims``."""
    cx, cy, cz = dims
    x = block_index.get("blockIdx.x", 0) % cx
    y = block_index.get("blockIdx.y", 0) % cy
    z = block_index.get("blockIdx.z", 0) % cz
    return x + y * cx + z * cx * cy


def run_clusters(machine, region, dims, mask):
    """Run the grid of blockIdx launches starting at ``region`` cluster by cluster."""
    nest = []  # (tag, extent, var)
    node = region
    while True:
        launch = launch_of(node)
        if launch is None or not launch[0].startswith("blockIdx"):
            break
        nest.append((launch[0], int(machine.scalar(launch[1])), launch[2]))
        node = node.body
        while isinstance(node, ir.SeqStmt) and len(node.seq) == 1:
            node = node.seq[0]
    axis = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2}
    steps = [dims[axis[tag]] for tag, _, _ in nest]
    for tag, extent, _ in nest:
        if extent % dims[axis[tag]]:
            raise machine.error_type(
                f"{tag} extent {extent} is not a multiple of the cluster's {dims[axis[tag]]}"
            )
    lanes = int(machine.scalar(launch_of(node)[1])) if launch_of(node) is not None else 1
    origins = itertools.product(*[range(0, e, s) for (_, e, _), s in zip(nest, steps)])
    for origin in origins:
        cluster = Cluster(dims, machine.error_type)
        cluster.total = lanes * int(np.prod(steps))
        jobs = []
        for offset in itertools.product(*[range(s) for s in steps]):
            index = {tag: o + d for (tag, _, _), o, d in zip(nest, origin, offset)}
            if machine.blocks is not None and not _wanted(machine, index):
                continue
            member = _member(machine, cluster, index, nest)
            cluster.members[rank_of(index, dims)] = member
            jobs.append((lambda m=member: m.run(node, mask), member, f"block {index}"))
        if len(jobs) != int(np.prod(steps)):
            if jobs:
                raise machine.error_type("blocks= must name whole clusters")
            continue
        cluster.sched.run(jobs)


def _wanted(machine, index):
    key = tuple(index.get(f"blockIdx.{a}", 0) for a in "xyz")
    return any(key[: len(b)] == b[: len(key)] for b in machine.blocks)


def _member(machine, cluster, index, nest):
    m = copy.copy(machine)
    m.env = dict(machine.env)
    m.bufs = dict(machine.bufs)
    m.block_index = dict(index)
    m.barriers = type(machine.barriers)(machine.error_type)
    m.task = threading.local()
    m.race = None
    m.cluster = cluster
    for key, value in vars(machine).items():  # per-block queues (e.g. pending wgmma groups)
        if isinstance(value, list):
            setattr(m, key, list(value))
    for tag, _, var in nest:
        m.env[var.__chandle__()] = np.int32(index[tag])
    return m


# --------------------------------------------------------------------------- extern calls
def _peer(machine, rank):
    cluster = getattr(machine, "cluster", None)
    if cluster is None:
        if rank != 0:
            raise machine.error_type(f"CTA rank {rank} outside a launch without clusters")
        return machine
    if rank not in cluster.members:
        raise machine.error_type(f"CTA rank {rank} is not in the cluster {cluster.dims}")
    return cluster.members[rank]


def _peer_buf(machine, peer, b):
    if peer is machine:
        return b
    for handle, mine in machine.bufs.items():
        if mine is b:
            return peer.bufs[handle]
    raise machine.error_type(f"{b.name} has no copy in the peer block")


def _my_rank(machine):
    cluster = getattr(machine, "cluster", None)
    return 0 if cluster is None else rank_of(machine.block_index, cluster.dims)


def cluster_extern(machine, fname, args, mask):
    """Handle a cluster call (module doc); ``NotImplemented`` for any other name."""
    if fname.startswith("tl::cluster_dims<"):
        return None
    if fname == "tl::block_rank_in_cluster":
        return np.uint32(_my_rank(machine))
    if fname in ("tl::cluster_sync", "tl::cluster_arrive", "tl::cluster_arrive_relaxed"):
        _cluster_arrive(machine, mask, wait=fname == "tl::cluster_sync")
        return None
    if fname == "tl::cluster_wait":
        _cluster_wait(machine)
        return None
    if fname == "tl::mbarrier_wait_cluster":  # scope only differs from mbarrier_wait
        result = machine.barriers.wait(machine, args, mask)
        if machine.race is not None:
            machine.race.barrier()  # after the wait returned: its acquire point
        return result
    if fname.startswith("tl::tma_load_multicast_"):
        return _multicast(machine, fname, args, mask)
    if fname.startswith("tl::st_cluster"):
        return _store_remote(machine, fname, args, mask)
    if fname == "tl::mbarrier_arrive_cluster":
        cta = np.broadcast_to(np.asarray(machine.eval(args[1], mask)), (machine.lanes,))
        active = np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]
        keys = machine.barriers._key(machine, args[0], mask)
        for t, key in zip(active, keys):
            peer = _peer(machine, int(cta[t]))
            s = peer.barriers._get(key)
            s["arrived"] += 1
            peer.barriers._maybe_complete(s)
        return None
    if fname.startswith(
        ("tl::mbarrier_arrive_cluster_warp<", "tl::mbarrier_arrive_cluster_warp_release<")
    ):
        n = int(fname[fname.index("<") + 1 : fname.index(">")])
        active = np.broadcast_to(mask, (machine.lanes,))
        keys = machine.barriers._key(machine, args[0], mask)
        idx = np.nonzero(active)[0]
        for w in range(0, machine.lanes, 32):
            lanes = active[w : w + 32]
            if not lanes.any():
                continue
            if not lanes.all():
                raise machine.error_type(f"{fname}: warp {w // 32} is not wholly active")
            key = keys[int(np.searchsorted(idx, w))]
            for r in range(n):
                peer = _peer(machine, r)
                s = peer.barriers._get(key)
                s["arrived"] += 1
                peer.barriers._maybe_complete(s)
        return None
    return NotImplemented


def _cluster_arrive(machine, mask, wait):
    cluster = getattr(machine, "cluster", None)
    if cluster is None:  # one block: the block's barrier
        if not np.all(np.broadcast_to(mask, (machine.lanes,))):
            raise machine.error_type("cluster barrier reached by only part of the block")
        return
    cluster.arrived += int(np.count_nonzero(np.broadcast_to(mask, (machine.lanes,))))
    machine.cluster_generation = cluster.generation
    if cluster.arrived >= cluster.total:
        cluster.arrived = 0
        cluster.generation += 1
    if wait:
        _cluster_wait(machine)


def _cluster_wait(machine):
    cluster = getattr(machine, "cluster", None)
    if cluster is None:
        return
    gen = getattr(machine, "cluster_generation", None)
    if gen is None:
        raise machine.error_type("barrier.cluster.wait without an arrive")
    task = getattr(machine.task, "current", None)

    def ready():
        return cluster.generation > gen

    def describe():
        return f"cluster barrier in block {machine.block_index}"

    if not ready():
        if task is None:
            raise machine.error_type(f"{describe()}: no other block can arrive")
        sched, me = task
        sched.block(me, ready, describe)
    machine.cluster_generation = None


def _store_remote(machine, fname, args, mask):
    """``tl::st_cluster(&dst[i], value, cta)``: each active thread stores into its ``cta``."""
    addr = args[0]
    if not (isinstance(addr, ir.Call) and addr.op.name == "tirx.address_of"):
        raise machine.error_type(f"{fname}: unsupported address {addr}")
    load = addr.args[0]
    b = machine.buf(load.source)
    flat, active = machine.flat(b, load.indices, mask, fname)
    value = np.broadcast_to(np.asarray(machine.eval(args[1], mask)), (machine.lanes,))
    cta = np.broadcast_to(np.asarray(machine.eval(args[2], mask)), (machine.lanes,))
    for t in np.nonzero(np.broadcast_to(active, (machine.lanes,)))[0]:
        peer = _peer(machine, int(cta[t]))
        target = _peer_buf(machine, peer, b)
        target.data.reshape(-1)[flat[t]] = value[t]
    return None


def _multicast(machine, fname, args, mask):
    from .cuda_emulator_tma import tma_load

    cta_mask = np.broadcast_to(np.asarray(machine.eval(args[3], mask)), (machine.lanes,))
    active = np.nonzero(np.broadcast_to(mask, (machine.lanes,)))[0]
    if len(set(int(cta_mask[t]) for t in active)) > 1:
        raise machine.error_type(f"{fname}: threads with different CTA masks")
    bits = int(cta_mask[active[0]]) if len(active) else 0
    plain = fname.replace("tma_load_multicast_", "tma_load_")
    rest = [args[0], args[1], args[2], *args[4:]]
    for r in range(16):
        if not bits >> r & 1:
            continue
        peer = _peer(machine, r)
        tma_load(
            machine,
            peer.barriers,
            plain,
            rest,
            mask,
            machine.error_type,
            target=lambda b, peer=peer: _peer_buf(machine, peer, b),
            early=peer is not machine,
        )
    return None


__all__ = ["Scheduler", "cluster_dims_of", "cluster_extern", "rank_of", "run_clusters"]
