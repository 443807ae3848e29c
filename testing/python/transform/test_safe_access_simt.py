"""SIMT code (indices built from the thread index, outside ``T.Parallel``) that reaches past a
global tensor: as upstream's LegalizeSafeMemoryAccess, the store is skipped and the load
reads zero on the CPU backend. It used to write past the tensor (upstream's HISA
``clean_and_maintain_logits`` with a row shorter than its block: heap corruption)."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.transform.legalize_safe_access import legalize_safe_memory_access


@tilelang.jit(target="cpu")
def mask_rows(rows, cols, threads=64, block=256):
    """Upstream's clean-and-maintain pattern: each block walks its row in chunks of
    ``block`` and writes +-inf outside ``[ks, ke)``, never checking the row's end."""

    @T.prim_func
    def main(
        L: T.Tensor((rows, cols), T.float32),
        KS: T.Tensor((rows,), T.int32),
        KE: T.Tensor((rows,), T.int32),
    ):
        with T.Kernel(rows, threads=threads) as bx:
            tx = T.get_thread_binding()
            ks = KS[bx]
            ke = KE[bx]
            for n in T.serial(T.ceildiv(cols, block)):
                for k in T.serial(block // threads):
                    idx = n * block + k * threads + tx
                    if idx == ks or idx == ke - 1:
                        L[bx, idx] = T.infinity(T.float32)
                    if idx < ks or idx >= ke:
                        L[bx, idx] = -T.infinity(T.float32)

    return main


@tilelang.jit(target="cpu")
def shifted_sum(threads=32):
    n = T.dynamic("n")  # (a static n makes the overreach a compile error: check_bounds)

    @T.prim_func
    def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            i = bx * threads + tx
            # reads past A's end read 0, writes past B's end are skipped
            B[i] = A[i] + A[i + 1] * 2.0

    return main


@pytest.mark.parametrize("rows,cols", [(5, 300), (3, 77)])
def test_simt_stores_past_a_row_are_skipped(rows, cols):
    rng = np.random.default_rng(rows * cols)
    storage = torch.full((rows * cols + 4096,), 7.0)  # a guard zone after the tensor
    logits = storage[: rows * cols].view(rows, cols)
    init = torch.from_numpy(rng.standard_normal((rows, cols)).astype(np.float32))
    logits.copy_(init)
    ks = torch.from_numpy(rng.integers(0, cols // 2, rows).astype(np.int32))
    ke = torch.from_numpy(rng.integers(cols // 2 + 1, cols + 1, rows).astype(np.int32))
    mask_rows(rows, cols)(logits, ks, ke)
    want = init.double().numpy().copy()
    col = np.arange(cols)[None, :]
    want[(col < ks.numpy()[:, None]) | (col >= ke.numpy()[:, None])] = -np.inf
    want[np.arange(rows), ks.numpy()] = np.inf
    want[np.arange(rows), ke.numpy() - 1] = np.inf
    np.testing.assert_array_equal(logits.double().numpy(), want)
    assert torch.all(storage[rows * cols :] == 7.0), "wrote past the tensor"


@pytest.mark.parametrize("n", [45, 64])
def test_simt_loads_past_the_end_read_zero(n):
    storage = torch.full((n + 64,), 1000.0)
    a = storage[:n]
    a.copy_(torch.randn(n))
    out_storage = torch.full((n + 64,), 5.0)
    b = out_storage[:n]
    shifted_sum()(a, b)
    ad = a.double().numpy()
    want = ad + np.append(ad[1:], 0.0) * 2.0
    np.testing.assert_allclose(b.double().numpy(), want, rtol=1e-6)
    assert torch.all(out_storage[n:] == 5.0)


def test_user_guard_is_not_doubled():
    """A store the enclosing ``if`` already bounds gets no second guard; without the ``if``
    the pass adds one."""

    def kernel(user_guard):
        n = T.dynamic("n")

        @T.prim_func
        def k(A: T.Tensor((n,), T.float32)):
            with T.Kernel(2, threads=32) as bx:
                tx = T.get_thread_binding()
                if user_guard:
                    if bx * 32 + tx < n:
                        A[bx * 32 + tx] = 1.0
                else:
                    A[bx * 32 + tx] = 1.0

        return k

    guarded = legalize_safe_memory_access(kernel(True).body, "cpu", everywhere=True).script()
    assert guarded.count("< n") == 1, guarded
    added = legalize_safe_memory_access(kernel(False).body, "cpu", everywhere=True).script()
    assert added.count("< n") == 1, added
    assert "< n" not in kernel(False).script()


def _cuda_kernels():
    """The two programs above, traced for the CUDA pipeline (static shapes: the rows kernel
    reaches 212 columns past a 300-column row's chunk; the shift reads one past the end)."""

    rows, cols, threads, block = 3, 300, 64, 256

    @T.prim_func
    def rows_kernel(
        L: T.Tensor((rows, cols), T.float32),
        KS: T.Tensor((rows,), T.int32),
        KE: T.Tensor((rows,), T.int32),
    ):
        with T.Kernel(rows, threads=threads) as bx:
            tx = T.get_thread_binding()
            for n in T.serial(T.ceildiv(cols, block)):
                for k in T.serial(block // threads):
                    idx = n * block + k * threads + tx
                    if idx < KS[bx] or idx >= KE[bx]:
                        L[bx, idx] = -T.infinity(T.float32)

    n = T.dynamic("n")

    @T.prim_func
    def shift_kernel(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            tx = T.get_thread_binding()
            i = bx * 32 + tx
            B[i] = A[i] + A[i + 1] * 2.0

    return rows_kernel, shift_kernel


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_simt_guards_on_cuda_emulated(arch):
    """CUDA guards SIMT accesses as the CPU does (the emulator fails any access outside a
    tensor); ``tl.disable_safe_memory_legalize`` leaves them as written."""
    from tilelang.backends.cuda import pipeline
    from tilelang.testing.cuda_emulator import EmulationError, emulate

    target = {"kind": "cuda", "arch": arch}
    rows_kernel, shift_kernel = _cuda_kernels()
    rng = np.random.default_rng()
    logits = rng.standard_normal((3, 300)).astype(np.float32)
    ks = rng.integers(0, 150, 3).astype(np.int32)
    ke = rng.integers(151, 301, 3).astype(np.int32)
    out = emulate(pipeline.lower(rows_kernel, target), logits.copy(), ks, ke)[0]
    want = logits.astype(np.float64)
    col = np.arange(300)[None, :]
    want[(col < ks[:, None]) | (col >= ke[:, None])] = -np.inf
    np.testing.assert_array_equal(out, want)

    a = rng.standard_normal(45).astype(np.float32)
    got = emulate(pipeline.lower(shift_kernel, target), a, np.zeros(45, np.float32))[1]
    ad = a.astype(np.float64)
    np.testing.assert_allclose(got, ad + np.append(ad[1:], 0.0) * 2.0, rtol=1e-6)

    unguarded = pipeline.lower(rows_kernel, target, {"tl.disable_safe_memory_legalize": True})
    with pytest.raises(EmulationError, match="outside shape"):
        emulate(unguarded, logits.copy(), ks, ke)
