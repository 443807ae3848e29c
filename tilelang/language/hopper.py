"""The explicit Hopper API, for authors who write the schedule themselves (upstream names).

mbarriers (``T.alloc_barrier``, ``T.mbarrier_arrive`` / ``_expect_tx`` /
``_arrive_expect_tx`` / ``_wait_parity``, ``T.barrier_arrive`` / ``T.barrier_wait``),
``T.fence_proxy_async``, register reallocation (``T.set_max_nreg`` / ``T.inc_max_nreg`` /
``T.dec_max_nreg``), wgmma groups (``T.warpgroup_arrive`` / ``_commit_batch`` / ``_wait``,
``T.wait_wgmma``), warp-group scopes (``T.ws``), named barriers and cluster barriers.

Each records a tile op (``tilelang/ops/hopper``); the CUDA backend lowers it to a helper
of ``tl_templates/cuda/hopper.h`` on sm_90(a); other targets and older CUDA architectures
report "T.<name> is not supported on ..." at the user's line.
"""

from __future__ import annotations

import contextlib

from tvm_tirx import ir
from tvm_tirx.script import tirx as _T

from .. import errors
from ..ops.hopper import op as _op
from . import builder
from .allocate import alloc_shared
from .tileop import static_clear_accum

WARP_GROUP = 128


def _emit(op_def, *operands, **options):
    call = op_def.make(*operands, loc=builder.user_loc(), **options)
    _T.emit_(ir.Evaluate(call, loc=call.loc))


def _barrier(mbarrier, name: str):
    """The element expression ``bars[i]`` of a barrier operand (a whole one-element barrier
    tensor means its element 0)."""
    value = builder.unwrap(mbarrier)
    if isinstance(value, ir.TensorLoad):
        tensor = value.source
    elif isinstance(value, ir.Var) and hasattr(value.ty, "shape"):
        tensor, value = value, ir.TensorLoad(value, [ir.const(0, "int32")])
    else:
        raise errors.TraceError(
            f"T.{name}: mbarrier must be a barrier from T.alloc_barrier "
            f"(or one element of it), got {mbarrier!r}"
        )
    if str(tensor.ty.dtype) != "uint64" or not str(tensor.ty.scope).startswith("shared"):
        raise errors.TraceError(
            f"T.{name}: {tensor.name} is not a barrier "
            "(T.alloc_barrier makes uint64 shared-memory barriers)"
        )
    return value


def _count(value, name: str, what: str):
    v = builder.unwrap(value)
    if builder.is_expr(v):
        if builder.static_value(v) is None:
            return v
        v = builder.static_value(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise errors.TraceError(f"T.{name}: {what} must be a non-negative integer, got {value!r}")
    return ir.const(v, "int32")


def alloc_barrier(arrive_count):
    """``n`` mbarriers in shared memory (a ``uint64`` tensor of shape ``(n,)``), each
    initialised at this point (thread 0, then a block barrier) to expect ``arrive_count``
    arrivals per phase (an int, or a list with one count per barrier)."""
    counts = [arrive_count] if isinstance(arrive_count, int) else list(arrive_count)
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise errors.TraceError(
            f"T.alloc_barrier: arrive_count must be an integer >= 1 "
            f"or a non-empty list of them, got {arrive_count!r}"
        )
    bars = alloc_shared((len(counts),), "uint64")
    _emit(_op.BARRIER_INIT, ir.TensorLoad(bars, [ir.const(0, "int32")]), counts=counts)
    return bars


def mbarrier_arrive(mbarrier, cta_id=None):
    """One arrival of each calling thread on ``mbarrier`` (``mbarrier.arrive``); with
    ``cta_id``, on the barrier at the same place in block ``cta_id`` of the cluster (the
    barrier must come from :func:`alloc_cluster_barrier`)."""
    bar = _barrier(mbarrier, "mbarrier_arrive")
    if cta_id is None:
        _emit(_op.MBARRIER_ARRIVE, bar)
        return
    if not is_cluster_barrier(bar):
        raise errors.TraceError(
            "T.mbarrier_arrive(..., cta_id=...): the barrier must be a cluster barrier "
            "(T.alloc_cluster_barrier), which its peers may arrive on"
        )
    _emit(_op.MBARRIER_ARRIVE_CLUSTER, bar, _count(cta_id, "mbarrier_arrive", "cta_id"))


def alloc_cluster_barrier(arrive_count):
    """:func:`alloc_barrier` whose barriers the other blocks of the cluster may arrive on
    (``T.mbarrier_arrive(bar, cta_id=...)``): after the initialisation the whole cluster
    synchronises (``T.cluster_sync``), so every block must reach this statement. End the
    kernel with ``T.cluster_sync()`` when peers may still arrive on this block's barriers."""
    bars = alloc_barrier(arrive_count)
    _emit(_op.CLUSTER_SYNC)
    kernel = builder.state().kernels[-1] if builder.state().kernels else None
    if kernel is None:
        raise errors.TraceError("T.alloc_cluster_barrier must be inside T.Kernel")
    kernel._tl_cluster_barriers = [*getattr(kernel, "_tl_cluster_barriers", []), bars]
    return bars


def is_cluster_barrier(bar) -> bool:
    """Whether the barrier element ``bar`` (:func:`_barrier`) belongs to a tensor made by
    :func:`alloc_cluster_barrier` in the enclosing kernel."""
    st = builder.state()
    kernel = st.kernels[-1] if st.kernels else None
    return any(bar.source.same_as(t) for t in getattr(kernel, "_tl_cluster_barriers", []))


def mbarrier_expect_tx(mbarrier, tx):
    """Expect ``tx`` more transaction bytes (e.g. of TMA loads) in the current phase."""
    _emit(
        _op.MBARRIER_EXPECT_TX,
        _barrier(mbarrier, "mbarrier_expect_tx"),
        _count(tx, "mbarrier_expect_tx", "tx"),
    )


def mbarrier_arrive_expect_tx(mbarrier, tx):
    """Arrive once and expect ``tx`` more transaction bytes in the current phase."""
    _emit(
        _op.MBARRIER_ARRIVE_EXPECT_TX,
        _barrier(mbarrier, "mbarrier_arrive_expect_tx"),
        _count(tx, "mbarrier_arrive_expect_tx", "tx"),
    )


def mbarrier_wait_parity(mbarrier, parity):
    """Wait until the phase of ``mbarrier`` with parity ``parity`` (0/1, or an expression
    whose low bit is used) has completed."""
    p = builder.unwrap(parity)
    if not builder.is_expr(p):
        p = _count(p, "mbarrier_wait_parity", "parity")
    bar = _barrier(mbarrier, "mbarrier_wait_parity")
    _emit(_op.MBARRIER_WAIT_PARITY, bar, p % 2, cluster=int(is_cluster_barrier(bar)))


def barrier_arrive(mbarrier):
    """Upstream's sugar for :func:`mbarrier_arrive`."""
    mbarrier_arrive(mbarrier)


def barrier_wait(mbarrier, parity):
    """Upstream's sugar for :func:`mbarrier_wait_parity`."""
    mbarrier_wait_parity(mbarrier, parity)


def fence_proxy_async():
    """``fence.proxy.async.shared::cta``: order this thread's generic-proxy shared-memory
    writes before later async-proxy (TMA, wgmma) accesses."""
    _emit(_op.FENCE_PROXY_ASYNC)


def set_max_nreg(reg_count: int, is_inc: int):
    """``setmaxnreg.{inc,dec}`` (sm_90a): this warpgroup's per-thread register budget
    becomes ``reg_count`` (24..256, a multiple of 8); ``is_inc`` 1 raises, 0 lowers it."""
    if (
        isinstance(reg_count, bool)
        or not isinstance(reg_count, int)
        or not (24 <= reg_count <= 256 and reg_count % 8 == 0)
    ):
        raise errors.TraceError(
            f"T.set_max_nreg: reg_count must be a multiple of 8 in 24..256, got {reg_count!r}"
        )
    if is_inc not in (0, 1, True, False):
        raise errors.TraceError(f"T.set_max_nreg: is_inc must be 0 or 1, got {is_inc!r}")
    _emit(_op.SET_MAX_NREG, reg_count=reg_count, is_inc=int(is_inc))


def inc_max_nreg(reg_count: int):
    """``T.set_max_nreg(reg_count, 1)``."""
    set_max_nreg(reg_count, 1)


def dec_max_nreg(reg_count: int):
    """``T.set_max_nreg(reg_count, 0)``."""
    set_max_nreg(reg_count, 0)


def warpgroup_arrive():
    """``wgmma.fence.sync.aligned`` before the first wgmma reading registers written since."""
    _emit(_op.WARPGROUP_ARRIVE)


def warpgroup_commit_batch():
    """``wgmma.commit_group.sync.aligned``: the issued wgmmas form one group."""
    _emit(_op.WARPGROUP_COMMIT_BATCH)


def warpgroup_wait(num_mma: int):
    """``wgmma.wait_group.sync.aligned num_mma``: at most ``num_mma`` groups stay pending."""
    if isinstance(num_mma, bool) or not isinstance(num_mma, int) or not 0 <= num_mma <= 7:
        raise errors.TraceError(
            f"T.warpgroup_wait: num_mma must be an integer in 0..7, got {num_mma!r}"
        )
    _emit(_op.WARPGROUP_WAIT, num_mma=num_mma)


def wait_wgmma(id: int):  # noqa: A002 - upstream name
    """Wait until at most ``id`` wgmma groups are pending (``wgmma.wait_group``), then fence
    the accumulators of this kernel's earlier ``T.wgmma_gemm`` calls so that their reads stay
    after the wait."""
    warpgroup_wait(id)
    for c in _wgmma_accumulators():
        _emit(_op.WGMMA_FENCE_ACCUM, c)


def _wgmma_accumulators() -> list:
    st = builder.state()
    kernel = st.kernels[-1] if st.kernels else None
    return getattr(kernel, "_tl_wgmma_accumulators", [])


def wgmma_gemm(
    A,  # noqa: N803 - upstream API
    B,  # noqa: N803
    C,  # noqa: N803
    transpose_A=False,  # noqa: N803
    transpose_B=False,  # noqa: N803
    policy=None,
    clear_accum=False,
    annotations=None,
):
    """``C += A @ B`` with wgmma (sm_90a) and no wait: the group stays pending until
    ``T.wait_wgmma`` / ``T.warpgroup_wait``; C must not be read before. A gemm that cannot
    lower to wgmma is a compile error (``T.gemm`` would pick another instruction)."""
    from ..lowering.region import to_region
    from ..ops.gemm import op as _gemm
    from ..ops.gemm.wgmma_cuda import ATTR_DEFER_WAIT
    from .tileop import GemmWarpPolicy

    if annotations:
        raise errors.TraceError(
            f"T.wgmma_gemm: annotations are not supported, got {sorted(annotations)}"
        )
    st = builder.state()
    if not st.kernels:
        raise errors.TraceError("T.wgmma_gemm must be inside T.Kernel")
    policy = GemmWarpPolicy.Square if policy is None else policy
    regions = [
        to_region(builder.unwrap(x), what=f"T.wgmma_gemm {n}")
        for x, n in ((A, "A"), (B, "B"), (C, "C"))
    ]
    call = _gemm.GEMM.make(
        *regions,
        loc=builder.user_loc(),
        transpose_A=bool(transpose_A),
        transpose_B=bool(transpose_B),
        policy=int(policy),
        clear_accum=static_clear_accum(clear_accum, regions[2]),
    )
    _gemm.gemm_dims(_gemm.GEMM.view(call))  # early shape check, names the user's line
    attrs = dict(call.attrs.items())
    attrs[ATTR_DEFER_WAIT] = True
    attrs[_op.ATTR_EXPLICIT_WGMMA] = True
    call = ir.Call(call.op.name, list(call.args), attrs=attrs, ty="void", loc=call.loc)
    _emit(_op.WGMMA_GEMM)
    _T.emit_(ir.Evaluate(call, loc=call.loc))
    tensor = regions[2].source
    kernel = st.kernels[-1]
    accs = getattr(kernel, "_tl_wgmma_accumulators", [])
    if not any(a.source.same_as(tensor) for a in accs):
        accs.append(ir.TensorLoad(tensor, [ir.const(0, "int32")] * len(tensor.ty.shape)))
    kernel._tl_wgmma_accumulators = accs


def cluster_arrive():
    """``barrier.cluster.arrive.aligned`` (sm_90)."""
    _emit(_op.CLUSTER_ARRIVE)


def cluster_arrive_relaxed():
    """``barrier.cluster.arrive.relaxed.aligned`` (sm_90; no memory ordering)."""
    _emit(_op.CLUSTER_ARRIVE_RELAXED)


def cluster_wait():
    """``barrier.cluster.wait.aligned`` (sm_90)."""
    _emit(_op.CLUSTER_WAIT)


def cluster_sync():
    """Cluster-wide barrier: arrive then wait (sm_90)."""
    _emit(_op.CLUSTER_SYNC)


def block_rank_in_cluster():
    """The rank of this block in its thread-block cluster (``%cluster_ctarank``, sm_90), as
    an ``int32`` value (0 when the launch has no clusters)."""
    from .allocate import alloc_var

    cell = alloc_var("int32")
    load = builder.unwrap(cell)
    _emit(_op.BLOCK_RANK_IN_CLUSTER, load)
    return cell


def named_barrier_arrive(barrier_id, thread_count):
    """``bar.arrive barrier_id, thread_count``: arrive without waiting."""
    _emit(
        _op.NAMED_BARRIER_ARRIVE,
        _count(barrier_id, "named_barrier_arrive", "barrier_id"),
        _count(thread_count, "named_barrier_arrive", "thread_count"),
    )


def named_barrier_sync(barrier_id, thread_count):
    """``bar.sync barrier_id, thread_count``: arrive and wait for ``thread_count`` threads."""
    _emit(
        _op.NAMED_BARRIER_SYNC,
        _count(barrier_id, "named_barrier_sync", "barrier_id"),
        _count(thread_count, "named_barrier_sync", "thread_count"),
    )


class WarpSpecializeFrame:
    """``with T.ws(g0, g1, ...):`` -- the body runs only in the listed warpgroups (threads
    ``128 g .. 128 g + 127`` of the block's flattened thread index)."""

    def __init__(self, *warp_group_idx):
        if not warp_group_idx or any(
            isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in warp_group_idx
        ):
            raise errors.TraceError(
                f"T.ws needs warpgroup indices (integers >= 0), got {warp_group_idx!r}"
            )
        self.groups = sorted(set(warp_group_idx))
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        st = builder.state()
        if not st.kernels:
            raise errors.TraceError("T.ws must be used inside T.Kernel")
        kernel = st.kernels[-1]
        tid, stride = None, 1
        for var, extent in zip(kernel.thread_vars, kernel.threads):
            term = var if stride == 1 else var * stride
            tid = term if tid is None else tid + term
            stride = stride * extent
        total = builder.static_value(stride)
        if total is not None and any(g * WARP_GROUP >= total for g in self.groups):
            raise errors.TraceError(
                f"T.ws{tuple(self.groups)}: the block has only "
                f"{total} threads ({max(1, -(-total // WARP_GROUP))} warpgroups)"
            )
        cond = None
        for first, last in _runs(self.groups):  # T.ws(1, 2): one range, 128 <= tid < 384
            lo, hi = first * WARP_GROUP, (last + 1) * WARP_GROUP
            c = (tid >= lo) & (tid < hi) if lo else tid < hi
            cond = c if cond is None else cond | c
        iff = self._stack.enter_context(builder.if_(cond))
        self._stack.enter_context(iff.then())
        _emit(_op.WS, groups=self.groups)
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)


def _runs(groups):
    """``(first, last)`` of each run of consecutive warpgroup indices in sorted ``groups``."""
    runs = []
    for g in groups:
        if runs and g == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], g)
        else:
            runs.append((g, g))
    return runs


ws = WarpSpecializeFrame

__all__ = [
    "alloc_barrier",
    "alloc_cluster_barrier",
    "barrier_arrive",
    "block_rank_in_cluster",
    "barrier_wait",
    "cluster_arrive",
    "cluster_arrive_relaxed",
    "cluster_sync",
    "cluster_wait",
    "dec_max_nreg",
    "fence_proxy_async",
    "inc_max_nreg",
    "mbarrier_arrive",
    "mbarrier_arrive_expect_tx",
    "mbarrier_expect_tx",
    "mbarrier_wait_parity",
    "named_barrier_arrive",
    "named_barrier_sync",
    "set_max_nreg",
    "wait_wgmma",
    "wgmma_gemm",
    "warpgroup_arrive",
    "warpgroup_commit_batch",
    "warpgroup_wait",
    "ws",
]
