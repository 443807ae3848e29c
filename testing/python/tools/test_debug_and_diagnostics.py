"""T.print / T.device_assert on the CPU, and compile errors naming the user's file:line."""

from __future__ import annotations

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.ops.debug.op import DeviceAssertError
from tilelang.transform.lower_tile_ops import LowerTileOps

THIS_FILE = __file__


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    tilelang.cache.clear_cache()
    yield
    tilelang.cache.clear_cache()


def _line_of(marker: str) -> int:
    """The line of this file that carries ``# <marker>``."""
    with open(THIS_FILE) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(marker)


# --------------------------------------------------------------------------- T.print


def printing(n=8, block=4):
    @T.prim_func
    def printing_kernel(A: T.Tensor((n,), "float32"), I: T.Tensor((n,), "int32")):
        with T.Kernel(n // block, threads=32) as bx:
            tile = T.alloc_shared((block,), "float32")
            T.copy(A[bx * block], tile)
            T.print(tile, msg="tile")
            T.print(I[bx * block], msg="first int")
            T.print(bx)

    return printing_kernel


def test_print_tile_and_scalars(capfd):
    kernel = tilelang.compile(printing(), target="cpu")
    a = torch.arange(8, dtype=torch.float32) + 0.25
    ints = torch.arange(8, dtype=torch.int32) * 10 - 7
    kernel(a, ints)
    lines = capfd.readouterr().out.splitlines()
    for i in range(8):
        assert f"tile: tile[{i % 4}] = {i + 0.25:g}" in lines  # each block prints its tile
    assert "first int: -7" in lines and "first int: 33" in lines
    assert "0" in lines and "1" in lines
    assert len(lines) == 2 * (4 + 2)


def test_print_formats_half_and_wide_values(capfd):
    @T.prim_func
    def halves(A: T.Tensor((2,), "float16"), L: T.Tensor((1,), "int64")):
        with T.Kernel(1, threads=1):
            T.print(A, msg="h")
            T.print(L[0], msg="100%")

    kernel = tilelang.compile(halves, target="cpu")
    kernel(torch.tensor([1.5, -2.0], dtype=torch.float16), torch.tensor([2**40], dtype=torch.int64))
    out = capfd.readouterr().out.splitlines()
    assert out == ["h: A[0] = 1.5", "h: A[1] = -2", f"100%: {2**40}"]


def test_print_rejects_non_tensors():
    with pytest.raises(tilelang.TraceError, match="T.print obj must be"):

        @T.prim_func
        def bad(A: T.Tensor((2,), "float32")):
            with T.Kernel(1, threads=1):
                T.print("text")


# --------------------------------------------------------------------------- device_assert


def asserting(n=8, block=4):
    @T.prim_func
    def asserting_kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(n // block, threads=32) as bx:
            for i in T.serial(block):
                T.device_assert(A[bx * block + i] >= 0, "A must be non-negative")  # ASSERT
                B[bx * block + i] = A[bx * block + i] * 2.0

    return asserting_kernel


def test_device_assert_passes_and_fails():
    kernel = tilelang.compile(asserting(), out_idx=[-1], target="cpu")
    a = torch.arange(8, dtype=torch.float32)
    torch.testing.assert_close(kernel(a), a * 2)
    a[5] = -1.0
    with pytest.raises(DeviceAssertError) as info:
        kernel(a)
    message = str(info.value)
    assert f"{THIS_FILE}:{_line_of('ASSERT')}" in message
    assert "T.device_assert failed: A must be non-negative" in message
    assert isinstance(info.value, AssertionError)


def test_device_assert_python_bool():
    @T.prim_func
    def trivially(A: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=1):
            T.device_assert(True)
            T.device_assert(False, "never")

    kernel = tilelang.compile(trivially, target="cpu")
    with pytest.raises(DeviceAssertError, match="never"):
        kernel(torch.zeros(1))


# --------------------------------------------------------------------------- diagnostics


def test_copy_shape_mismatch_names_the_line():
    with pytest.raises(tilelang.CompileError) as info:

        @T.prim_func
        def bad_copy(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((16, 32), "float32")
                d = T.alloc_shared((32, 16), "float32")
                T.copy(s, d)  # COPY

    message = str(info.value)
    assert message.startswith(f"{THIS_FILE}:{_line_of('COPY')}: ")
    assert "T.copy" in message and "different tile shapes" in message


def test_gemm_k_mismatch_names_the_line():
    with pytest.raises(tilelang.CompileError) as info:

        @T.prim_func
        def bad_gemm(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((32, 16), "float16")
                b = T.alloc_shared((32, 32), "float16")
                c = T.alloc_fragment((32, 32), "float32")
                T.gemm(a, b, c)  # GEMM

    message = str(info.value)
    assert message.startswith(f"{THIS_FILE}:{_line_of('GEMM')}: ")
    assert "K of A and B differ (16 vs 32)" in message


def test_unsupported_op_on_a_target_names_op_target_and_line():
    @T.prim_func
    def copies(A: T.Tensor((32,), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            T.copy(A, B)  # UNSUPPORTED

    with pytest.raises(tilelang.CompileError) as info:
        LowerTileOps("fakebackend")(copies.body)
    message = str(info.value)
    assert message.startswith(f"{THIS_FILE}:{_line_of('UNSUPPORTED')}: ")
    assert "T.copy is not supported on the fakebackend target" in message


def test_unsupported_op_through_compile(monkeypatch):
    """A lowering rule missing on the CPU surfaces from tilelang.compile with the line."""
    from tilelang.ops import registry

    monkeypatch.delitem(registry._LOWERINGS, ("print", "cpu"))

    @T.prim_func
    def prints(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1):
            T.print(A)  # NO_RULE

    with pytest.raises(tilelang.CompileError) as info:
        tilelang.compile(prints, target="cpu")
    message = str(info.value)
    assert message.startswith(f"{THIS_FILE}:{_line_of('NO_RULE')}: ")
    assert "T.print is not supported on the cpu target" in message
