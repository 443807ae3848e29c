"""T.atomic_addx2 / T.atomic_addx4 (2 / 4 consecutive elements, element-start, slice and
whole-tensor forms) and T.atomic_load / T.atomic_store (memory orders).

CPU: against numpy float64 with shapes that are not tile multiples and several blocks adding
into the same cells. CUDA: the generated source builds with nvcc for sm_80 and sm_90a; GPU
runs are marked cuda. ROCm / Metal: atomic_load/store are refused with a clear error."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from source_lines import line_of

import tilelang
import tilelang.language as T
from tilelang import errors
from tilelang.backends.cuda import pipeline as cuda_pipeline

SM80 = {"kind": "cuda", "arch": "sm_80"}
SM90 = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def addx_kernel(M, N, vec, dtype, reps, bM=16):
    """Out[i, j:j+vec] += A[r, i, j:j+vec] for each of ``reps`` slices r; blocks of bM rows,
    ``reps`` blocks along y all adding into the same Out."""
    addx = T.atomic_addx2 if vec == 2 else T.atomic_addx4

    @T.prim_func
    def main(A: T.Tensor((reps, M, N), dtype), Out: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, bM), reps, threads=32) as (bx, r):
            for i, j in T.Parallel(bM, N // vec):
                if bx * bM + i < M:
                    addx(Out[bx * bM + i, j * vec], A[r, bx * bM + i, j * vec])

    return main


def whole_kernel(vec, dtype):
    addx = T.atomic_addx2 if vec == 2 else T.atomic_addx4

    @T.prim_func
    def main(
        Val: T.Tensor((vec,), dtype), Dst: T.Tensor((vec,), dtype), S: T.Tensor((3, 8), dtype)
    ):
        with T.Kernel(3, threads=1) as bx:
            addx(Dst, Val)  # every block adds Val once
            addx(S[bx, 2 : 2 + vec], Val[0:vec])

    return main


@pytest.mark.parametrize("vec,dtype", [(2, "float32"), (4, "float32"), (2, "float16")])
@pytest.mark.parametrize("M,N,reps", [(37, 12, 3), (50, 20, 2)])
def test_addx_element_form(vec, dtype, M, N, reps, rng):
    a = rng.standard_normal((reps, M, N))
    out0 = rng.standard_normal((M, N))
    tdt = getattr(torch, dtype)
    A = torch.from_numpy(a).to(tdt)
    Out = torch.from_numpy(out0).to(tdt)
    tilelang.compile(addx_kernel(M, N, vec, dtype, reps), target="cpu")(A, Out)
    ref = torch.from_numpy(out0).to(tdt).double().numpy() + A.double().numpy().sum(0)
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(Out.double().numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("vec", [2, 4])
def test_addx_whole_tensor_and_slice(vec, rng):
    val = torch.from_numpy(rng.standard_normal(vec)).float()
    dst0 = torch.from_numpy(rng.standard_normal(vec)).float()
    s0 = torch.from_numpy(rng.standard_normal((3, 8))).float()
    dst, s = dst0.clone(), s0.clone()
    tilelang.compile(whole_kernel(vec, "float32"), target="cpu")(val, dst, s)
    torch.testing.assert_close(dst.double(), dst0.double() + 3 * val.double())
    ref = s0.double().clone()
    ref[:, 2 : 2 + vec] += val.double()
    torch.testing.assert_close(s.double(), ref)


def test_addx_errors():
    def bad_count():
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.atomic_addx2(B[0:4], A[0:4])

        return main

    def bad_value():
        @T.prim_func
        def main(B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=1):
                T.atomic_addx4(B[0], 1.0)

        return main

    def bad_dtype():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                T.atomic_addx2(B[0], A[0])

        return main

    for make, words in [
        (bad_count, "must hold 2 consecutive elements"),
        (bad_value, "must be a tensor element"),
        (bad_dtype, "must be float16, bfloat16 or float32"),
    ]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()


# ------------------------------------------------------------------- atomic_load / atomic_store
def load_store_kernel(M, N, dtype, bM=16, load_order="acquire", store_order="release"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), F: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(M, bM), threads=64) as bx:
            for i, j in T.Parallel(bM, N):
                if bx * bM + i < M:
                    val = T.atomic_load(A[bx * bM + i, j], memory_order=load_order)
                    T.atomic_store(B[bx * bM + i, j], val * 2 + 1, memory_order=store_order)
            tx = T.get_thread_binding()
            if bx == 0 and tx == 0:  # one thread: a read-modify-write by 64 would race
                T.atomic_store(F, T.atomic_load(F[0], "relaxed") + 7)

    return main


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("orders", [("acquire", "release"), ("seq_cst", "seq_cst"), ("relaxed", "relaxed")])  # fmt: skip
def test_load_store_cpu(dtype, orders, rng):
    M, N = 37, 9
    a = rng.standard_normal((M, N)) * 50
    A = torch.from_numpy(a).to(getattr(torch, dtype))
    B = torch.zeros_like(A)
    F = torch.tensor([int(rng.integers(0, 100))], dtype=torch.int32)
    f0 = int(F[0])
    kernel = load_store_kernel(M, N, dtype, load_order=orders[0], store_order=orders[1])
    tilelang.compile(kernel, target="cpu")(A, B, F)
    np.testing.assert_allclose(B.double().numpy(), A.double().numpy() * 2 + 1, rtol=1e-6)
    assert int(F[0]) == f0 + 7


def test_load_store_errors():
    def bad_order():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                A[1] = T.atomic_load(A[0], memory_order="release")

        return main

    def bad_store_order():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                T.atomic_store(A[0], 1, memory_order="acquire")

        return main

    def bad_dtype():
        @T.prim_func
        def main(A: T.Tensor((8,), "float16")):
            with T.Kernel(1, threads=1):
                A[1] = T.atomic_load(A[0])

        return main

    def bad_shape():
        @T.prim_func
        def main(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1):
                T.atomic_store(A, 3)

        return main

    for make, words in [
        (bad_order, "memory_order must be one of"),
        (bad_store_order, "memory_order must be one of"),
        (bad_dtype, "atomic loads/stores take"),
        (bad_shape, "must be one element"),
    ]:
        with pytest.raises(tilelang.TileLangError, match=words):
            make()


@pytest.mark.parametrize("target", ["hip", "metal"])
def test_load_store_refused_on_vendor_targets(target, monkeypatch):
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    kind = "rocm" if target == "hip" else "metal"
    with pytest.raises(errors.CompileError) as info:
        tilelang.lower(load_store_kernel(40, 8, "float32"), target=target)
    message = str(info.value)
    assert f"is not supported on the {kind} target" in message
    assert "T.atomic_load" in message or "T.atomic_store" in message
    lines = {
        line_of(load_store_kernel, "val = T.atomic_load"),
        line_of(load_store_kernel, "T.atomic_store(B"),
    }
    assert any(f"test_tilelang_language_atomic_ext.py:{n}" in message for n in lines), message


@pytest.mark.parametrize("target", ["hip", "metal"])
def test_addx_on_vendor_targets(target, monkeypatch):
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    source = tilelang.lower(addx_kernel(37, 12, 2, "float32", 2), target=target).stages["source"]
    assert source


# ----------------------------------------------------------------------------------- CUDA
@needs_nvcc
@pytest.mark.parametrize("target", [SM80, SM90], ids=["sm_80", "sm_90a"])
def test_nvcc_builds(target):
    for vec, dtype in [(2, "float32"), (4, "float32"), (2, "float16"), (2, "bfloat16")]:
        art = cuda_pipeline.build(addx_kernel(37, 12, vec, dtype, 2), target, compiler="nvcc")
        assert art.device_binary
    for dtype in ("float32", "float64", "int32", "uint64"):
        art = cuda_pipeline.build(load_store_kernel(37, 9, dtype), target, compiler="nvcc")
        assert art.device_binary
        assert "__nv_atomic_load_n" in art.kernel_source
        assert "__nv_atomic_store_n" in art.kernel_source


@pytest.mark.cuda
@pytest.mark.parametrize("vec,dtype", [(2, "float32"), (4, "float32"), (2, "float16")])
def test_addx_gpu(vec, dtype, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N, reps = 37, 12, 3
    tdt = getattr(torch, dtype)
    A = torch.from_numpy(rng.standard_normal((reps, M, N))).to(tdt)
    out0 = torch.from_numpy(rng.standard_normal((M, N))).to(tdt)
    Out = out0.cuda()
    tilelang.compile(addx_kernel(M, N, vec, dtype, reps), target="cuda")(A.cuda(), Out)
    ref = out0.double() + A.double().sum(0)
    tol = 1e-5 if dtype == "float32" else 2e-2
    torch.testing.assert_close(Out.cpu().double(), ref, rtol=tol, atol=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_load_store_gpu(dtype, rng):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M, N = 37, 9
    A = torch.from_numpy(rng.standard_normal((M, N)) * 50).to(getattr(torch, dtype))
    B = torch.zeros_like(A).cuda()
    F = torch.tensor([5], dtype=torch.int32).cuda()
    tilelang.compile(load_store_kernel(M, N, dtype), target="cuda")(A.cuda(), B, F)
    torch.testing.assert_close(B.cpu().double(), A.double() * 2 + 1)
    assert int(F[0]) == 12
