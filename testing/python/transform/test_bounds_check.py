"""Out-of-bounds accesses: provable ones are compile errors at the user's line; the rest are
checked at run time with ``tl.enable_bounds_check`` (CPU: BoundsCheckError; CUDA: trap)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T
from tilelang.transform.check_bounds import BoundsCheckError

THIS_FILE = os.path.basename(__file__)
CHECKED = {"tl.enable_bounds_check": True}


def _compile_error(make, marker, *words):
    with pytest.raises(tilelang.TileLangError) as info:
        make()
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, marker)}" in message, message
    for word in words:
        assert word in message, message


def test_serial_loop_past_global_tensor():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(12):
                    B[i] = A[i] + 1.0  # oob

        return main

    _compile_error(make, "# oob", "A[i]", "(shape (8,))", "index 0 is 11", "i=11")


def test_constant_index_far_outside():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                B[0] = A[3, 100000]  # oob

        return main

    _compile_error(make, "# oob", "A[3, 100000]", "index 1 is 100000", "(shape (4, 8))")


def test_negative_constant_index():
    """B[-1] is B[7] (Python's and upstream's meaning: test_tilelang_language_negative_index);
    B[-9] is before B's start."""

    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                B[-9] = A[0]  # oob

        return main

    _compile_error(make, "# oob", "B[-9]", "index 0 is -9")


def test_shared_tile_overrun_in_serial_and_parallel_loops():
    def make_serial():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                S = T.alloc_shared((8,), "float32")
                for i in T.serial(8):
                    S[i + 1] = A[i]  # oob
                for i in T.serial(8):
                    B[i] = S[i]

        return main

    def make_parallel():
        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((8,), "float32")
                for i in T.Parallel(16):
                    S[i] = A[i]  # oob
                T.copy(S, B[0:8])

        return main

    _compile_error(make_serial, "# oob", "S[i + 1]", "i=7")
    _compile_error(make_parallel, "# oob", "S[i]", "i=15")


def test_block_index_past_the_tensor():
    def make():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(3, threads=1) as bx:
                A[bx * 4] = 1.0  # oob

        return main

    _compile_error(make, "# oob", "A[bx * 4]", "bx=2")


def test_guarded_and_tail_accesses_are_accepted(rng):
    """Accesses that only may leave the tensor (guards, T.Parallel tails on globals,
    if_then_else arms, loops with break) compile, and compute the right values."""

    @T.prim_func
    def main(
        A: T.Tensor((10,), "float32"), B: T.Tensor((10,), "float32"), C: T.Tensor((10,), "float32")
    ):
        with T.Kernel(2, threads=8) as bx:
            for i in T.Parallel(8):  # tail of the second block: guarded
                B[bx * 8 + i] = A[bx * 8 + i] * 2.0
            for i in T.serial(16):  # every block writes the same values into C
                if i < 10:
                    C[i] = T.if_then_else(i + 1 < 10, A[T.min(i + 1, 9)], 0.0)

    kernel = tilelang.compile(main, target="cpu")
    a = rng.standard_normal(10).astype(np.float32)
    b = np.zeros(10, np.float32)
    c = np.zeros(10, np.float32)
    kernel(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c))
    np.testing.assert_array_equal(b, a * 2)
    np.testing.assert_array_equal(c, np.append(a[1:], 0.0))


@tilelang.jit(target="cpu", pass_configs=CHECKED)
def gather(n, m):
    @T.prim_func
    def main(
        A: T.Tensor((n,), "float32"), idx: T.Tensor((m,), "int32"), B: T.Tensor((m,), "float32")
    ):
        with T.Kernel(1, threads=1):
            for i in T.serial(m):
                B[i] = A[idx[i]]  # gather

    return main


def test_runtime_check_passes_valid_gather(rng):
    a = rng.standard_normal(13).astype(np.float32)
    idx = rng.integers(0, 13, 7).astype(np.int32)
    b = np.zeros(7, np.float32)
    gather(13, 7)(torch.from_numpy(a), torch.from_numpy(idx), torch.from_numpy(b))
    np.testing.assert_array_equal(b, a[idx])


@pytest.mark.parametrize("bad", [13, 1000000, -1])
def test_runtime_check_catches_bad_gather(rng, bad):
    a = rng.standard_normal(13).astype(np.float32)
    idx = rng.integers(0, 13, 7).astype(np.int32)
    idx[4] = bad
    b = np.zeros(7, np.float32)
    with pytest.raises(BoundsCheckError) as info:
        gather(13, 7)(torch.from_numpy(a), torch.from_numpy(idx), torch.from_numpy(b))
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(gather, '# gather')}" in message, message
    assert "A[" in message and "(shape (13,))" in message


def test_runtime_check_on_dynamic_extent(rng):
    @tilelang.jit(target="cpu", pass_configs=CHECKED)
    def copy_prefix():
        n = T.dynamic("n")

        @T.prim_func
        def main(A: T.Tensor((n,), "float32"), B: T.Tensor((16,), "float32"), count: T.int32):
            with T.Kernel(1, threads=1):
                for i in T.serial(count):
                    B[i] = A[i]  # prefix

        return main

    kernel = copy_prefix()
    a = rng.standard_normal(20).astype(np.float32)
    b = np.zeros(16, np.float32)
    kernel(torch.from_numpy(a), torch.from_numpy(b), 12)
    np.testing.assert_array_equal(b[:12], a[:12])
    with pytest.raises(BoundsCheckError, match="prefix|B\\[i\\]|A\\[i\\]"):
        kernel(torch.from_numpy(a[:10].copy()), torch.from_numpy(b), 12)  # A too short
    with pytest.raises(BoundsCheckError):
        kernel(torch.from_numpy(a), torch.from_numpy(b), 17)  # B too short


def _cuda_gather(arch="sm_90a"):
    @T.prim_func
    def main(
        A: T.Tensor((64,), "float32"),
        idx: T.Tensor((128,), "int32"),
        B: T.Tensor((128,), "float32"),
    ):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(128):
                B[i] = A[idx[i]]

    return main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_bounds_check_builds_with_nvcc():
    target = {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"}
    kernel = tilelang.compile(_cuda_gather(), target=target, pass_configs=CHECKED)
    source = kernel.get_kernel_source()
    assert "__trap" in source and "out-of-bounds access A[" in source
    plain = tilelang.compile(_cuda_gather(), target=target)
    assert "out-of-bounds" not in plain.get_kernel_source()


@pytest.mark.cuda
def test_cuda_bounds_check_valid_gather_runs():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernel = tilelang.compile(_cuda_gather(), target="cuda", pass_configs=CHECKED)
    a = torch.randn(64, device="cuda")
    idx = torch.randint(0, 64, (128,), device="cuda", dtype=torch.int32)
    b = torch.zeros(128, device="cuda")
    kernel(a, idx, b)
    torch.testing.assert_close(b, a[idx.long()])
