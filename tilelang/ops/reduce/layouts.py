"""Fragment layouts of ``T.reduce_*`` on the thread-distributed backends (CUDA, ROCm, Metal).

The shuffle lowering (``cuda.lower_reduce_threads``) is right only when every thread
holds, in ``dst``, exactly the rows it holds elements of in ``src``: it folds each of
its ``src`` registers into the ``dst`` register of the same row, then combines over the
threads sharing that row. :func:`rows_consistent` checks that; :func:`source_from_destination`
builds a ``src`` layout satisfying it when ``dst``'s layout was fixed first (by a
``T.Parallel`` loop, another reduce, a copy); the layout rule raises a compile error when
both were fixed elsewhere and disagree.
"""

from __future__ import annotations

import numpy as np

from ...layout import Fragment
from ...layout import expr as E


def _row_owners(frag, row_axes, threads):
    """Boolean ``(rows, threads)``: which threads hold some element of each row.

    Rows are indexed by ``row_axes`` of ``frag``'s space (row-major); every other axis
    and the replicas are merged into the row."""
    table = frag.thread_table()  # (rep, *shape)
    front = [a + 1 for a in row_axes]
    table = np.moveaxis(table, front, list(range(1, 1 + len(front))))
    table = np.moveaxis(table, 0, -1)
    n_rows = int(np.prod([table.shape[k] for k in range(len(front))], dtype=np.int64))
    table = table.reshape(n_rows, -1)
    owners = np.zeros((n_rows, threads), dtype=bool)
    owners[np.arange(n_rows)[:, None], table] = True
    return owners


def rows_consistent(s_layout, d_layout, pairs) -> bool:
    """Whether every thread holds in ``d_layout`` exactly the rows (kept coordinates,
    ``pairs`` of (src axis, dst axis)) it holds elements of in ``s_layout``."""
    s_shape = [int(x) for x in s_layout.get_input_shape()]
    d_shape = [int(x) for x in d_layout.get_input_shape()]
    if [s_shape[a] for a, _ in pairs] != [d_shape[b] for _, b in pairs]:
        return False
    threads = 1 + max(int(s_layout.thread_table().max()), int(d_layout.thread_table().max()))
    src_rows = _row_owners(s_layout, [a for a, _ in pairs], threads)
    dst_rows = _row_owners(d_layout, [b for _, b in pairs], threads)
    return bool(np.array_equal(src_rows, dst_rows))


def source_from_destination(d_layout, src_shape, dim, pairs, row_group):
    """A ``src`` fragment consistent with a fixed ``dst`` fragment, or None.

    Each row of ``src`` goes to the threads holding its ``dst`` element: spread over the
    ``dst`` replicas when the reduced extent divides evenly (so replicas share the work),
    otherwise every replica holds the whole row. ``row_group(frag)`` (``cuda.xor_group``)
    must accept the result: the threads sharing a row must form a xor group."""
    src_shape = [int(x) for x in src_shape]
    d_rank = len(d_layout.get_input_shape())
    reps, extent = d_layout.get_replicate(), src_shape[dim]

    def d_index(idx):
        out = [E.as_expr(0)] * d_rank
        for a, b in pairs:
            out[b] = idx[a]
        return out

    def d_local(idx):
        local = d_layout.map_forward_index(d_index(idx))
        return local[0] if len(local) == 1 else None

    if d_local([0] * len(src_shape)) is None:
        return None
    candidates = []
    if reps > 1 and extent % reps == 0:
        per = extent // reps
        candidates.append(
            Fragment(
                src_shape,
                forward_thread_fn=lambda *i: d_layout.map_forward_thread(
                    d_index(i), rep=i[dim] % reps
                ),
                forward_index_fn=lambda *i: d_local(i) * per + i[dim] // reps,
            )
        )
    candidates.append(
        Fragment(
            src_shape,
            forward_thread_fn=lambda *i: d_layout.map_forward_thread(
                d_index(i[: len(src_shape)]), rep=i[len(src_shape)] if reps > 1 else 0
            ),
            replicate=reps,
            forward_index_fn=lambda *i: d_local(i) * extent + i[dim],
        )
    )
    for frag in candidates:
        if rows_consistent(frag, d_layout, pairs) and row_group(frag, dim) is not None:
            return frag
    return None
