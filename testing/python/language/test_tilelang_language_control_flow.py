"""Control flow on the CPU target: if/else on run-time and Python values, while/break,
``T.alloc_var`` counters and ``T.macro`` helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=-1, target="cpu")
def piecewise(N, block):
    """if/elif/else on run-time element values."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
            for i in T.Parallel(block):
                x = A[bx * block + i]
                if x < -1.0:
                    B[bx * block + i] = -1.0
                elif x < 1.0:
                    B[bx * block + i] = x * x
                else:
                    B[bx * block + i] = x + 1.0

    return main


def test_if_elif_else_runtime(randn):
    a = randn(300, scale=2.0)
    x = a.double()
    ref = torch.where(x < -1, -1.0, torch.where(x < 1, x * x, x + 1))
    torch.testing.assert_close(piecewise(300, 64)(a).double(), ref, rtol=1e-6, atol=1e-6)


@tilelang.jit(out_idx=-1, target="cpu")
def masked_scores(N, is_causal, scale):
    """``if is_causal:`` on a Python bool picks code while tracing (as in attention kernels)."""

    @T.prim_func
    def main(S: T.Tensor((N, N), "float32"), O: T.Tensor((N, N), "float32")):
        with T.Kernel(1, threads=64):
            F = T.alloc_fragment((N, N), "float32")
            T.copy(S, F)
            for i, j in T.Parallel(N, N):
                if is_causal:
                    F[i, j] = T.if_then_else(i >= j, F[i, j] * scale, -T.infinity("float32"))
                else:
                    F[i, j] = F[i, j] * scale
            T.copy(F, O)

    return main


@pytest.mark.parametrize("is_causal", [False, True])
def test_python_bool_branch(randn, is_causal):
    s = randn(12, 12)
    out = masked_scores(12, is_causal, 0.5)(s).double()
    ref = s.double() * 0.5
    if is_causal:
        ref = ref.masked_fill(torch.ones(12, 12).triu(1).bool(), float("-inf"))
    torch.testing.assert_close(out, ref)
    source = masked_scores(12, is_causal, 0.5).get_kernel_source()
    assert ("if_then_else" in source) == is_causal


@tilelang.jit(out_idx=-1, target="cpu")
def collatz_steps(N):
    """while on a run-time condition with a break: steps to reach 1 (capped at 200)."""

    @T.prim_func
    def main(A: T.Tensor((N,), "int32"), Steps: T.Tensor((N,), "int32")):
        with T.Kernel(N, threads=1) as bx:
            x = T.alloc_var(T.int32)
            n = T.alloc_var(T.int32)
            x = A[bx]
            n = 0
            while x != 1:
                if n >= 200:
                    break
                if x % 2 == 0:
                    x = x // 2
                else:
                    x = 3 * x + 1
                n += 1
            Steps[bx] = n

    return main


def _collatz(x):
    n = 0
    while x != 1 and n < 200:
        x = x // 2 if x % 2 == 0 else 3 * x + 1
        n += 1
    return n


def test_while_break(rng):
    vals = rng.integers(1, 1000, size=40).astype(np.int32)
    out = collatz_steps(40)(torch.from_numpy(vals))
    assert out.tolist() == [_collatz(int(v)) for v in vals]


@tilelang.jit(out_idx=-1, target="cpu")
def count_above(N, threshold):
    """alloc_var counters updated with ``x = x + 1`` and ``x += 1``; ``y: T.int32 = 0`` too."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((3,), "int32")):
        with T.Kernel(1, threads=1):
            above = T.alloc_var(T.int32)
            below = T.alloc_var(T.int32, init=0)
            above = 0
            total: T.int32 = 0
            for i in T.serial(N):
                if A[i] > threshold:
                    above = above + 1
                else:
                    below += 1
                total += 1
            Out[0] = above
            Out[1] = below
            Out[2] = total

    return main


def test_alloc_var_counters(randn):
    a = randn(77)
    out = count_above(77, 0.25)(a)
    above = int((a > 0.25).sum())
    assert out.tolist() == [above, 77 - above, 77]


def test_alloc_var_read_after_rebind(randn):
    """A Python name bound to a memory read keeps the value read, not later stores."""

    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            old = A[0]
            A[0] = old + 10.0
            B[0] = old
            B[1] = A[0]

    kernel = tilelang.compile(main, target="cpu")
    a = randn(4)
    a0 = a[0].item()
    b = torch.zeros(4)
    kernel(a, b)
    assert b[0].item() == pytest.approx(a0) and b[1].item() == pytest.approx(a0 + 10.0)


@T.macro
def clamp_tile(F, lo, hi, rows, cols):
    """A macro with loops and branches inside."""
    for i, j in T.Parallel(rows, cols):
        if F[i, j] < lo:
            F[i, j] = lo
        elif F[i, j] > hi:
            F[i, j] = hi


@T.macro
def scale_rows(F, scales, rows, cols, enabled):
    """A macro calling another macro; a Python bool picks a branch."""
    if enabled:
        for i, j in T.Parallel(rows, cols):
            F[i, j] = F[i, j] * scales[i]
    clamp_tile(F, -1.0, 1.0, rows, cols)


@tilelang.jit(out_idx=-1, target="cpu")
def macro_kernel(M, N, enabled):
    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32"), B: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(1, threads=32):
            F = T.alloc_fragment((M, N), "float32")
            T.copy(A, F)
            scale_rows(F, S, M, N, enabled)
            T.copy(F, B)

    return main


@pytest.mark.parametrize("enabled", [False, True])
def test_macro_with_control_flow(randn, enabled):
    a, s = randn(6, 9), randn(6)
    ref = a.double() * (s.double()[:, None] if enabled else 1.0)
    out = macro_kernel(6, 9, enabled)(a, s)
    torch.testing.assert_close(out.double(), ref.clamp(-1, 1), rtol=1e-6, atol=1e-6)


@T.macro
def online_update(m, x):
    """A macro writing into an alloc_var cell of its caller."""
    if x > m:
        m = x


@tilelang.jit(out_idx=-1, target="cpu")
def macro_var(N):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=1):
            m = T.alloc_var("float32")
            m = -T.infinity("float32")
            for i in T.serial(N):
                online_update(m, A[i])
            Out[0] = m

    return main


def test_macro_updates_caller_var(randn):
    a = randn(50)
    assert macro_var(50)(a).item() == a.max().item()


@tilelang.jit(out_idx=-1, target="cpu")
def runtime_branch_tile_ops(M, N):
    """Tile ops under a run-time if/else (per-block choice)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, N), "float32"),
        flags: T.Tensor((M,), "int32"),
        B: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(M, threads=32) as bx:
            row = T.alloc_fragment((N,), "float32")
            if flags[bx] != 0:
                T.copy(A[bx, :], row)
            else:
                T.fill(row, -5.0)
            T.copy(row, B[bx, :])

    return main


def test_runtime_if_around_tile_ops(randn, rng):
    a = randn(10, 8)
    flags = torch.from_numpy(rng.integers(0, 2, size=10).astype(np.int32))
    out = runtime_branch_tile_ops(10, 8)(a, flags)
    ref = torch.where(flags[:, None] != 0, a, torch.full_like(a, -5.0))
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_while_on_python_value_unrolls():
    """``while k < 3`` on a Python int runs while tracing: three stores, no IR loop."""

    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            k = 0
            while k < 3:
                A[k] = k * 1.5
                k += 1

    kernel = tilelang.compile(main, target="cpu")
    a = torch.full((8,), -1.0)
    kernel(a)
    assert a.tolist() == [0.0, 1.5, 3.0] + [-1.0] * 5
    assert "while" not in kernel.get_kernel_source()


def test_if_on_dynamic_dim():
    """A condition on a T.dynamic size is decided at run time."""
    M = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=1):
            if M > 4:
                A[0] = 1.0
            else:
                A[0] = 2.0

    kernel = tilelang.compile(main, target="cpu")
    big, small = torch.zeros(6), torch.zeros(3)
    kernel(big)
    kernel(small)
    assert big[0].item() == 1.0 and small[0].item() == 2.0


def test_range_with_runtime_start_and_step(rng):
    @T.prim_func
    def main(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "int32"), lo: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=1):
            for i in range(lo[0], 32, 3):
                B[i] = A[i] + 1

    kernel = tilelang.compile(main, target="cpu")
    a = torch.from_numpy(rng.integers(-9, 9, size=32).astype(np.int32))
    for start in (0, 2, 31):
        b = torch.zeros(32, dtype=torch.int32)
        kernel(a, b, torch.tensor([start], dtype=torch.int32))
        ref = torch.zeros(32, dtype=torch.int32)
        ref[start::3] = a[start::3] + 1
        assert torch.equal(b, ref)


@tilelang.jit(out_idx=-1, target="cpu")
def boolean_ops(N, enabled):
    """and/or/not, chained comparisons and ``a if c else b`` on run-time values, mixed
    with a Python bool."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                x = A[i]
                if x > 0 and x < 1:
                    B[i] = 1.0
                elif x < -1 or x > 2:
                    B[i] = 2.0
                elif enabled and not (x > 0):
                    B[i] = 3.0
                elif -0.5 <= x < 0.25 or i == 0:
                    B[i] = 4.0
                else:
                    B[i] = x * 10.0 if x > 1.5 else -x

    return main


def _boolean_ref(v, i, enabled):
    if 0 < v < 1:
        return 1.0
    if v < -1 or v > 2:
        return 2.0
    if enabled and not v > 0:
        return 3.0
    if -0.5 <= v < 0.25 or i == 0:
        return 4.0
    return v * 10.0 if v > 1.5 else -v


@pytest.mark.parametrize("enabled", [False, True])
def test_boolean_operators(randn, enabled):
    a = randn(200, scale=1.5)
    ref = torch.tensor([_boolean_ref(v, i, enabled) for i, v in enumerate(a.tolist())])
    torch.testing.assert_close(boolean_ops(200, enabled)(a), ref, rtol=1e-6, atol=1e-6)


def test_while_with_compound_condition(rng):
    """``while not found and i < n`` on alloc_var cells: index of the first 5 (or n)."""

    @T.prim_func
    def main(A: T.Tensor((16,), "int32"), B: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=1):
            found = T.alloc_var("bool", init=False)
            i = T.alloc_var("int32", init=0)
            while not found and i < 16:
                if A[i] == 5:
                    found = True
                else:
                    i += 1
            B[0] = i

    kernel = tilelang.compile(main, target="cpu")
    for _ in range(3):
        a = rng.integers(0, 8, size=16).astype(np.int32)
        b = torch.zeros(1, dtype=torch.int32)
        kernel(torch.from_numpy(a), b)
        hits = np.flatnonzero(a == 5)
        assert b.item() == (hits[0] if hits.size else 16)


def test_python_boolean_values_keep_python_semantics():
    """On Python values and/or/not/ternaries behave exactly as in Python while tracing."""
    seen = {}

    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            seen["and"] = 0 and 5
            seen["or"] = "" or "x"
            seen["not"] = not []
            seen["ifexp"] = "a" if 3 > 2 else "b"
            seen["chain"] = 1 < 2 < 3 > 2
            A[0] = 1.0

    assert seen == {"and": 0, "or": "x", "not": True, "ifexp": "a", "chain": True}


@tilelang.jit(out_idx=-1, target="cpu")
def reverse_loops(N):
    """Negative steps: ``T.serial(N - 1, -1, -1)`` and ``range(N - 1, -1, -2)``."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), Out: T.Tensor((2, N), "float32")):
        with T.Kernel(1, threads=1):
            j = T.alloc_var("int32", init=0)
            for i in T.serial(N - 1, -1, -1):
                Out[0, j] = A[i]
                j += 1
            T.clear(Out[1, :])
            for i in range(N - 1, -1, -2):
                Out[1, i] = A[i]

    return main


@pytest.mark.parametrize("N", [8, 7])
def test_negative_step_loops(randn, N):
    a = randn(N)
    out = reverse_loops(N)(a)
    assert torch.equal(out[0], a.flip(0))
    ref = torch.zeros(N)
    idx = list(range(N - 1, -1, -2))
    ref[idx] = a[idx]
    assert torch.equal(out[1], ref)


def test_negative_step_with_runtime_bounds(rng):
    @T.prim_func
    def main(A: T.Tensor((16,), "int32"), B: T.Tensor((16,), "int32"), n: T.int32):
        with T.Kernel(1, threads=1):
            for i in range(n - 1, 0, -3):
                B[i] = A[i]

    kernel = tilelang.compile(main, target="cpu")
    a = torch.from_numpy(rng.integers(1, 9, size=16).astype(np.int32))
    for n in (16, 5, 1, 0):
        b = torch.zeros(16, dtype=torch.int32)
        kernel(a, b, n)
        ref = torch.zeros(16, dtype=torch.int32)
        idx = list(range(n - 1, 0, -3))
        ref[idx] = a[idx]
        assert torch.equal(b, ref), n
