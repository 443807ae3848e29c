"""Bad programs give tilelang errors naming the user's file and line, never a bare Python or
TIRx exception (``tilelang/language/diagnostics.py`` and the checks at each construct)."""

from __future__ import annotations

import os

import pytest
from source_lines import line_of

import tilelang
import tilelang.language as T

THIS_FILE = os.path.basename(__file__)


def float_index():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = A[1.5]  # bad

    return main


def too_many_indices():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = A[0, 1]  # bad

    return main


def unknown_dtype():
    @T.prim_func
    def main(A: T.Tensor((8,), "float33")):  # bad
        with T.Kernel(1, threads=1):
            A[0] = 1.0

    return main


def store_string():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = "x"  # bad

    return main


def store_whole_tensor():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            B[0] = A  # bad

    return main


def tensor_arithmetic():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            B[0] = A + B  # bad

    return main


def fill_with_string():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((8,), "float32")
            T.fill(S, "x")  # bad
            T.copy(S, A)

    return main


def atomic_with_string():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            T.atomic_add(A[0], "x")  # bad

    return main


def bitand_on_float():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = A[1] & 1  # bad

    return main


def divide_by_zero():
    @T.prim_func
    def main(A: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=1):
            A[0] = A[1] // 0  # bad

    return main


def alloc_outside_kernel():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        S = T.alloc_shared((8,), "float32")  # bad
        with T.Kernel(1, threads=1):
            A[0] = S[0]

    return main


def loop_var_after_loop():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                A[i] = 1.0
            A[i] = 2.0  # bad

    return main


def missing_annotation():
    @T.prim_func
    def main(A):  # bad
        with T.Kernel(1, threads=1):
            A[0] = 1.0

    return main


def reduce_bad_dim():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((16, 16), "float32")
            R = T.alloc_fragment((16,), "float32")
            T.copy(A, F)
            T.reduce_sum(F, R, dim=2)  # bad
            T.copy(R, B)

    return main


def unknown_attribute_in_helper():
    def helper(x):
        return x.no_such_attribute  # helper line

    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = helper(A[1])  # bad

    return main


PROGRAMS = [
    (float_index, "must be integers"),
    (too_many_indices, "Too many indices"),
    (unknown_dtype, "unknown dtype 'float33'"),
    (store_string, "storing into A"),
    (store_whole_tensor, "got a tensor"),
    (tensor_arithmetic, "unsupported operand"),
    (fill_with_string, "T.fill value"),
    (atomic_with_string, "T.atomic_add value"),
    (bitand_on_float, "integer"),
    (divide_by_zero, "Divide by zero"),
    (alloc_outside_kernel, "T.Kernel"),
    (loop_var_after_loop, "'i'"),
    (missing_annotation, "no annotation"),
    (reduce_bad_dim, "dim 2"),
    (unknown_attribute_in_helper, "no_such_attribute"),
]


@pytest.mark.parametrize("make, words", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_bad_program_names_the_line(make, words, target):
    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.compile(make(), target=target)
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, '# bad')}" in message, message
    assert words in message, message


def test_wrapped_errors_keep_their_python_class():
    with pytest.raises(TypeError):
        tensor_arithmetic()
    with pytest.raises(IndexError):
        too_many_indices()


def test_helper_line_is_named_too():
    with pytest.raises(tilelang.TileLangError) as info:
        unknown_attribute_in_helper()
    helper_line = line_of(unknown_attribute_in_helper, "# helper line")
    assert f"{THIS_FILE}:{helper_line}" in str(info.value)


def test_internal_compile_failure_becomes_compile_error(monkeypatch):
    """A foundation failure inside the backend names the kernel, its line and the target."""
    from tilelang.backends.cpu import pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("Check failed: something deep inside")

    monkeypatch.setattr(pipeline._tirx, "compile", broken)
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")

    @T.prim_func
    def main(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            A[0] = 1.0  # first

    with pytest.raises(tilelang.errors.CompileError) as info:
        tilelang.compile(main, target="cpu")
    message = str(info.value)
    assert f"{THIS_FILE}:" in message and "'main'" in message and "cpu" in message
    assert "something deep inside" in message
