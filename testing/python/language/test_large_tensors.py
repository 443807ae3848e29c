"""Tensors of 2**31 elements or more: 64-bit index arithmetic, and dynamic extents that do not
fit their declared type rejected at the call (``tilelang/transform/wide_index.py``).

The runs need about 4.5 GB (two uint8 tensors of ~2.15e9 elements) and are skipped when the
machine has less than 10 GB available.
"""

from __future__ import annotations

import re
import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError

BIG = 2**31 + 4099  # not a multiple of the 1024-element block


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


needs_memory = pytest.mark.skipif(
    _available_bytes() < 10 * 2**30, reason="needs ~5 GB of free memory for two 2.1 GB tensors"
)
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
NVCC = {"kind": "cuda", "arch": "sm_90a", "compiler": "nvcc"}


def add_one_1d(index_dtype):
    n = T.dynamic("n", index_dtype) if index_dtype else T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "uint8"), B: T.Tensor((n,), "uint8")):
        with T.Kernel(T.ceildiv(n, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                B[bx * 1024 + i] = A[bx * 1024 + i] + 1

    return main


def add_one_2d(M=65536, N=32769):  # 2_147_549_184 elements
    @T.prim_func
    def main(A: T.Tensor((M, N), "uint8"), B: T.Tensor((M, N), "uint8")):
        with T.Kernel(T.ceildiv(N, 256), T.ceildiv(M, 16), threads=128) as (bx, by):
            for i, j in T.Parallel(16, 256):
                B[by * 16 + i, bx * 256 + j] = A[by * 16 + i, bx * 256 + j] + 1

    return main


def _check_add_one(a, b):
    """b == a + 1 (uint8) where ``a`` is 7 everywhere but its last five elements 0..4."""
    flat_b = b.reshape(-1)
    body = flat_b[:-5]
    assert body.min().item() == 8 and body.max().item() == 8
    assert flat_b[-5:].tolist() == [1, 2, 3, 4, 5]


def _input(shape, device="cpu"):
    a = torch.empty(shape, dtype=torch.uint8, device=device)
    a.fill_(7)
    a.reshape(-1)[-5:] = torch.arange(5, dtype=torch.uint8, device=device)
    return a


def test_int32_dynamic_extent_too_large_is_rejected_at_the_call():
    kernel = tilelang.compile(add_one_1d(None), target="cpu", out_idx=[-1])
    a = torch.empty(BIG, dtype=torch.uint8)  # not touched: no memory is used
    with pytest.raises(KernelArgumentError) as info:
        kernel(a)
    message = str(info.value)
    assert "'A'" in message and "n=2147487747" in message and "int64" in message


def test_index_arithmetic_is_int64_only_where_needed():
    from tilelang import lower

    small = lower(add_one_2d(256, 300), target="cpu").kernel_source
    big = lower(add_one_2d(), target="cpu").kernel_source
    assert "int64" not in small
    assert "int64" in big


@needs_memory
def test_int64_dynamic_extent_over_2_31_runs_on_cpu():
    kernel = tilelang.compile(add_one_1d("int64"), target="cpu", out_idx=[-1])
    a = _input(BIG)
    _check_add_one(a, kernel(a))


@needs_memory
def test_static_2d_shape_over_2_31_runs_on_cpu():
    kernel = tilelang.compile(add_one_2d(), target="cpu", out_idx=[-1])
    a = _input((65536, 32769))
    _check_add_one(a, kernel(a))


@needs_nvcc
@pytest.mark.parametrize("make", [lambda: add_one_1d("int64"), add_one_2d], ids=["1d", "2d"])
def test_large_kernels_build_for_cuda_with_64_bit_offsets(make):
    source = tilelang.compile(make(), target=NVCC, out_idx=[-1]).get_kernel_source()
    body = source[source.find("__global__") :]
    # the store's offset is 64-bit: cast in the subscript, or a CSE variable of type int64_t
    index = re.search(r"B_ptr\[(\w+)\]", body)
    assert re.search(r"B_ptr\[\(*\(int64_t\)", body) or (
        index and re.search(rf"\bint64_t {index.group(1)} = ", body)
    ), body[:2000]


@pytest.mark.cuda
@pytest.mark.parametrize(
    "make, shape",
    [(lambda: add_one_1d("int64"), (BIG,)), (add_one_2d, (65536, 32769))],
    ids=["1d", "2d"],
)
def test_large_kernels_run_on_cuda(make, shape):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernel = tilelang.compile(make(), target="cuda", out_idx=[-1])
    a = _input(shape, device="cuda")
    _check_add_one(a, kernel(a))
