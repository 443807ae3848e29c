"""Frontend forms upstream's DeepSeek examples (v3.2 sparse MLA, DSA fine-tuning) write:
``T.dynamic`` with several names, Python type hints on ordinary assignments."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import errors


def test_dynamic_several_names():
    b, s = T.dynamic("batch, seq_len")
    m, n, k = T.dynamic("m n  k")
    assert [v.name for v in (b, s, m, n, k)] == ["batch", "seq_len", "m", "n", "k"]
    single = T.dynamic("m")
    assert not isinstance(single, tuple) and single.name == "m"
    with pytest.raises(errors.TraceError):
        T.dynamic("a, 1b")


@tilelang.jit(target="cpu")
def scaled_rows(X, scale: float, block: int = 16):
    """Eager form as DSA's indexer backward writes it: a tuple of dynamic sizes and
    Python-typed assignments (``dtype: str = ...``) in the body."""
    rows, cols = T.dynamic("rows, cols")
    dtype: str = T.float32
    factor: float | None = scale * 2
    X: T.Tensor((rows, cols), dtype)
    Y = T.empty((rows, cols), dtype)
    with T.Kernel(T.ceildiv(rows, block), threads=32) as bx:
        t: int = 3
        for i, j in T.Parallel(block, cols):
            if bx * block + i < rows:
                Y[bx * block + i, j] = X[bx * block + i, j] * factor + t
    return Y


@pytest.mark.parametrize("rows,cols", [(37, 5), (3, 19)])
def test_python_type_hints_are_plain_assignments(rows, cols):
    x = torch.randn(rows, cols, dtype=torch.float32)
    y = scaled_rows(x, 0.75)
    np.testing.assert_allclose(
        y.double().numpy(), x.double().numpy() * 1.5 + 3, rtol=1e-6, atol=1e-6
    )


def test_element_type_annotation_still_declares_a_cell():
    @T.prim_func
    def k(A: T.Tensor((4,), T.int32)):
        with T.Kernel(1, threads=32):
            acc: T.int32 = 0
            for i in T.serial(4):
                acc = acc + A[i]
            A[0] = acc

    a = torch.arange(1, 5, dtype=torch.int32)
    tilelang.compile(k, target="cpu")(a)
    assert a[0].item() == 10
