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
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.testing.cuda_emulator import emulate

SM80 = {"kind": "cuda", "arch": "sm_80"}
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


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


# ------------------------------------------------- integer literals in & | ^ (issue: intimm)
@pytest.mark.parametrize("dtype", ["int64", "uint32", "uint64"])
def test_bitwise_ops_type_python_int_like_the_operand_cpu(dtype, rng):
    """``x & 0xFFFFFFF0`` / ``x | 2**40`` / ``lit ^ x``: the literal takes x's type (it used to
    be squeezed into 32 bits: wrapped silently for int64, a raw TIRx check for uint)."""
    n = 11
    bits = int(dtype.removeprefix("u").removeprefix("int"))
    lits = {
        "int64": (2**40 + 7, 0x80000001, -(2**35) - 3),
        "uint32": (0xFFFFFFF0, 0x80000001, 0xDEADBEEF),
        "uint64": (2**63 + 5, 0xFFFFFFFF00000000, 2**40 + 3),
    }[dtype]
    a_lit, o_lit, x_lit = lits

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n, 5), dtype)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                B[i, 0] = A[i] & a_lit
                B[i, 1] = A[i] | o_lit
                B[i, 2] = x_lit ^ A[i]
                B[i, 3] = T.bitwise_and(A[i], a_lit)
                B[i, 4] = (A[i] ^ x_lit) & o_lit

    np_dtype = np.dtype(dtype)
    raw = rng.integers(0, 2**62, size=n, dtype=np.int64).astype(np.uint64) * 3
    a = raw.astype(np_dtype) if dtype != "int64" else (raw.astype(np.int64) - 2**61)
    out = np.zeros((n, 5), dtype=np_dtype)
    a_t, out_t = torch.from_numpy(a), torch.from_numpy(out)
    tilelang.compile(main, target="cpu")(a_t, out_t)
    py = [int(v) for v in a]
    mask = (1 << bits) - 1

    def wrap(v):  # Python int -> the dtype's value (two's complement for int64)
        v &= mask
        return v - (1 << bits) if dtype == "int64" and v >> (bits - 1) else v

    ref = [
        [
            wrap(v & a_lit),
            wrap(v | o_lit),
            wrap(x_lit ^ v),
            wrap(v & a_lit),
            wrap((v ^ x_lit) & o_lit),
        ]
        for v in py
    ]
    assert [[int(x) for x in row] for row in out_t.numpy()] == ref


def test_bitwise_literal_that_does_not_fit_is_a_clear_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = A[i] & 0x80000000

        return main

    with pytest.raises(tilelang.TileLangError, match="2147483648 does not fit .* int32") as info:
        make()
    assert f":{line_of(make, 'A[i] & 0x80000000')}" in str(info.value)


def test_upstream_intimm_expressions():
    """Upstream's test_tilelang_intimm, outside a kernel: literals of each integer type's
    range build, and ``&`` with the full mask keeps the operand's type."""
    assert T.uint32(0xFFFFFFFF).value == 0xFFFFFFFF
    assert T.int64(-(2**63)).value == -(2**63)
    for make, mask in ((T.int32, 0x7FFFFFFF), (T.uint32, 0xFFFFFFFF), (T.int64, 2**63 - 1)):
        var = make()
        expr = var & mask
        assert str(expr.ty) == str(var.ty)
        assert expr.b.value == mask


# ------------------------------------------------------------------------ expr.dtype
def test_scalar_expression_dtype_drives_casts_and_allocations_cpu(rng):
    """``x.dtype`` of loads, arithmetic, vars and intrinsics (upstream's ``PrimExpr.dtype``),
    used the way upstream macros use it: casts and buffers typed after an expression."""
    n, block = 45, 16

    @T.macro
    def scaled(src_value, scale):
        acc = T.alloc_var(T.float32 if src_value.dtype == "float16" else src_value.dtype)
        acc = T.cast(src_value, acc.dtype) * scale
        return acc

    @T.prim_func
    def main(
        A: T.Tensor((n,), "float16"), I: T.Tensor((n,), "int32"), B: T.Tensor((n, 3), "float64")
    ):
        with T.Kernel(T.ceildiv(n, block), threads=1) as bx:
            buf = T.alloc_local((block,), A[0].dtype)
            for i in T.serial(block):
                r = bx * block + i
                if r < n:
                    x = A[r] * T.cast(2, A.dtype)
                    buf[i] = x
                    B[r, 0] = T.cast(scaled(buf[i], 0.5), B.dtype)
                    B[r, 1] = T.cast(T.exp(T.cast(x, "float32")).dtype == "float32", "float64")
                    B[r, 2] = T.cast(I[r] + T.cast(1, I[r].dtype), "float64")

    a = rng.standard_normal(n).astype(np.float16)
    ints = rng.integers(-100, 100, n).astype(np.int32)
    out = torch.zeros((n, 3), dtype=torch.float64)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), torch.from_numpy(ints), out)
    want_0 = (a.astype(np.float64) * 2).astype(np.float16).astype(np.float64) * 0.5
    np.testing.assert_allclose(out[:, 0].numpy(), want_0, rtol=1e-6)
    np.testing.assert_array_equal(out[:, 1].numpy(), np.ones(n))
    np.testing.assert_array_equal(out[:, 2].numpy(), ints.astype(np.float64) + 1)


def test_scalar_expression_dtype_outside_a_kernel():
    x = T.float16()
    assert str(x.dtype) == "float16" and x.dtype == "float16"
    assert (x + 1).dtype == "float16"
    assert T.exp(T.float32()).dtype == "float32"


# ------------------------------------------------------- fast math on a non-float operand
@pytest.mark.parametrize("name", ["__exp", "__log2", "__sin"])
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool", "float8_e4m3fn"])
def test_fast_math_rejects_non_float_operand(name, dtype):
    """Upstream's TypeError for ``T.__exp`` & co. on a type without a fast intrinsic."""
    with pytest.raises(
        TypeError, match=rf"T\.{name} only supports floating-point inputs, but got {dtype}"
    ):
        getattr(T, name)(getattr(T, dtype)())


def test_fast_math_matches_precise_function_cpu(rng):
    n = 37

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n, 3), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                B[i, 0] = T.__exp(A[i])
                B[i, 1] = T.__log2(T.abs(A[i]) + 0.5)
                B[i, 2] = T.__sin(A[i])

    a = rng.standard_normal(n).astype(np.float32)
    out = torch.zeros((n, 3), dtype=torch.float32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    a64 = a.astype(np.float64)
    want = np.stack([np.exp(a64), np.log2(np.abs(a64) + 0.5), np.sin(a64)], 1)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=2e-6)


# ---------------------------------------------- T.Kernel(threads=n): one block (issue 1719)
def test_kernel_without_grid_dimensions_is_one_block_cpu(rng):
    """``T.Kernel(threads=n)`` launches one block (upstream accepts it); its frame yields no
    block index."""
    m, n = 19, 7

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), out: T.Tensor((m,), "float32")):
        with T.Kernel(threads=32) as nothing:
            T.device_assert(len(nothing) == 0)
            tile = T.alloc_fragment((m, n), "float32")
            row = T.alloc_fragment((m,), "float32")
            T.copy(A, tile)
            T.reduce_sum(tile, row, dim=1)
            T.copy(row, out)

    a = rng.standard_normal((m, n)).astype(np.float32)
    out = torch.zeros(m, dtype=torch.float32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


def test_kernel_without_tensor_parameters_compiles_and_runs_cpu():
    """A kernel over shared/fragment buffers and scalars only (upstream's issue 1719 and 1690
    programs compile such kernels): the CPU build used to fail inside TIRx ("Unknown device
    id"). A wrong sum trips the kernel's device assertion."""

    @T.prim_func
    def main(n: T.int32):
        with T.Kernel(threads=32):
            tile = T.alloc_fragment((4, 9), "int32")
            total = T.alloc_fragment((4,), "int32")
            for i, j in T.Parallel(4, 9):
                tile[i, j] = n * i + j
            T.reduce_sum(tile, total, dim=1)
            for i in T.serial(4):
                T.device_assert(total[i] == 9 * n * i + 36, "wrong row sum")

    kernel = tilelang.compile(main, target="cpu")
    kernel(5)
    kernel(-3)

    @tilelang.jit
    def no_arguments():
        with T.Kernel():
            s = T.alloc_shared((8, 8), T.float16)
            f = T.alloc_fragment((8, 8), T.float32)
            T.clear(f)
            T.copy(f, s)

    no_arguments.compile()


# ---------------------------------------------------------- T.clamp(min_val=, max_val=)
def test_clamp_takes_upstreams_keywords_cpu(rng):
    n, block = 70, 32

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n, 2), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < n:
                    B[bx * block + i, 0] = T.clamp(A[bx * block + i], min_val=-0.5, max_val=0.75)
                    B[bx * block + i, 1] = T.clamp(dst=A[bx * block + i], min_val=0.0, max_val=1.0)

    a = rng.standard_normal(n).astype(np.float32)
    out = torch.zeros((n, 2), dtype=torch.float32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    a64 = a.astype(np.float64)
    np.testing.assert_array_equal(out[:, 0].numpy(), np.clip(a64, -0.5, 0.75))
    np.testing.assert_array_equal(out[:, 1].numpy(), np.clip(a64, 0.0, 1.0))


# ------------------------------------- T.sync_threads(barrier_id, arrive_count) (issue 2188)
def named_barrier_handoff(n):
    """Upstream issue 2188's program: warp 0 writes a slot and arrives at barrier 10; warp 1
    waits there with T.sync_threads(10, 64), reads it, then releases barrier 11."""

    @T.prim_func
    def main(inp: T.Tensor((n,), "int32"), out: T.Tensor((n,), "int32")):
        with T.Kernel(n, threads=64) as bx:
            tx = T.get_thread_binding()
            slot = T.alloc_shared((1,), "int32")
            if tx < 32:
                if tx == 0:
                    slot[0] = inp[bx] * 3 + 1
                T.named_barrier_arrive(10, 64)
                T.sync_threads(11, 64)
            else:
                T.sync_threads(10, 64)
                if tx == 32:
                    out[bx] = slot[0]
                T.named_barrier_arrive(11, 64)

    return main


def test_sync_threads_with_barrier_id_is_a_named_barrier_emulated(rng):
    n = 5
    inp = rng.integers(-1000, 1000, n).astype(np.int32)
    low = cuda_pipeline.lower(named_barrier_handoff(n), SM80)
    _, out = emulate(low, inp, np.zeros(n, np.int32), race_check=True)
    np.testing.assert_array_equal(out, inp.astype(np.int64) * 3 + 1)


@pytest.mark.cuda
@needs_gpu
def test_sync_threads_with_barrier_id_is_a_named_barrier_cuda(rng):
    n = 5
    inp = torch.from_numpy(rng.integers(-1000, 1000, n).astype(np.int32)).cuda()
    out = torch.zeros(n, dtype=torch.int32, device="cuda")
    tilelang.compile(named_barrier_handoff(n), target="cuda")(inp, out)
    torch.testing.assert_close(out.cpu(), inp.cpu() * 3 + 1)


def test_sync_threads_arrive_count_without_barrier_id_is_a_clear_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=64):
                T.sync_threads(arrive_count=64)

        return main

    with pytest.raises(tilelang.TileLangError, match="needs a barrier_id") as info:
        make()
    assert f":{line_of(make, 'T.sync_threads(arrive_count=64)')}" in str(info.value)


# ------------------------------------------------------ chained assignment (chain_equal)
def test_chained_assignment_to_tensors_and_names_cpu(rng):
    """``A[i] = B[i] = C[i] = v`` and ``x = A[i] = v`` (upstream's chain_equal test): the value
    is evaluated once and stored to every target."""
    n, block = 50, 16

    @T.prim_func
    def main(
        S: T.Tensor((n,), "float32"),
        A: T.Tensor((n,), "float32"),
        B: T.Tensor((n,), "float32"),
        C: T.Tensor((n,), "float32"),
    ):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            for lane in T.Parallel(block):
                idx = bx * block + lane
                if idx < n:
                    A[idx] = B[idx] = C[idx] = S[idx] * 2
                    x = C[idx] = C[idx] + S[idx]
                    B[idx] = B[idx] + x

    s = rng.standard_normal(n).astype(np.float32)
    a, b, c = (torch.zeros(n, dtype=torch.float32) for _ in range(3))
    tilelang.compile(main, target="cpu")(torch.from_numpy(s), a, b, c)
    s64 = s.astype(np.float64)
    np.testing.assert_allclose(a.numpy(), 2 * s64, rtol=1e-6)
    np.testing.assert_allclose(c.numpy(), 3 * s64, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), 5 * s64, rtol=1e-6)


# ------------------------------------------- T.atomic_add(tile, scalar) (atomic_*_expr tests)
def scalar_into_tiles(m, n, block_m, block_n, kind, value):
    fn = getattr(T, f"atomic_{kind}")

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(m, block_m), T.ceildiv(n, block_n), threads=32) as (bx, by):
            tile = A[bx * block_m : (bx + 1) * block_m, by * block_n : (by + 1) * block_n]
            if value == "tensor":
                fn(tile, S[0] * 2.0)  # an expression: a scalar (S[0] alone is a tile start)
            else:
                fn(tile, value)
            fn(A[bx * block_m, by * block_n : (by + 1) * block_n], 0.25)  # one row of the tile

    return main


def scalar_into_tiles_reference(a, block_m, block_n, kind, value):
    out = a.astype(np.float64).copy()
    op = {"add": np.add, "max": np.maximum, "min": np.minimum}[kind]
    out = op(out, value)
    for r in range(0, a.shape[0], block_m):
        out[r] = op(out[r], 0.25)
    return out


@pytest.mark.parametrize("kind", ["add", "max", "min"])
def test_atomic_scalar_into_tile_updates_every_element_cpu(kind, rng):
    """Upstream's ``T.atomic_add(A[tile], 1.0)``: the scalar goes into every element of the
    tile (it went into the tile's first element only, silently)."""
    m, n, bm, bn = 40, 26, 16, 8
    a = rng.standard_normal((m, n)).astype(np.float32)
    s = np.array([0.5], np.float32)
    a_t = torch.from_numpy(a.copy())
    tilelang.compile(scalar_into_tiles(m, n, bm, bn, kind, "tensor"), target="cpu")(
        a_t, torch.from_numpy(s)
    )
    want = scalar_into_tiles_reference(a, bm, bn, kind, 1.0)
    np.testing.assert_allclose(a_t.numpy(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["add", "max"])
def test_atomic_scalar_into_tile_updates_every_element_emulated(kind, rng):
    m, n, bm, bn = 40, 26, 16, 8
    a = rng.standard_normal((m, n)).astype(np.float32)
    low = cuda_pipeline.lower(scalar_into_tiles(m, n, bm, bn, kind, 1.0), SM80)
    out, _ = emulate(low, a.copy(), np.zeros(1, np.float32))
    want = scalar_into_tiles_reference(a, bm, bn, kind, 1.0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.cuda
@needs_gpu
def test_atomic_scalar_into_tile_updates_every_element_cuda(rng):
    m, n, bm, bn = 40, 26, 16, 8
    a = rng.standard_normal((m, n)).astype(np.float32)
    a_t = torch.from_numpy(a.copy()).cuda()
    kernel = tilelang.compile(scalar_into_tiles(m, n, bm, bn, "add", 1.0), target="cuda")
    kernel(a_t, torch.zeros(1, device="cuda"))
    want = scalar_into_tiles_reference(a, bm, bn, "add", 1.0)
    np.testing.assert_allclose(a_t.cpu().numpy(), want, rtol=1e-6, atol=1e-6)


# ------------------------------------------- profiler.assert_allclose and NaN (view tests)
def bits_as_half(n):
    @T.prim_func
    def main(A: T.Tensor((n,), "int16"), B: T.Tensor((n,), "float16")):
        with T.Kernel(1, threads=32):
            T.copy(T.view(A, (n,), dtype="float16"), B)

    return main


def test_profiler_assert_allclose_matches_nan_where_the_reference_has_nan(rng):
    """Upstream's view test reads random bits as float16, NaNs included: NaN where the
    reference has NaN matches (upstream's ``equal_nan``); a NaN the reference lacks fails."""
    n = 300
    bits = rng.integers(-(2**15), 2**15, n).astype(np.int16)
    bits[:20] = 0x7E00  # NaN codes for sure
    kernel = tilelang.compile(bits_as_half(n), out_idx=-1, target="cpu")
    profiler = kernel.get_profiler()
    a = torch.from_numpy(bits)
    profiler.assert_allclose(lambda A: A.view(torch.float16), input_tensors=[a])

    def zero_where_nan(A):
        ref = A.view(torch.float16).clone()
        ref[:1] = 0
        return ref

    with pytest.raises(AssertionError, match="differ"):
        profiler.assert_allclose(zero_where_nan, input_tensors=[a])


# ------------------------------------------------- with T.Kernel(n) as (bx,): (issue 830)
def test_one_dimension_launch_unpacks_as_a_one_tuple_cpu(rng):
    """``with T.Kernel(n, threads=...) as (bx,):`` (upstream's tests write it): the single block
    index unpacks as a 1-tuple; several dimensions unpack as before. It used to fail inside
    TIRx ("PrimType does not support subscript")."""
    m, n, block = 37, 5, 8

    @T.prim_func
    def main(A: T.Tensor((m, n), "float32"), B: T.Tensor((m, n), "float32")):
        with T.Kernel(T.ceildiv(m, block), threads=1) as (bx,):
            for i, j in T.grid(block, n):
                if bx * block + i < m:
                    B[bx * block + i, j] = A[bx * block + i, j] * 3.0
        with T.Kernel(m, n, threads=1) as [r, c]:
            B[r, c] = B[r, c] + 1.0

    a = rng.standard_normal((m, n)).astype(np.float32)
    out = torch.zeros((m, n), dtype=torch.float32)
    tilelang.compile(main, target="cpu")(torch.from_numpy(a), out)
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6)


# ----------------------------------------- T.reduce_max(..., nan_propagate=) (reduce_maxmin_nan)
def nan_reduce_kernel(rows, cols, dtype, nan_propagate):
    @T.prim_func
    def main(A: T.Tensor((rows, cols), dtype), out: T.Tensor((rows, 3), dtype)):
        with T.Kernel(1, threads=32):
            tile = T.alloc_fragment((rows, cols), dtype)
            red = T.alloc_fragment((rows,), dtype)
            T.copy(A, tile)
            T.reduce_max(tile, red, dim=1, nan_propagate=nan_propagate)
            for i in T.Parallel(rows):
                out[i, 0] = red[i]
            T.reduce_min(tile, red, 1, True, 1, nan_propagate)  # upstream's positional order
            for i in T.Parallel(rows):
                out[i, 1] = red[i]
            T.reduce_absmax(tile, red, dim=1, nan_propagate=nan_propagate)
            for i in T.Parallel(rows):
                out[i, 2] = red[i]

    return main


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("nan_propagate", [False, True])
def test_reduce_nan_propagate_keyword_cpu(dtype, nan_propagate, rng):
    """``nan_propagate=True``: a row with a NaN reduces to NaN; the default skips NaN inputs
    (upstream's CUDA ``fmaxf``/``fminf``). bfloat16 min/max used to fail inside the compiler
    ("Cannot decide infinity for type bfloat16")."""
    rows, cols = 9, 13
    a = rng.standard_normal((rows, cols))
    a[2, 5] = a[6, 0] = a[6, 12] = np.nan
    t = torch.from_numpy(a).to(getattr(torch, dtype))
    out = torch.zeros((rows, 3), dtype=getattr(torch, dtype))
    tilelang.compile(nan_reduce_kernel(rows, cols, dtype, nan_propagate), target="cpu")(t, out)
    ref = t.double().numpy()
    reducers = (np.max, np.min, lambda x, axis: np.max(np.abs(x), axis=axis))
    nan_safe = (np.nanmax, np.nanmin, lambda x, axis: np.nanmax(np.abs(x), axis=axis))
    want = np.stack([f(ref, axis=1) for f in (reducers if nan_propagate else nan_safe)], 1)
    np.testing.assert_array_equal(out.double().numpy(), want)


# ---------------------------------------------------- fp8 constants on the CPU (infinity test)
FP8_CONSTANTS = [0.3, 448.0, -2.5, 1e-3, -3e-4, 0.0, float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("dtype", ["float8_e5m2", "float8_e4m3fn"])
def test_fp8_constants_match_torch_cpu(dtype):
    """fp8 constants (``T.infinity("float8_e5m2")``, NaN, subnormals) store torch's code: TIRx
    turned inf into 1.0, NaN into 1.5 and flushed e4m3fn subnormals to 0 (upstream's
    test_infinity)."""
    n = len(FP8_CONSTANTS)
    has_inf = dtype == "float8_e5m2"
    values = [v for v in FP8_CONSTANTS if has_inf or abs(v) != float("inf")]

    @T.prim_func
    def main(B: T.Tensor((n,), dtype), F: T.Tensor((4,), dtype)):
        with T.Kernel(1, threads=1):
            for k, v in enumerate(values):
                B[k] = T.cast(v, dtype)
            T.fill(F, T.infinity(dtype) if has_inf else T.max_value(dtype))

    out = torch.zeros(n, dtype=getattr(torch, dtype))
    fill = torch.zeros(4, dtype=getattr(torch, dtype))
    tilelang.compile(main, target="cpu")(out, fill)
    want = torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype))
    assert out[: len(values)].view(torch.uint8).tolist() == want.view(torch.uint8).tolist()
    top = float("inf") if has_inf else 448.0
    assert fill.double().tolist() == [top] * 4


# ------------------------------------------------ T.round(x, rounding_mode) (issue 2635)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_round_modes_cpu(dtype, rng):
    """``T.round(x, "ties-away-from-zero")`` and the default ties-to-even, against numpy in
    float64 (halves, values just below a half, negatives)."""
    vals = np.concatenate(
        [
            np.arange(-4.5, 5.0, 1.0),
            [0.49999997, -0.49999997, 2.4999, -7.25],
            rng.standard_normal(21) * 6,
        ]
    )
    n = len(vals)

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n, 2), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                B[i, 0] = T.round(A[i], "ties-away-from-zero")
                B[i, 1] = T.round(A[i])

    a = torch.from_numpy(vals).to(getattr(torch, dtype))
    out = torch.zeros((n, 2), dtype=getattr(torch, dtype))
    tilelang.compile(main, target="cpu")(a, out)
    x = a.double().numpy()
    away = np.where(np.abs(x - np.trunc(x)) >= 0.5, np.trunc(x) + np.sign(x), np.trunc(x))
    np.testing.assert_array_equal(out[:, 0].double().numpy(), away)
    np.testing.assert_array_equal(out[:, 1].double().numpy(), np.round(x))


def test_round_unknown_mode_is_a_clear_error():
    def make():
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                A[0] = T.round(A[1], "half-up")

        return main

    with pytest.raises(tilelang.TileLangError, match="rounding_mode must be") as info:
        make()
    assert f":{line_of(make, 'T.round(A[1], ')}" in str(info.value)
