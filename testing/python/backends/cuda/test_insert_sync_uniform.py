"""insert_sync: loops over block-uniform local scalars (``T.alloc_local`` stored with the
same value in every thread) get barriers inside, like loops over constants; the emulator's
race check (``emulate(..., race_check=True)``) finds the missing ones."""

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import insert_sync as insert_sync_mod
from tilelang.testing.cuda_emulator import EmulationError, emulate

SM90A = {"kind": "cuda", "arch": "sm_90a"}


def _reverse_chunks(n, threads=64, per_thread_start=False):
    """B[chunk] = A[chunk] reversed, chunk by chunk in a ``while`` loop whose bounds live
    in local scalars; each thread reads what another warp wrote to shared memory."""

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            tile = T.alloc_shared((threads,), "float32")
            pos = T.alloc_local((1,), "int32")
            end = T.alloc_local((1,), "int32")
            pos[0] = bx * n
            end[0] = T.min(pos[0] + n, n)
            while pos[0] < end[0]:
                for i in T.Parallel(threads):
                    tile[i] = A[pos[0] + i]
                for i in T.Parallel(threads):
                    B[pos[0] + i] = tile[threads - 1 - i]
                pos[0] = pos[0] + threads

    return main


def _count_loop(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tile = T.alloc_shared((64,), "float32")
            chunks = T.alloc_local((1,), "int32")
            chunks[0] = n // 64 + bx
            for c in T.serial(chunks[0]):
                for i in T.Parallel(64):
                    tile[i] = A[c * 64 + i]
                for i in T.Parallel(64):
                    B[c * 64 + i] = tile[63 - i] * 2.0

    return main


def _run(func, n, race_check=True):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    lowered = pipeline.lower(func, SM90A)
    out = emulate(lowered, a, np.full(n, np.nan, np.float32), race_check=race_check)[1]
    return a, out


@pytest.mark.parametrize("n", [64 * 3, 64 * 5])
def test_while_over_local_scalars_is_synchronised(n):
    a, out = _run(_reverse_chunks(n), n)
    np.testing.assert_array_equal(out, a.reshape(-1, 64)[:, ::-1].reshape(-1))


def test_for_over_local_extent_is_synchronised():
    n = 64 * 4
    a, out = _run(_count_loop(n), n)
    np.testing.assert_allclose(out, a.reshape(-1, 64)[:, ::-1].reshape(-1) * 2.0)


def test_without_uniform_locals_the_race_check_fails(monkeypatch):
    """The old analysis (every local load thread-dependent) leaves the loop unsynchronised:
    the emulator's race check reports it, and the results would still look right."""
    monkeypatch.setattr(insert_sync_mod, "_uniform_locals", lambda body, tv: frozenset())
    n = 64 * 3
    with pytest.raises(EmulationError, match="shared-memory race"):
        _run(_reverse_chunks(n), n)
    a, out = _run(_reverse_chunks(n), n, race_check=False)  # lockstep hides it
    np.testing.assert_array_equal(out, a.reshape(-1, 64)[:, ::-1].reshape(-1))


def test_thread_dependent_local_is_not_uniform():
    """A local stored a thread-dependent value does not make its loop uniform."""

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            tile = T.alloc_shared((64,), "float32")
            mine = T.alloc_local((1,), "int32")
            for i in T.Parallel(64):
                mine[0] = i + bx
                tile[i] = A[i]
            for i in T.Parallel(64):
                B[i] = tile[63 - i] + mine[0]

    lowered = pipeline.lower(main, SM90A)
    body = lowered.body
    locals_ = insert_sync_mod._uniform_locals(body, _thread_var(body))
    mine = [v for v in _local_vars(body) if v.name.startswith("mine")]
    assert mine and not any(v.__chandle__() in locals_ for v in mine)


def _thread_var(body):
    import tvm_ffi
    from tvm_tirx import ir

    from tilelang.lowering.stmt import launch_of

    found = []

    def visit(x):
        launch = launch_of(x)
        if launch is not None and launch[0].startswith("threadIdx"):
            found.append(launch[2])

    tvm_ffi.structural_walk(body, [(ir.RegionStmt, visit)])
    return found[0]


def _local_vars(body):
    import tvm_ffi
    from tvm_tirx import ir

    out = []
    tvm_ffi.structural_walk(body, [(ir.Bind, lambda x: out.append(x.var))])
    return out
