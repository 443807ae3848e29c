"""``@tilelang.jit``: mode detection (auto/lazy/eager), the factory form's upstream API
(``compile``, ``get_kernel_source``, ``par_compile``) and the eager form's errors.

Errors name the argument (and the constant, and the annotation's source line) or, for
mistakes in the body, the user's line.
"""

import os
import sys

import pytest
import torch

import tilelang
import tilelang.language as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from eager_kernels import make_axpy_pair, make_matmul_relu  # noqa: E402

THIS = os.path.abspath(__file__)


def add_one_factory(**jit_options):
    @tilelang.jit(out_idx=[-1], **{"target": "cpu", **jit_options})
    def add_one(N, block=32, dtype="float32"):
        @T.prim_func
        def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        B[bx * block + i] = A[bx * block + i] + 1

        return main

    return add_one


def _mm():
    matmul_relu = make_matmul_relu(target="cpu")
    a, b = torch.randn(20, 12, dtype=torch.float16), torch.randn(12, 9, dtype=torch.float16)
    matmul_relu(a, b, 16, 16, 16)  # compiled and entered in the cached path
    return matmul_relu, a, b


def _line_of(text: str, fn) -> int:
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


# --------------------------------------------------------------------------- modes
def test_auto_mode_factory_is_lazy_and_eager_body_is_eager():
    add_one = add_one_factory()
    kernel = add_one(40)
    assert add_one.mode == "lazy" and isinstance(kernel, tilelang.JITKernel)
    out = kernel(torch.zeros(40))
    assert torch.equal(out, torch.ones(40))
    axpy_pair = make_axpy_pair(target="cpu")
    assert axpy_pair.mode == "auto"
    w, _ = axpy_pair(torch.ones(8), torch.ones(8), 1.0)
    assert axpy_pair.mode == "eager" and torch.equal(w, torch.zeros(8))


def test_auto_mode_probe_of_a_factory_without_nested_prim_func():
    """No nested @T.prim_func in the source: the function is called once; it returns a
    prim_func, so it is lazy, and that first trace is the one compiled."""
    calls = []

    def build(n):
        calls.append(n)

        @T.prim_func
        def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(n):
                    B[i] = A[i] * 3

        return main

    @tilelang.jit(out_idx=-1, target="cpu")
    def tripled(n):
        return build(n)

    kernel = tripled(16)
    assert tripled.mode == "lazy" and calls == [16]
    assert torch.equal(kernel(torch.ones(16)), torch.full((16,), 3.0))


@pytest.mark.parametrize("mode", ["eager", "auto"])
def test_explicit_modes(mode):
    axpy_pair = make_axpy_pair(mode=mode, target="cpu")
    w, z = axpy_pair(torch.ones(4), torch.ones(4), 2.0)
    assert torch.equal(z, torch.full((4,), 3.0)) and axpy_pair.mode == "eager"
    add_one = add_one_factory(mode="lazy" if mode == "eager" else mode)
    assert isinstance(add_one(8), tilelang.JITKernel) and add_one.mode == "lazy"


def test_mode_set_as_attribute_like_upstream():
    add_one = add_one_factory()
    add_one.mode = "lazy"
    assert isinstance(add_one(8), tilelang.JITKernel)


def test_mode_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        tilelang.jit(mode="fast")(lambda n: n)
    eager_with_out_idx = make_matmul_relu(out_idx=[-1], target="cpu")
    with pytest.raises(ValueError, match="out_idx is only supported in lazy mode"):
        eager_with_out_idx(
            torch.ones(16, 16, dtype=torch.float16), torch.ones(16, 16, dtype=torch.float16)
        )
    forced_lazy = make_axpy_pair(mode="lazy", target="cpu")
    with pytest.raises(
        tilelang.TraceError, match=r"T.const\(\) is only valid in the body of an eager"
    ):
        forced_lazy(torch.ones(4), torch.ones(4), 1.0)


# --------------------------------------------------------------------------- factory API
def test_factory_compile_and_kernel_source():
    add_one = add_one_factory()
    kernel = add_one.compile(100)
    assert kernel is add_one(100) is add_one.compile(N=100)
    assert add_one.compile(100) is kernel
    src = add_one.get_kernel_source(100)
    assert src == kernel.get_kernel_source() and "main" in src
    assert add_one.get_kernel_source(101) != src


def test_factory_par_compile():
    add_one = add_one_factory()
    kernels = add_one.par_compile(
        [{"N": 64}, (65, 16), {"N": 66, "dtype": "float16"}], num_workers=2
    )
    assert [type(k) for k in kernels] == [tilelang.JITKernel] * 3
    assert kernels[0] is add_one(64) and kernels[1] is add_one(65, 16)
    assert torch.equal(
        kernels[2](torch.zeros(66, dtype=torch.float16)), torch.ones(66, dtype=torch.float16)
    )
    with pytest.raises(TypeError):
        add_one.par_compile([{"N": 64, "dtype": "nope"}])
    mixed = add_one.par_compile([{"N": 64, "dtype": "nope"}, {"N": 67}], ignore_error=True)
    assert mixed[0] is None and isinstance(mixed[1], tilelang.JITKernel)
    with pytest.raises(ValueError, match="invalid config type"):
        add_one.par_compile([[64]])


def test_module_par_compile_and_debug_root_path(tmp_path):
    add_one = add_one_factory(debug_root_path=str(tmp_path))
    funcs = [add_one.get_tir(n) for n in (8, 9)]
    kernels = tilelang.par_compile(funcs, out_idx=[-1], target="cpu", num_workers=2)
    assert torch.equal(kernels[1](torch.zeros(9)), torch.ones(9))
    add_one.compile(10)
    assert (tmp_path / "tilelang_jit_kernel_add_one.c").read_text()
    assert "def main" in (tmp_path / "tilelang_jit_program_add_one.py").read_text()


# --------------------------------------------------------------------------- argument errors
@pytest.mark.parametrize("cached", [False, True])
def test_const_mismatch_names_both_arguments(cached):
    matmul_relu, a, b = _mm() if cached else (make_matmul_relu(target="cpu"), None, None)
    a = torch.randn(20, 12, dtype=torch.float16)
    bad_b = torch.randn(13, 9, dtype=torch.float16)
    line = _line_of("B: T.Tensor((K, N), T.float16)", make_matmul_relu)
    with pytest.raises(tilelang.KernelArgumentError) as info:
        matmul_relu(a, bad_b, 16, 16, 16)
    msg = str(info.value)
    assert "argument 'B': dim 0 is K=13" in msg and "argument 'A' dim 1 gives K=12" in msg
    assert f"eager_kernels.py:{line}" in msg


@pytest.mark.parametrize(
    "case,match",
    [
        (
            "rank",
            r"argument 'B': expected 2 dimensions \(T.Tensor\(\(K, N\), float16\) at .*eager_kernels.py:\d+\), got shape \[12\]",
        ),
        ("dtype", r"argument 'A': expected dtype float16 .*, got float32"),
        ("device", r"argument 'A': expected a CPU tensor, got one on meta"),
        ("scalar", r"argument 'B': expected a tensor .*, got int"),
        ("view", r"argument 'B': expected a contiguous tensor .*got strides \(1, 12\)"),
    ],
)
@pytest.mark.parametrize("cached", [False, True])
def test_bad_arguments(case, match, cached):
    """Each bad call names the argument; after a good call with the same shapes (the
    cached path, where the kernel itself refuses), the explanation is the same."""
    matmul_relu, a, b = _mm() if cached else (make_matmul_relu(target="cpu"), None, None)
    a = torch.randn(20, 12, dtype=torch.float16)
    b = torch.randn(12, 9, dtype=torch.float16)
    args = {
        "rank": (a, torch.randn(12, dtype=torch.float16)),
        "dtype": (a.float(), b),
        "device": (a.to("meta"), b),
        "scalar": (a, 3),
        "view": (a, torch.randn(9, 12, dtype=torch.float16).t()),
    }[case]
    with pytest.raises(tilelang.KernelArgumentError, match=match):
        matmul_relu(*args, 16, 16, 16)


def test_call_form_errors():
    matmul_relu, a, b = _mm()
    with pytest.raises(TypeError, match="missing a required argument: 'B'"):
        matmul_relu(a)
    with pytest.raises(TypeError, match="too many positional arguments"):
        matmul_relu(a, b, 16, 16, 16, 5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'blockM'"):
        matmul_relu(a, b, blockM=16)
    with pytest.raises(tilelang.KernelArgumentError, match="cannot bind T.const 'K'.*pass K=<int>"):
        matmul_relu.compile(M=16, N=16)
    with pytest.raises(tilelang.KernelArgumentError, match="T.const M: expected an int"):
        matmul_relu.compile(M="16", N=16, K=16)
    with pytest.raises(
        tilelang.KernelArgumentError, match="argument 'A': dim 0 is M=20.*keyword M=32"
    ):
        matmul_relu(a, b, 16, 16, 16, M=32)


def test_tensor_for_an_unannotated_parameter():
    @tilelang.jit(target="cpu")
    def forgot(A, B):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        C = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                C[i] = A[i] + B[i]
        return C

    with pytest.raises(
        TypeError, match="argument 'B' is a tensor, but parameter 'B' is not annotated"
    ):
        forgot(torch.ones(4), torch.ones(4))


def test_const_bound_only_by_keyword():
    """A T.const that no input dimension carries is given as a keyword."""

    @tilelang.jit(target="cpu")
    def tile_rows(A, block: int = 8):
        N, R = T.const("N, R")
        A: T.Tensor((N,), T.float32)
        B = T.empty((R, N), T.float32)
        with T.Kernel(R, threads=32) as bx:
            for i in T.Parallel(N):
                B[bx, i] = A[i]
        return B

    a = torch.arange(5, dtype=torch.float32)
    assert torch.equal(tile_rows(a, R=3), a.repeat(3, 1))
    assert torch.equal(tile_rows(a, R=3), a.repeat(3, 1))
    with pytest.raises(tilelang.KernelArgumentError, match="cannot bind T.const 'R'"):
        tile_rows(a)


# --------------------------------------------------------------------------- body errors
def test_body_errors_name_the_line():
    @tilelang.jit(target="cpu")
    def uses_before_annotation(A):
        N = T.const("N")
        x = A.shape  # noqa: F841
        A: T.Tensor((N,), T.float32)

    @tilelang.jit(target="cpu")
    def returns_input(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=32):
            pass
        return A

    @tilelang.jit(target="cpu")
    def forgets_output(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)  # noqa: F841
        with T.Kernel(1, threads=32):
            pass

    @tilelang.jit(target="cpu")
    def bad_copy(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((4, 4), T.float32)
            F = T.alloc_fragment((2, 2), T.float32)
            T.copy(S, F)
        return B

    a = torch.ones(8)
    with pytest.raises(tilelang.TraceError) as info:
        uses_before_annotation(a)
    assert f"{THIS}:{_line_of('x = A.shape', uses_before_annotation.fn)}" in str(info.value)
    assert "'A' is used before its annotation" in str(info.value)
    with pytest.raises(
        tilelang.TraceError,
        match=r"returns A: an eager kernel returns only tensors declared with T.empty",
    ):
        returns_input(a)
    with pytest.raises(tilelang.TraceError) as info:
        forgets_output(a)
    assert f"{THIS}:{_line_of('B = T.empty', forgets_output.fn)}" in str(info.value)
    assert "is never returned" in str(info.value)
    with pytest.raises(tilelang.TileLangError) as info:
        bad_copy(a)
    assert f"{THIS}:{_line_of('T.copy(S, F)', bad_copy.fn)}" in str(info.value)
    assert "different tile shapes" in str(info.value)


def test_eager_names_outside_a_jit_body():
    with pytest.raises(tilelang.TraceError, match=r"T.const\(\) is only valid"):
        T.const("M")
    with pytest.raises(tilelang.TraceError, match=r"T.empty\(\) is only valid"):
        T.empty((4,), T.float32)
