"""Python constructs on run-time values: traced correctly, or a TraceError at the user's line.

A kernel body runs once as Python while tracing, so Python names assigned under an
``if`` on a run-time value, ``match``, ``==`` in plain helpers and ``return`` inside
run-time branches need care (see tilelang/language/trace_guards.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T

THIS_FILE = os.path.basename(__file__)


def _raises_at(make, needle_line: str, *words):
    with pytest.raises(tilelang.TileLangError) as info:
        make()
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, needle_line)}" in message, message
    for word in words:
        assert word in message, message
    return message


def test_python_constants_assigned_in_both_arms_are_merged(rng):
    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    if A[i] > 0:
                        c = 1
                        s = 0.5
                    else:
                        c = 2
                        s = -1.25
                    B[i] = A[i] * c + s

        return main

    n = 37
    a = rng.standard_normal(n).astype(np.float32)
    got = k(n)(torch.from_numpy(a)).double().numpy()
    a64 = a.astype(np.float64)
    want = np.where(a64 > 0, a64 * 1 + 0.5, a64 * 2 - 1.25)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_merge_reads_the_condition_before_the_arms_store(rng):
    """The arms overwrite the memory the condition reads: the merged value still follows
    the branch actually taken."""

    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    if A[i] > 0:
                        A[i] = -5
                        c = 10
                    else:
                        A[i] = 7
                        c = i
                    B[i] = c

        return main

    n = 29
    a = rng.integers(-3, 4, n).astype(np.int32)
    want = np.where(a > 0, 10, np.arange(n))
    got = k(n)(torch.from_numpy(a.copy())).numpy()
    np.testing.assert_array_equal(got, want)


def test_value_kept_by_one_arm_is_merged_with_the_value_before(rng):
    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    c = 3
                    if A[i] == 0:
                        c = 4
                    B[i] = c + A[i]

        return main

    n = 23
    a = rng.integers(0, 3, n).astype(np.int32)
    got = k(n)(torch.from_numpy(a)).numpy()
    np.testing.assert_array_equal(got, np.where(a == 0, 4, 3) + a)


def test_name_assigned_in_one_arm_only_is_an_error_at_its_use():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    if A[i] > 0:
                        c = 1
                    B[i] = c  # use

        return main

    _raises_at(make, "# use", "'c'", "T.alloc_var", "one arm only")


def test_buffer_chosen_by_a_runtime_if_is_an_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                if A[0] > 0:
                    src = A
                else:
                    src = B
                B[1] = src[0]  # use

        return main

    _raises_at(make, "# use", "'src'", "non-scalar")


def test_name_assigned_in_runtime_loop_used_after_is_an_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                last = 0
                for i in T.serial(8):
                    last = i
                B[0] = last  # use

        return main

    _raises_at(make, "# use", "'last'", "loop")


def test_python_loop_assignments_keep_python_semantics(rng):
    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            with T.Kernel(1, threads=1):
                total = 0
                for j in [1, 2, 3]:
                    total = total + j
                for i in T.serial(N):
                    B[i] = A[i] + total

        return main

    a = rng.integers(-9, 9, 11).astype(np.int32)
    np.testing.assert_array_equal(k(11)(torch.from_numpy(a)).numpy(), a + 6)


def test_match_on_runtime_value_is_an_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    match A[i]:  # match
                        case 0:
                            B[i] = 1
                        case _:
                            B[i] = 2

        return main

    _raises_at(make, "# match", "`match`", "if/elif/else")


def test_match_on_python_value_works(rng):
    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N, mode):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    match mode:
                        case "double":
                            B[i] = A[i] * 2
                        case _:
                            B[i] = A[i] + 1

        return main

    a = rng.integers(-9, 9, 13).astype(np.int32)
    np.testing.assert_array_equal(k(13, "double")(torch.from_numpy(a)).numpy(), a * 2)
    np.testing.assert_array_equal(k(13, "inc")(torch.from_numpy(a)).numpy(), a + 1)


def _is_zero(x):
    return x == 0  # helper eq


def _positive(x):
    if x > 0:  # helper gt
        return 1
    return 0


def test_equality_in_plain_helper_is_an_error_naming_the_helper():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    if _is_zero(A[i]) and True:  # call
                        B[i] = 1

        return main

    # ``if`` on the deferred ``==`` itself is traced; ``and`` asks Python for its truth
    # inside the rewritten source, which is traced too. Only a helper's own ``if`` fails:
    def make_branching_helper():
        def helper(x):
            return 5 if _is_zero(x) else 7  # plain ternary

        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    B[i] = helper(A[i])

        return main

    make()  # traced fine: the kernel's own `if` and `and` handle run-time values
    with pytest.raises(tilelang.TileLangError) as info:
        make_branching_helper()
    message = str(info.value)
    assert "`==`" in message and "@T.macro" in message, message


def test_comparison_in_plain_helper_is_an_error_naming_the_helper():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    B[i] = _positive(A[i])

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        make()
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(_positive, '# helper gt')}" in message, message
    assert "T.if_then_else" in message


def test_helper_equality_on_static_values_is_python_equality(rng):
    def scale_for(n):
        return 2 if n == 16 else 3  # n: a Python int or an IntImm

    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            with T.Kernel(1, threads=1):
                s = scale_for(A.shape[0])
                for i in T.serial(N):
                    B[i] = A[i] * s

        return main

    a = rng.integers(-9, 9, 16).astype(np.int32)
    np.testing.assert_array_equal(k(16)(torch.from_numpy(a)).numpy(), a * 2)


def test_nested_def_returning_inside_runtime_if_is_an_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            def pick(x):
                if x > 0:
                    return 1  # return
                return 2

            with T.Kernel(1, threads=1):
                for i in T.serial(8):
                    B[i] = pick(A[i])

        return main

    _raises_at(make, "# return", "`return`", "T.if_then_else")


def test_nested_def_with_static_branches_and_tail_return(rng):
    @tilelang.jit(out_idx=-1, target="cpu")
    def k(N, neg):
        @T.prim_func
        def main(A: T.Tensor((N,), "int32"), B: T.Tensor((N,), "int32")):
            def transform(x):
                if neg:
                    return -x
                return T.if_then_else(x > 0, x, 0)

            with T.Kernel(1, threads=1):
                for i in T.serial(N):
                    B[i] = transform(A[i])

        return main

    a = rng.integers(-9, 9, 10).astype(np.int32)
    np.testing.assert_array_equal(k(10, True)(torch.from_numpy(a)).numpy(), -a)
    np.testing.assert_array_equal(k(10, False)(torch.from_numpy(a)).numpy(), np.maximum(a, 0))
