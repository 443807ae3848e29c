"""Launch limits are compile-time errors at the user's ``T.Kernel`` / allocation line."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T

THIS_FILE = os.path.basename(__file__)


def _kernel(grid=(1,), threads=128, smem=256, dtype="float32"):
    def make():
        @T.prim_func
        def main(A: T.Tensor((256,), dtype), B: T.Tensor((256,), dtype)):
            with T.Kernel(*grid, threads=threads):  # launch
                S = T.alloc_shared((smem,), dtype)  # alloc
                T.copy(A[0:256], S[0:256])
                T.copy(S[0:256], B[0:256])

        return main

    return make


@pytest.mark.parametrize(
    "threads, words",
    [
        (2048, ["2048 threads", "at most 1024"]),
        (1025, ["1025 threads", "at most 1024"]),
        ((32, 64), ["2048 threads per block"]),
        ((1, 1, 65), ["dimension z", "at most 64"]),
        (0, ["positive"]),
    ],
)
def test_threads_per_block_limit(threads, words):
    make = _kernel(threads=threads)
    with pytest.raises(tilelang.TileLangError) as info:
        make()
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, '# launch')}" in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    "grid, words",
    [((1, 65536), ["grid dimension y", "65535"]), ((1, 1, 70000), ["grid dimension z"])],
)
def test_grid_limit(grid, words):
    make = _kernel(grid=grid)
    with pytest.raises(tilelang.TileLangError) as info:
        make()
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(make, '# launch')}" in message, message
    for word in words:
        assert word in message, message


def test_limits_themselves_are_accepted(rng):
    """1024 threads and a 65535-block grid y are fine (and run on the CPU)."""
    kernel = tilelang.compile(_kernel(threads=1024)(), out_idx=[-1], target="cpu")
    a = rng.standard_normal(256).astype(np.float32)
    np.testing.assert_array_equal(kernel(torch.from_numpy(a)).numpy(), a)
    _kernel(grid=(1, 65535))()  # traces


@pytest.mark.parametrize(
    "arch, limit_kb, fits_kb",
    [("sm_80", 163, 160), ("sm_86", 99, 96), ("sm_90a", 227, 224)],
)
def test_shared_memory_limit_per_arch(arch, limit_kb, fits_kb):
    over = _kernel(smem=(limit_kb + 1) * 1024 // 4)
    with pytest.raises(tilelang.TileLangError) as info:
        tilelang.lower(over(), target={"kind": "cuda", "arch": arch})
    message = str(info.value)
    assert f"{THIS_FILE}:{line_of(over, '# alloc')}" in message, message
    assert str(limit_kb * 1024) in message and "'S'" not in message and "S (" in message
    tilelang.lower(_kernel(smem=fits_kb * 1024 // 4)(), target={"kind": "cuda", "arch": arch})
