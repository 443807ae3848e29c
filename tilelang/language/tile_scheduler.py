"""Persistent tile schedulers: ``T.PersistentTileScheduler`` (upstream's name and contract).

A persistent kernel launches one worker (block, or cluster) per SM and walks the output tile
grid itself::

    with T.Kernel(num_workers, threads=128) as (worker,):
        sched = T.PersistentTileScheduler(m_blocks, n_blocks, num_workers=num_workers)
        sched.init(worker)
        while sched.valid():
            bx, by = sched.m_idx, sched.n_idx
            ...  # one tile
            sched.next_tile()

Worker ``w`` visits linear tile ids ``w, w + num_workers, ...``; :meth:`coord` decodes an id
into ``(m, n)``: ``cluster_size`` first groups M into cluster rows, ``column_major`` picks the
fast axis, and ``swizzle_size`` sweeps the fast axis in panels ``swizzle_size`` tiles wide on
the slow axis (a narrower last panel when it does not divide). State lives in one-element
``int32`` cells of each thread's registers.
"""

from __future__ import annotations

from tvm_tirx import tirx as _tirx

from .. import errors
from . import builder
from .allocate import alloc_local
from .math import ceildiv


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise errors.TraceError(
            f"T.PersistentTileScheduler: {what} must be an int >= 1, got {value!r}"
        )
    return value


def _default_workers(cluster_size: int) -> int:
    import torch

    if not torch.cuda.is_available():
        raise errors.TraceError(
            "T.PersistentTileScheduler: num_workers defaults to the GPU's SM count, and no GPU "
            "is present; pass num_workers= (the number of blocks the kernel launches)"
        )
    return torch.cuda.get_device_properties(0).multi_processor_count // cluster_size


class BaseTileScheduler:
    """State (``m_idx``, ``n_idx``, ``linear_idx``, ``current_iter``) and the walk
    (``init`` / ``valid`` / ``next_tile``); a subclass defines :meth:`coord` and
    ``total_tiles``."""

    total_tiles = 0
    num_workers = 1

    def __init__(self, stateful: bool = True, name: str | None = None):
        """Allocate the state cells (none when ``stateful`` is False: only ``coord`` works)."""
        self._stateful = stateful
        self._cells = {}
        if stateful:
            for field in ("m_idx", "n_idx", "linear_idx", "current_iter"):
                cell = alloc_local((1,), "int32")
                builder.name_value(f"{name}_{field}" if name else field, cell)
                self._cells[field] = cell

    def _cell(self, field: str):
        if not self._stateful:
            raise errors.TraceError(
                f"{type(self).__name__}: {field} needs state; this scheduler was made with "
                "stateful=False (only coord(tile_id) is available)"
            )
        return self._cells[field]

    def _get(self, field: str):
        return self._cell(field)[0]

    def _set(self, field: str, value) -> None:
        builder.store(self._cell(field), [0], value)

    @property
    def m_idx(self):
        """The current tile's row (the cluster row when ``cluster_size > 1``)."""
        return self._get("m_idx")

    @property
    def n_idx(self):
        """The current tile's column."""
        return self._get("n_idx")

    @property
    def linear_idx(self):
        """This worker's current linear tile id."""
        return self._get("linear_idx")

    @property
    def current_iter(self):
        """How many tiles this worker has advanced past (0 for its first tile)."""
        return self._get("current_iter")

    def coord(self, tile_id):
        """``(m, n)`` of linear tile id ``tile_id``."""
        raise NotImplementedError(f"{type(self).__name__} must define coord(tile_id)")

    def update_current_idx(self, linear_idx) -> None:
        """Set ``m_idx`` / ``n_idx`` from ``linear_idx``."""
        m, n = self.coord(linear_idx)
        self._set("m_idx", m)
        self._set("n_idx", n)

    def init(self, worker_id) -> None:
        """Start worker ``worker_id`` at its first tile."""
        self._set("current_iter", 0)
        self._set("linear_idx", worker_id)
        self.update_current_idx(self.linear_idx)

    def next_tile(self, step=None) -> None:
        """Advance to this worker's next tile (``num_workers`` ids on, or ``step``)."""
        self._set("current_iter", self.current_iter + 1)
        self._set("linear_idx", self.linear_idx + (self.num_workers if step is None else step))
        self.update_current_idx(self.linear_idx)

    def valid(self):
        """Whether the current tile exists (a run-time condition for ``while``)."""
        return self.linear_idx < self.total_tiles


class PersistentTileScheduler(BaseTileScheduler):
    """Grid-strided walk over ``num_m_tiles x num_n_tiles`` tiles with L2 swizzle and
    M-clustering (see the module docstring)."""

    def __init__(
        self,
        num_m_tiles,
        num_n_tiles,
        num_workers=None,
        swizzle_size: int = 1,
        column_major: bool = True,
        cluster_size: int = 1,
        stateful: bool = True,
        name: str | None = None,
    ):
        """``num_workers``: launched workers (default: the GPU's SM count / ``cluster_size``)."""
        self.swizzle_size = _positive_int(swizzle_size, "swizzle_size")
        self.cluster_size = _positive_int(cluster_size, "cluster_size")
        if num_workers is None:
            num_workers = _default_workers(self.cluster_size)
        if builder.static_value(num_workers) is not None and builder.static_value(num_workers) < 1:
            raise errors.TraceError(
                f"T.PersistentTileScheduler: num_workers must be >= 1, got {num_workers!r}"
            )
        self.num_workers = num_workers
        self.column_major = bool(column_major)
        m_rows = ceildiv(num_m_tiles, self.cluster_size) if self.cluster_size > 1 else num_m_tiles
        self.total_tiles = m_rows * num_n_tiles
        self._fast, self._slow = (
            (m_rows, num_n_tiles) if self.column_major else (num_n_tiles, m_rows)
        )
        super().__init__(stateful=stateful, name=name)

    def coord(self, tile_id):
        """``(m, n)`` of linear tile id ``tile_id`` (expressions; touches no state)."""
        panel = self._fast * self.swizzle_size
        group = tile_id // panel
        first = group * self.swizzle_size
        width = _tirx.max(1, _tirx.min(self.swizzle_size, self._slow - first))
        offset = tile_id - group * panel
        fast, slow = offset // width, first + offset % width
        return (fast, slow) if self.column_major else (slow, fast)
