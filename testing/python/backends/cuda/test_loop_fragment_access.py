"""Fragment accesses in ``T.Parallel`` loops that are not in the loop's axis order (CUDA, emulated).

Each case used to lower silently wrong on CUDA (the CPU backend was right):

- ``acc[d] += X[j, d]`` over ``(j, d)``: every thread holding a replica of ``acc[d]`` summed
  its own share of ``j`` into it. The loop now runs ``j`` in the registers of the threads
  holding ``acc[d]`` (upstream's layout for such loops).
- ``g[i, j] = f[j, i]`` (a transpose): the loop ran ``(i, j)`` where ``f[j, i]`` was not.
  The loop now takes ``f``'s layout with the axes swapped when ``f``'s is known first, and
  ``f`` takes the loop's, swapped, when it is not.
- ``f[i, 0]`` and ``f[i, (j + 1) % N]`` read registers of other threads: now a CompileError
  at the loop's line saying which element lives where.
"""

import numpy as np
import pytest

import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline
from tilelang.testing.cuda_emulator import emulate

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90A = {"kind": "cuda", "arch": "sm_90a"}
TARGETS = pytest.mark.parametrize("target", [SM80, SM90A], ids=["sm_80", "sm_90a"])


def _run(func, target, *arrays):
    return emulate(pipeline.lower(func, target), *[a.copy() for a in arrays])


def column_sums(R, D, threads):
    """acc[d] += X[j, d] inside one T.Parallel(R, D)."""

    @T.prim_func
    def main(X: T.Tensor((R, D), "float32"), O: T.Tensor((D,), "float32")):
        with T.Kernel(1, threads=threads):
            acc = T.alloc_fragment((D,), "float32")
            T.clear(acc)
            for j, d in T.Parallel(R, D):
                acc[d] += X[j, d]
            T.copy(acc, O)

    return main


def row_max_after_copy(M, N):
    """m[i] = max(m[i], f[i, j]) with f's layout fixed by a copy first."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            m = T.alloc_fragment((M,), "float32")
            T.copy(X, f)
            T.fill(m, -T.infinity("float32"))
            for i, j in T.Parallel(M, N):
                m[i] = T.max(m[i], f[i, j])
            T.copy(m, O)

    return main


@TARGETS
@pytest.mark.parametrize("R,D,threads", [(32, 24, 128), (7, 50, 64), (45, 3, 128)])
def test_accumulate_over_a_loop_axis(target, R, D, threads):
    x = np.random.default_rng(R * D).standard_normal((R, D)).astype(np.float32)
    out = _run(column_sums(R, D, threads), target, x, np.zeros(D, np.float32))[1]
    np.testing.assert_allclose(out, x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


@TARGETS
def test_accumulate_with_fixed_source_layout(target):
    x = np.random.default_rng(3).standard_normal((24, 40)).astype(np.float32)
    out = _run(row_max_after_copy(24, 40), target, x, np.zeros(24, np.float32))[1]
    np.testing.assert_array_equal(out, x.max(1))


def transpose_fragment(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((N, M), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            g = T.alloc_fragment((N, M), "float32")
            T.copy(X, f)
            for i, j in T.Parallel(N, M):
                g[i, j] = f[j, i] * 2.0
            T.copy(g, O)

    return main


def transpose_accumulator(M, N, K):
    """The transpose of a gemm accumulator (its layout fixed by the gemm)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"),
        B: T.Tensor((K, N), "float16"),
        O: T.Tensor((N, M), "float32"),
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, K), "float16")
            Bs = T.alloc_shared((K, N), "float16")
            C = T.alloc_fragment((M, N), "float32")
            G = T.alloc_fragment((N, M), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, C, clear_accum=True)
            for i, j in T.Parallel(N, M):
                G[i, j] = C[j, i]
            T.copy(G, O)

    return main


@TARGETS
def test_transpose_between_fragments(target):
    x = np.random.default_rng(1).standard_normal((24, 40)).astype(np.float32)
    out = _run(transpose_fragment(24, 40), target, x, np.zeros((40, 24), np.float32))[1]
    np.testing.assert_array_equal(out, 2 * x.T)


@TARGETS
def test_transpose_gemm_accumulator(target):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((32, 32)).astype(np.float16)
    b = rng.standard_normal((32, 48)).astype(np.float16)
    out = _run(transpose_accumulator(32, 48, 32), target, a, b, np.zeros((48, 32), np.float32))
    ref = (a.astype(np.float64) @ b.astype(np.float64)).T
    np.testing.assert_allclose(out[2], ref, rtol=1e-2, atol=1e-2)


def reads_other_threads(M, N, shifted):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            g = T.alloc_fragment((M, N), "float32")
            T.copy(X, f)
            for i, j in T.Parallel(M, N):
                if shifted:
                    g[i, j] = f[i, (j + 1) % N]
                else:
                    g[i, j] = f[i, 0] + f[i, j]  # the line the error names
            T.copy(g, O)

    return main


@pytest.mark.parametrize("shifted", [False, True])
def test_read_of_another_threads_register_is_an_error(shifted):
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(reads_other_threads(32, 48, shifted), SM80)
    msg = str(info.value)
    assert "test_loop_fragment_access.py:" in msg
    assert "on threads that do not hold it" in msg
    assert ("f[i, (j + 1) % 48]" if shifted else "f[i, 0]") in msg


def accumulate_against_fixed_loop(R, D):
    """acc[d] += f[j, d] where f's copy fixes a layout spreading j over threads first."""

    @T.prim_func
    def main(X: T.Tensor((R, D), "float32"), O: T.Tensor((D,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((R, D), "float32")
            acc = T.alloc_fragment((D,), "float32")
            g = T.alloc_fragment((R, D), "float32")
            T.copy(X, f)
            T.clear(acc)
            for j, d in T.Parallel(R, D):
                g[j, d] = f[j, d] + 1.0
            for j, d in T.Parallel(R, D):
                acc[d] += g[j, d]
            T.copy(acc, O)

    return main


def test_accumulation_spread_over_threads_is_an_error():
    """The loop must follow g's layout (j over threads), so the accumulation cannot run in
    one thread: a CompileError naming acc and the loop's line (it summed per replica)."""
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(accumulate_against_fixed_loop(32, 24), SM80)
    assert "accumulates into acc[d] over j" in str(info.value)
    assert "test_loop_fragment_access.py:" in str(info.value)


def rows_by_inner_serial_loop(M, N, scan):
    """A T.Parallel loop over rows with a T.serial loop over columns inside: row sums
    (``scan=False``, f filled by a copy) or an in-place prefix sum (``scan=True``)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            acc = T.alloc_fragment((M,), "float32")
            T.copy(X, f)
            if scan:
                for i in T.Parallel(M):
                    for k in T.serial(N - 1):
                        f[i, k + 1] = f[i, k + 1] + f[i, k]
                T.copy(f, O)
            else:
                T.clear(acc)
                for i in T.Parallel(M):
                    for k in T.serial(N):
                        acc[i] += f[i, k]
                for i in T.Parallel(M):
                    O[i, 0] = acc[i]

    return main


@TARGETS
@pytest.mark.parametrize("scan", [False, True])
def test_fragment_indexed_by_an_inner_serial_loop(target, scan):
    """f[i, k] with k an inner T.serial loop's variable: f keeps each row in the registers
    of the thread running it (it was spread over threads by columns: wrong sums)."""
    M, N = 16, 30
    x = np.random.default_rng(8).standard_normal((M, N)).astype(np.float32)
    out = _run(rows_by_inner_serial_loop(M, N, scan), target, x, np.zeros((M, N), np.float32))[1]
    x64 = x.astype(np.float64)
    if scan:
        np.testing.assert_allclose(out, x64.cumsum(1), rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_allclose(out[:, 0], x64.sum(1), rtol=1e-5, atol=1e-4)


def inner_loop_over_gemm_rows(M, N, K):
    """Row sums of a gemm accumulator by an inner T.serial loop: its rows are spread over
    threads by the gemm, so no thread holds a whole row."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), O: T.Tensor((M,), "float32")
    ):
        with T.Kernel(1, threads=128):
            As = T.alloc_shared((M, K), "float16")
            Bs = T.alloc_shared((K, N), "float16")
            C = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(A, As)
            T.copy(B, Bs)
            T.gemm(As, Bs, C, clear_accum=True)
            T.clear(s)
            for i in T.Parallel(M):
                for k in T.serial(N):
                    s[i] += C[i, k]
            T.copy(s, O)

    return main


def test_inner_loop_over_a_spread_row_is_an_error():
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(inner_loop_over_gemm_rows(32, 32, 32), SM80)
    assert "reads C[i, k] on threads that do not hold it" in str(info.value)
    assert "test_loop_fragment_access.py:" in str(info.value)


def serial_read_of_row_result(M, N, fixed):
    """O[k] = r[k] outside any T.Parallel loop, r a reduce result whose rows live on
    different threads (``fixed=False``), or read inside T.Parallel loops (``fixed=True``)."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), O: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(X, f)
            T.reduce_sum(f, r, dim=1)
            if fixed:
                for i in T.Parallel(M):
                    O[i] = r[i]
            else:
                O[0] = r[0]  # the line the error names
                O[1] = r[1]

    return main


def test_serial_read_of_a_partitioned_fragment_is_an_error():
    """Every thread ran O[0] = r[0] with its own register: threads holding row 1 stored
    row 1's sum into O[0] (a write race the emulator reports; on a GPU, a wrong value)."""
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(serial_read_of_row_result(2, 64, False), SM80)
    msg = str(info.value)
    assert "test_loop_fragment_access.py:" in msg and "r[0] is read outside a T.Parallel" in msg
    assert "threads 0..63 only" in msg


@TARGETS
def test_parallel_read_of_a_partitioned_fragment(target):
    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    out = _run(serial_read_of_row_result(2, 64, True), target, x, np.zeros(2, np.float32))[1]
    np.testing.assert_allclose(out, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def serial_scalar_from_whole_reduce(N):
    """The flash-decoding pattern: a running max kept in a T.alloc_var, updated from a
    reduce over the whole tile (its result is on every thread)."""

    @T.prim_func
    def main(X: T.Tensor((4, N), "float32"), O: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((N,), "float32")
            mx = T.alloc_fragment((1,), "float32")
            m = T.alloc_var("float32")
            m = -T.infinity("float32")
            for k in T.serial(4):
                T.copy(X[k, :], f)
                T.reduce_max(f, mx, dim=0)
                m = T.max(m, mx[0])
            O[0] = m

    return main


@TARGETS
def test_serial_read_of_a_fragment_every_thread_holds(target):
    x = np.random.default_rng(6).standard_normal((4, 64)).astype(np.float32)
    out = _run(serial_scalar_from_whole_reduce(64), target, x, np.zeros(1, np.float32))[1]
    np.testing.assert_array_equal(out, [x.max()])


def tile_op_in_parallel(op):
    @T.prim_func
    def main(A: T.Tensor((32, 40), "float32"), B: T.Tensor((32, 40), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((32, 40), "float32")
            for i in T.Parallel(32):
                if op == "copy":
                    T.copy(A[i, :], s[i, :])  # the line the error names
                else:
                    T.fill(s[i, :], 1.0)  # the line the error names
            T.copy(s, B)

    return main


@pytest.mark.parametrize("op", ["copy", "fill"])
def test_tile_op_inside_parallel_is_an_error(op):
    """A row copy per T.Parallel iteration ran the block-wide copy inside a loop already
    spread over the threads (NaN rows on the emulator, barriers under a thread-dependent
    branch on a GPU)."""
    with pytest.raises(errors.CompileError) as info:
        pipeline.lower(tile_op_in_parallel(op), SM80)
    assert f"T.{op} inside a T.Parallel loop" in str(info.value)
    assert "test_loop_fragment_access.py:" in str(info.value)


# ------------------------------------------------------------------------------ GPU twins
@pytest.mark.cuda
@pytest.mark.parametrize("case", ["column_sums", "transpose", "transpose_accumulator"])
def test_loop_fragment_access_gpu(case):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from tilelang.backends.cuda import load_kernel

    rng = np.random.default_rng(7)
    if case == "column_sums":
        x = rng.standard_normal((32, 24)).astype(np.float32)
        func, args, ref = column_sums(32, 24, 128), [x, np.zeros(24, np.float32)], x.sum(0)
    elif case == "transpose":
        x = rng.standard_normal((24, 40)).astype(np.float32)
        func, args, ref = transpose_fragment(24, 40), [x, np.zeros((40, 24), np.float32)], 2 * x.T
    else:
        a = rng.standard_normal((32, 32)).astype(np.float16)
        b = rng.standard_normal((32, 48)).astype(np.float16)
        func = transpose_accumulator(32, 48, 32)
        args = [a, b, np.zeros((48, 32), np.float32)]
        ref = (a.astype(np.float64) @ b.astype(np.float64)).T
    tensors = [torch.from_numpy(t).cuda() for t in args]
    load_kernel(pipeline.build(func, {"kind": "cuda"}))(*tensors)
    torch.cuda.synchronize()
    np.testing.assert_allclose(tensors[-1].cpu().numpy(), ref, rtol=1e-2, atol=1e-2)
