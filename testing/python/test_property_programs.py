"""Property-based test: random small programs on the CPU backend.

Valid programs (copies, elementwise with dynamic dims, reductions, GEMMs of random shapes and
tiles that need not divide them) must match numpy in float64; invalid ones must raise a
tilelang error naming this file's line of the fault: never an internal traceback, a crash,
a hang or a wrong answer. Each test prints how many programs it tried, accepted and rejected.
Few examples each (a CPU compile takes ~0.5-1 s), ~1 minute in all.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from source_lines import line_of

import tilelang
import tilelang.language as T

THIS_FILE = os.path.basename(__file__)
SETTINGS = dict(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TALLY = {"valid": [0, 0, 0], "invalid": [0, 0, 0]}  # tried, accepted, rejected

dims = st.integers(1, 70)
tiles = st.sampled_from([8, 16, 32])


def _data(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- valid programs


def copy_2d(M, N, bm, bn):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=64) as (bx, by):
            S = T.alloc_shared((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], S)
            T.copy(S, B[by * bm, bx * bn])

    return main


def axpy_dynamic(block, alpha):
    n = T.dynamic("n")

    @T.prim_func
    def main(
        A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")
    ):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] * alpha + B[bx * block + i]

    return main


def row_sum(M, N, bm):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, bm), threads=64) as bx:
            F = T.alloc_fragment((bm, N), "float32")
            R = T.alloc_fragment((bm,), "float32")
            T.copy(A[bx * bm, 0], F)
            T.reduce_sum(F, R, dim=1)
            T.copy(R, B[bx * bm])

    return main


def gemm(M, N, K, bm, bn, bk):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float32"),
        B: T.Tensor((K, N), "float32"),
        C: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            As = T.alloc_shared((bm, bk), "float32")
            Bs = T.alloc_shared((bk, bn), "float32")
            Cf = T.alloc_fragment((bm, bn), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], As)
                T.copy(B[k * bk, bx * bn], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * bm, bx * bn])

    return main


def _run_valid(kind, params, rng):
    TALLY["valid"][0] += 1
    if kind == "copy":
        M, N, bm, bn = params
        kernel = tilelang.compile(copy_2d(M, N, bm, bn), out_idx=[-1], target="cpu")
        a = _data(rng, M, N)
        np.testing.assert_array_equal(kernel(torch.from_numpy(a)).numpy(), a)
    elif kind == "axpy":
        block, alpha, sizes = params
        kernel = tilelang.compile(axpy_dynamic(block, alpha), out_idx=[-1], target="cpu")
        for n in sizes:
            a, b = _data(rng, n), _data(rng, n)
            got = kernel(torch.from_numpy(a), torch.from_numpy(b)).numpy()
            want = np.float32(alpha) * a.astype(np.float64) + b
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    elif kind == "rowsum":
        M, N, bm = params
        kernel = tilelang.compile(row_sum(M, N, bm), out_idx=[-1], target="cpu")
        a = _data(rng, M, N)
        want = a.astype(np.float64).sum(axis=1)
        got = kernel(torch.from_numpy(a)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * N)
    else:
        M, N, K, bm, bn, bk = params
        kernel = tilelang.compile(gemm(M, N, K, bm, bn, bk), out_idx=[-1], target="cpu")
        a, b = _data(rng, M, K), _data(rng, K, N)
        want = a.astype(np.float64) @ b.astype(np.float64)
        got = kernel(torch.from_numpy(a), torch.from_numpy(b)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * K)
    TALLY["valid"][1] += 1


valid_programs = st.one_of(
    st.tuples(st.just("copy"), st.tuples(dims, dims, tiles, tiles)),
    st.tuples(
        st.just("axpy"),
        st.tuples(
            st.sampled_from([16, 64, 128]),
            st.sampled_from([-1.5, 0.25, 2.0]),
            st.lists(st.integers(0, 700), min_size=1, max_size=3),
        ),
    ),
    st.tuples(st.just("rowsum"), st.tuples(dims, st.integers(1, 48), tiles)),
    st.tuples(
        st.just("gemm"),
        st.tuples(dims, dims, dims, st.sampled_from([16, 32]), st.sampled_from([16, 32]), tiles),
    ),
)


@settings(max_examples=16, **SETTINGS)
@given(program=valid_programs, seed=st.integers(0, 2**31 - 1))
def test_valid_programs_match_numpy(program, seed):
    _run_valid(*program, np.random.default_rng(seed))


# --------------------------------------------------------------------------- invalid programs


def serial_overrun(n, extra):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(n + extra):
                B[i] = A[i]  # fault

    return main


def too_many_threads(threads):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=threads):  # fault
            A[0] = 1.0

    return main


def copy_mismatch(n, m):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((m,), "float32")
            T.copy(A[0:n], S)  # fault
            T.copy(S, B[0:m])

    return main


def branch_local_use(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                if A[i] > 0:
                    scale = 2.0
                B[i] = A[i] * scale  # fault

    return main


def constant_index(n, k):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=1):
            B[0] = A[n + k]  # fault

    return main


invalid_programs = st.one_of(
    st.tuples(st.just(serial_overrun), st.tuples(st.integers(1, 40), st.integers(1, 9))),
    st.tuples(st.just(too_many_threads), st.tuples(st.integers(1025, 5000))),
    st.tuples(
        st.just(copy_mismatch),
        st.tuples(st.integers(2, 40), st.integers(2, 40)).filter(lambda t: t[0] != t[1]),
    ),
    st.tuples(st.just(branch_local_use), st.tuples(st.integers(1, 30))),
    st.tuples(st.just(constant_index), st.tuples(st.integers(1, 30), st.integers(0, 10**6))),
)


@settings(max_examples=15, **SETTINGS)
@given(program=invalid_programs)
def test_invalid_programs_are_rejected_at_their_line(program):
    make, args = program
    TALLY["invalid"][0] += 1
    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.compile(make(*args), target="cpu")
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, '# fault')}" in message, message
    assert "Traceback" not in message and "Check failed" not in message, message
    TALLY["invalid"][2] += 1


def test_report_counts(capsys):
    """Prints the tallies (runs after the two property tests in file order)."""
    with capsys.disabled():
        for kind, (tried, accepted, rejected) in TALLY.items():
            print(f"\n{kind} programs: tried {tried}, accepted {accepted}, rejected {rejected}")
    if TALLY["valid"][0]:
        assert TALLY["valid"][1] == TALLY["valid"][0]
    if TALLY["invalid"][0]:
        assert TALLY["invalid"][2] == TALLY["invalid"][0]
