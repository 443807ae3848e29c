"""Tracing and compile errors name the user's file and line, and say what is wrong."""

from __future__ import annotations

import os

import pytest
from source_lines import line_of

import tilelang
import tilelang.language as T

THIS_FILE = os.path.basename(__file__)


def assert_names_line(err: Exception, line: int):
    message = str(err)
    assert f"{THIS_FILE}:{line}" in message, message


def raises_at_mismatch(kernel, needle):
    """Tracing ``kernel`` raises a TileLangError naming its ``# mismatch`` line and ``needle``."""
    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert needle in str(info.value)


def test_copy_shape_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((32, 32), "float32")
                F = T.alloc_fragment((16, 16), "float32")
                T.copy(A[0:32, 0:32], S)
                T.copy(S, F)  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert "T.copy" in str(info.value) and "[32, 32]" in str(info.value)
    assert "[16, 16]" in str(info.value) and "different tile shapes" in str(info.value)


def test_copy_rank_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 8, 8), "float32")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((8, 8), "float32")
                T.copy(A[0:2, 0:8, 0:8], S)  # mismatch

        return main

    raises_at_mismatch(kernel, "different tile shapes")


def test_gemm_k_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((32, 16), "float16")):
            with T.Kernel(1, threads=128):
                As = T.alloc_shared((32, 16), "float16")
                Bs = T.alloc_shared((24, 32), "float16")
                C = T.alloc_fragment((32, 32), "float32")
                T.gemm(As, Bs, C)  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    message = str(info.value)
    assert "T.gemm" in message and "K of A and B" in message and "16" in message and "24" in message


def test_gemm_transpose_mismatch():
    """With transpose_B the K of B is its last dimension: (32, 16) @ (16, 32)^T is wrong."""

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((32, 16), "float16")):
            with T.Kernel(1, threads=128):
                As = T.alloc_shared((32, 16), "float16")
                Bs = T.alloc_shared((16, 32), "float16")
                C = T.alloc_fragment((32, 32), "float32")
                T.gemm(As, Bs, C, transpose_B=True)  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))


def test_gemm_c_shape_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((32, 16), "float16")):
            with T.Kernel(1, threads=128):
                As = T.alloc_shared((32, 16), "float16")
                Bs = T.alloc_shared((16, 32), "float16")
                C = T.alloc_fragment((32, 16), "float32")
                T.gemm(As, Bs, C)  # mismatch

        return main

    raises_at_mismatch(kernel, "N of B and C")


def test_reduce_shape_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 16), "float32")):
            with T.Kernel(1, threads=32):
                F = T.alloc_fragment((8, 16), "float32")
                R = T.alloc_fragment((16,), "float32")
                T.copy(A, F)
                T.reduce_sum(F, R, dim=1)  # mismatch

        return main

    raises_at_mismatch(kernel, "T.reduce")


def test_wrong_number_of_indices():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 16), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(8):
                    A[i] = 0.0  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert "2 dimensions" in str(info.value) and "1 indices" in str(info.value)


def test_missing_annotation():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), n):
            with T.Kernel(1, threads=1):
                A[0] = n

        return main

    with pytest.raises(tilelang.TileLangError, match="parameter 'n' .* has no annotation"):
        kernel()


def test_break_under_runtime_condition_in_python_loop():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                for i in [0, 1, 2]:
                    if A[i] > 0:
                        break  # mismatch
                    A[i] = 1.0

        return main

    raises_at_mismatch(kernel, "Python-level loop")


def test_runtime_value_as_python_bool():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                flag = A[0] > 0
                n = [3, 4][bool(flag)]  # mismatch
                A[1] = n

        return main

    with pytest.raises((tilelang.TileLangError, ValueError)) as info:
        kernel()
    # The error surfaces on the user's line: either in the message or in the traceback.
    line = line_of(kernel, "# mismatch")
    frames = [(os.path.basename(str(e.path)), e.lineno + 1) for e in info.traceback]
    assert (THIS_FILE, line) in frames or f"{THIS_FILE}:{line}" in str(info.value)


def test_nested_kernel():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                with T.Kernel(1, threads=1):  # mismatch
                    A[0] = 1.0

        return main

    raises_at_mismatch(kernel, "nested")


def test_error_inside_macro_names_macro_line():
    @T.macro
    def bad_copy(src, dst):
        T.copy(src, dst)  # mismatch

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=1):
                S = T.alloc_shared((4, 4), "float32")
                bad_copy(A, S)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(bad_copy, "# mismatch"))


def test_python_error_points_at_user_line():
    """A plain Python error in the body keeps the user's file and line in its traceback."""

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                A[0] = undefined_name  # noqa: F821  # mismatch

        return main

    with pytest.raises(NameError) as info:
        kernel()
    line = line_of(kernel, "# mismatch")
    frames = [(os.path.basename(str(e.path)), e.lineno + 1) for e in info.traceback]
    assert (THIS_FILE, line) in frames


def test_unsupported_construct():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.alloc_tmem([8, 8], "float32")  # mismatch
                A[0] = 1.0

        return main

    raises_at_mismatch(kernel, "T.alloc_tmem")


def test_tile_op_outside_kernel():
    with pytest.raises(tilelang.TileLangError, match="only valid inside"):
        T.fill(None, 0)


def test_atomic_tile_shape_mismatch():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=1):
                F = T.alloc_fragment((4, 4), "float32")
                T.clear(F)
                T.atomic_add(A[0:8, 0:8], F)  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert "T.atomic_add" in str(info.value) and "different tile shapes" in str(info.value)


@pytest.mark.parametrize(
    "dst_shape,dim,needle",
    [((8, 5), 1, "different shapes"), ((8,), 0, "same rank"), ((8, 4), 2, "out of range")],
)
def test_cumsum_errors(dst_shape, dim, needle):
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 4), "float32")):
            with T.Kernel(1, threads=1):
                F = T.alloc_fragment((8, 4), "float32")
                R = T.alloc_fragment(dst_shape, "float32")
                T.copy(A, F)
                T.cumsum(F, R, dim=dim)  # mismatch
                T.copy(F, A)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert "T.cumsum" in str(info.value) and needle in str(info.value)


def test_reduce_dim_out_of_range():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=1):
                F = T.alloc_fragment((8, 8), "float32")
                R = T.alloc_fragment((8,), "float32")
                T.copy(A, F)
                T.reduce_sum(F, R, dim=2)  # mismatch

        return main

    raises_at_mismatch(kernel, "dim 2 out of range")


def test_fill_of_non_tensor_and_bad_allocation():
    def fill_kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.fill(3, 1.0)  # mismatch

        return main

    def alloc_kernel():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                S = T.alloc_shared((0, 8), "float32")  # mismatch
                T.fill(S, 0.0)

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        fill_kernel()
    assert_names_line(info.value, line_of(fill_kernel, "# mismatch"))
    assert "T.fill" in str(info.value) and "got 3" in str(info.value)
    with pytest.raises(tilelang.TileLangError) as info:
        alloc_kernel()
    assert_names_line(info.value, line_of(alloc_kernel, "# mismatch"))
    assert "(0, 8)" in str(info.value)


def test_value_bound_in_branch_used_after():
    """A run-time value bound inside an IR if/else is scoped to it: using it after the
    branch is reported at the use and the binding, with the T.alloc_var fix."""

    def kernel():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                if A[3] > 0:
                    x = A[0]  # bound
                else:
                    x = A[1]
                B[0] = x  # mismatch

        return main

    with pytest.raises(tilelang.TileLangError) as info:
        kernel()
    assert_names_line(info.value, line_of(kernel, "# mismatch"))
    assert f"{THIS_FILE}:{line_of(kernel, '# bound')}" in str(info.value)
    assert "'x'" in str(info.value) and "T.alloc_var" in str(info.value)


def test_value_bound_in_loop_used_after():
    def kernel():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    last = A[i]
                B[0] = last  # mismatch

        return main

    raises_at_mismatch(kernel, "'last'")
