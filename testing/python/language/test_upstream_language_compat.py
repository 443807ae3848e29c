"""Forms of upstream's own language tests and issue regressions (``testing/python/language``,
``testing/python/issue``) that once failed here: each program is written as upstream's tests
write it, run on the CPU backend and compared with numpy in float64 / int64 on fresh inputs
and shapes that are not tile multiples; the forms still refused are checked for a clear
error naming the construct and the user's line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T


# ------------------------------------------------------------------ T.all_of / T.any_of
def mask_kernel(rows, cols, block_rows, form, reduce_name):
    """out[r] = all/any of mask[r, :] (form "slice"), of a shared copy of the row ("shared"),
    or of a local copy ("local")."""
    reduce_fn = getattr(T, reduce_name)

    @T.prim_func
    def main(mask: T.Tensor((rows, cols), "bool"), out: T.Tensor((rows,), "int32")):
        with T.Kernel(T.ceildiv(rows, block_rows), threads=1) as bx:
            row_shared = T.alloc_shared((cols,), "bool")
            row_local = T.alloc_local((cols,), "bool")
            for i in T.serial(block_rows):
                r = bx * block_rows + i
                if r < rows:
                    if form == "slice":
                        out[r] = T.if_then_else(reduce_fn(mask[r, :]), 1, 0)
                    elif form == "shared":
                        for c in T.serial(cols):
                            row_shared[c] = mask[r, c]
                        out[r] = T.if_then_else(reduce_fn(row_shared), 1, 0)
                    else:
                        for c in T.serial(cols):
                            row_local[c] = mask[r, c]
                        if reduce_fn(row_local[0:cols]):
                            out[r] = 1
                        else:
                            out[r] = 0

    return main


@pytest.mark.parametrize("form", ["slice", "shared", "local"])
@pytest.mark.parametrize("reduce_name", ["all_of", "any_of"])
def test_all_any_of_tensor_and_slice_cpu(form, reduce_name, rng):
    rows, cols, block_rows = 37, 5, 8
    mask = rng.random((rows, cols)) > 0.25
    mask[rng.random(rows) < 0.3] = False  # some rows all false, some all true
    mask[rng.random(rows) < 0.3] = True
    out = torch.full((rows,), -1, dtype=torch.int32)
    kernel = tilelang.compile(mask_kernel(rows, cols, block_rows, form, reduce_name), target="cpu")
    kernel(torch.from_numpy(mask), out)
    want = mask.all(axis=1) if reduce_name == "all_of" else mask.any(axis=1)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.int64))


def test_all_of_2d_slice_of_int_tensor_cpu(rng):
    """A 2-D slice of an int tensor: every element nonzero."""
    n = 13
    flags = rng.integers(0, 2, size=(n, 3, 4)).astype(np.int32)
    flags[::3] = 1

    @T.prim_func
    def main(F: T.Tensor((n, 3, 4), "int32"), out: T.Tensor((n,), "int32")):
        with T.Kernel(n, threads=1) as bx:
            out[bx] = T.if_then_else(T.all_of(F[bx, 1:3, 0:4]), 1, 0)

    out = torch.zeros(n, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(flags), out)
    np.testing.assert_array_equal(out.numpy(), (flags[:, 1:3, :] != 0).all(axis=(1, 2)))


def test_all_of_scalar_conditions_cpu(rng):
    """Several scalar conditions: their conjunction / disjunction."""
    n = 29
    a = rng.integers(-5, 5, size=n).astype(np.int32)

    @T.prim_func
    def main(A: T.Tensor((n,), "int32"), out: T.Tensor((n, 2), "int32")):
        with T.Kernel(n, threads=1) as bx:
            out[bx, 0] = T.if_then_else(T.all_of(A[bx] > -2, A[bx] < 3), 1, 0)
            out[bx, 1] = T.if_then_else(T.any_of(A[bx] < -3, A[bx] > 3), 1, 0)

    out = torch.zeros((n, 2), dtype=torch.int32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    np.testing.assert_array_equal(out[:, 0].numpy(), (a > -2) & (a < 3))
    np.testing.assert_array_equal(out[:, 1].numpy(), (a < -3) | (a > 3))


def test_all_of_symbolic_slice_is_a_clear_error():
    n = T.symbolic("n")

    def make():
        @T.prim_func
        def main(F: T.Tensor((n,), "bool"), out: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=1):
                out[0] = T.if_then_else(T.all_of(F[0:n]), 1, 0)

        return main

    with pytest.raises(tilelang.TileLangError, match="T.all_of.*non-constant extent") as info:
        make()
    assert f":{line_of(make, 'T.all_of(F[0:n])')}" in str(info.value)
