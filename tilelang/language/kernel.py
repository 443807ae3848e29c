"""``T.Kernel``: the launch of a grid of blocks, and thread/block index accessors."""

from __future__ import annotations

import contextlib

from tvm_tirx.script import tirx as _T

from .. import errors
from . import builder

_AXES = ("x", "y", "z")


class KernelLaunchFrame:
    """``with T.Kernel(gx, gy, gz, threads=N) as (bx, by, bz):``; ``T.Kernel(threads=N)``
    launches one block.

    Opens one ``blockIdx`` launch per grid dimension and one ``threadIdx`` launch
    per thread dimension. Entering yields the block index (a tuple for several).
    """

    def __init__(self, *blocks, threads=128, cluster_dims=None, is_cpu=False, prelude=None):
        # ``T.Kernel(threads=n)`` / ``T.Kernel()`` (upstream accepts them): one block, and the
        # frame yields no block index
        self.yields_no_index = not blocks
        blocks = blocks or (1,)
        if len(blocks) > 3:
            raise errors.TraceError(f"T.Kernel takes at most 3 grid dimensions, got {len(blocks)}")
        if isinstance(threads, int) or builder.is_expr(threads):
            threads = [threads]
        threads = list(threads) if threads is not None else [1]
        if len(threads) > 3:
            raise errors.TraceError("T.Kernel takes at most 3 thread dimensions")
        _check_launch(list(blocks), threads)
        self.cluster_dims = _check_cluster_dims(cluster_dims, list(blocks))
        self.blocks = list(blocks)
        self.threads = threads
        self.is_cpu = is_cpu
        self.block_vars: list = []
        self.thread_vars: list = []
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        st = builder.state()
        if st.stop_at_kernel:  # phase 1 of an eager @tilelang.jit ends at its first kernel
            from .eager import StopAtKernel

            raise StopAtKernel
        if st.kernels:
            raise errors.TraceError("T.Kernel frames cannot be nested")
        for axis, extent in zip(_AXES, self.blocks):
            var = builder.unwrap(
                self._stack.enter_context(_T.launch_thread(f"blockIdx.{axis}", extent))
            )
            builder.name_value(f"b{axis}", var)
            self.block_vars.append(var)
        for axis, extent in zip(_AXES, self.threads):
            var = builder.unwrap(
                self._stack.enter_context(_T.launch_thread(f"threadIdx.{axis}", extent))
            )
            builder.name_value(f"t{axis}", var)
            self.thread_vars.append(var)
        st.kernels.append(self)
        if self.cluster_dims is not None:
            from tvm_tirx import ir

            from ..ops.hopper.op import CLUSTER_DIMS

            call = CLUSTER_DIMS.make(loc=builder.user_loc(), dims=self.cluster_dims)
            _T.emit_(ir.Evaluate(call, loc=call.loc))
        from .pointer import emit_pending_views  # T.make_tensor views made before T.Kernel

        emit_pending_views()
        if self.yields_no_index:
            return ()
        return self.block_vars[0] if len(self.block_vars) == 1 else tuple(self.block_vars)

    def __exit__(self, *exc):
        builder.state().kernels.pop()
        return self._stack.__exit__(*exc)

    @property
    def num_threads(self):
        total = 1
        for t in self.threads:
            total = total * t
        return total


Kernel = KernelLaunchFrame

# CUDA's launch limits (every architecture since sm_30); the language keeps CUDA's meaning
# of a launch on every backend, so a kernel that compiles for the CPU also launches on a GPU.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = ((1 << 31) - 1, 65535, 65535)


def _check_launch(blocks, threads) -> None:
    """TraceError (at the user's ``T.Kernel`` line) for a launch no GPU accepts."""
    total = 1
    for axis, extent, limit in zip(_AXES, threads, MAX_BLOCK_DIMS):
        value = builder.static_value(extent)
        if value is None:
            continue
        if not isinstance(value, int) or value < 1:
            raise errors.TraceError(
                f"T.Kernel: threads {axis} must be a positive int, got {extent}"
            )
        if value > limit:
            raise errors.TraceError(
                f"T.Kernel: {value} threads in dimension {axis}, but a block has at most "
                f"{limit} there (threads per block at most {MAX_THREADS_PER_BLOCK})"
            )
        total *= value
    if total > MAX_THREADS_PER_BLOCK:
        raise errors.TraceError(
            f"T.Kernel: threads={tuple(threads) if len(threads) > 1 else threads[0]} is "
            f"{total} threads per block, but a block has at most {MAX_THREADS_PER_BLOCK}; "
            "use more blocks, or loop inside a thread"
        )
    for axis, extent, limit in zip(_AXES, blocks, MAX_GRID_DIMS):
        value = builder.static_value(extent)
        if value is None:
            continue
        if not isinstance(value, int) or value < 0:
            raise errors.TraceError(
                f"T.Kernel: grid dimension {axis} must be a non-negative int, got {extent}"
            )
        if value > limit:
            raise errors.TraceError(
                f"T.Kernel: {value} blocks in grid dimension {axis}, but a grid has at most "
                f"{limit} there; put the largest extent first (grid x allows {MAX_GRID_DIMS[0]})"
            )


def _check_cluster_dims(cluster_dims, blocks):
    """The cluster shape as ``[x, y, z]`` (an int ``n`` means ``(n, 1, 1)``, upstream's
    reading), or None for clusters of one block (an ordinary launch). A static grid extent
    that is not a multiple of the cluster's is a TraceError (CUDA refuses such a launch);
    dynamic extents are checked on the host at each call. Cluster launches need CUDA
    sm_90+; other targets refuse them when lowering."""
    if cluster_dims is None:
        return None
    dims = [cluster_dims] if isinstance(cluster_dims, int) else list(cluster_dims)
    if not 1 <= len(dims) <= 3 or any(
        isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims
    ):
        raise errors.TraceError(
            f"T.Kernel: cluster_dims must be up to 3 positive integers, got {cluster_dims!r}"
        )
    dims = dims + [1] * (3 - len(dims))
    if dims == [1, 1, 1]:
        return None
    size = dims[0] * dims[1] * dims[2]
    if size > 8:
        raise errors.TraceError(
            f"T.Kernel(cluster_dims={cluster_dims!r}): {size} blocks per cluster; CUDA "
            "guarantees at most 8 (portable cluster size)"
        )
    for axis, d, extent in zip(_AXES, dims, blocks + [1] * (3 - len(blocks))):
        value = builder.static_value(extent)
        if d > 1 and isinstance(value, int) and value % d:
            raise errors.TraceError(
                f"T.Kernel(cluster_dims={cluster_dims!r}): grid dimension {axis} has {value} "
                f"blocks, not a multiple of the cluster's {d} (CUDA launches whole clusters)"
            )
    return dims


def ClusterKernel(*blocks, cluster_dims, threads=None, prelude=None):
    """``T.Kernel`` with a thread-block cluster shape (upstream's spelling)."""
    return KernelLaunchFrame(
        *blocks,
        threads=128 if threads is None else threads,
        cluster_dims=cluster_dims,
        prelude=prelude,
    )


def _current() -> KernelLaunchFrame:
    st = builder.state()
    if not st.kernels:
        raise errors.TraceError("this call needs an enclosing T.Kernel")
    return st.kernels[-1]


def get_thread_binding(dim: int = 0):
    """The ``threadIdx`` variable of dimension ``dim`` of the enclosing kernel."""
    return _current().thread_vars[dim]


def get_thread_bindings():
    """All ``threadIdx`` variables of the enclosing kernel."""
    return list(_current().thread_vars)


def get_block_binding(dim: int = 0):
    """The ``blockIdx`` variable of dimension ``dim`` of the enclosing kernel."""
    return _current().block_vars[dim]


def get_block_bindings():
    """All ``blockIdx`` variables of the enclosing kernel."""
    return list(_current().block_vars)


def get_thread_extent(dim: int = 0):
    """Threads of dimension ``dim`` of the enclosing kernel."""
    return _current().threads[dim]


def get_block_extent(dim: int = 0):
    """Blocks of dimension ``dim`` of the enclosing kernel."""
    return _current().blocks[dim]


def get_cluster_dims() -> list:
    """The enclosing kernel's cluster shape ``[x, y, z]`` (``[1, 1, 1]`` without clusters)."""
    dims = _current().cluster_dims
    return list(dims) if dims is not None else [1, 1, 1]


def get_cluster_size() -> int:
    """Blocks per cluster of the enclosing kernel."""
    x, y, z = get_cluster_dims()
    return x * y * z


def get_cluster_id(dim: int = 0):
    """The index of this block's cluster along grid dimension ``dim``:
    ``blockIdx // cluster_dims[dim]`` (0 for a dimension the grid does not have)."""
    frame = _current()
    if dim >= len(frame.block_vars):
        return 0
    d = get_cluster_dims()[dim]
    block = frame.block_vars[dim]
    return block if d == 1 else block // d


def get_cluster_ids() -> list:
    """:func:`get_cluster_id` of every grid dimension of the enclosing kernel."""
    return [get_cluster_id(d) for d in range(len(_current().block_vars))]


def get_cluster_extent(dim: int = 0):
    """Clusters along grid dimension ``dim`` (``ceil(blocks / cluster_dims[dim])``)."""
    frame = _current()
    blocks = frame.blocks[dim] if dim < len(frame.blocks) else 1
    d = get_cluster_dims()[dim]
    return blocks if d == 1 else (blocks + d - 1) // d


def get_cluster_extents() -> list:
    """:func:`get_cluster_extent` of the three grid dimensions."""
    return [get_cluster_extent(d) for d in range(3)]
