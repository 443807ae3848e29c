"""Hand-written warp-specialized kernels in upstream's explicit Hopper style (mbarrier
full/empty rings, ``T.ws`` warpgroup scopes, ``T.set_max_nreg``), for test_hopper_api.py."""

import tilelang.language as T


def make_matvec(M, K, bM=128, bK=32, stages=2, flip_parity=False):
    """``y = A @ x``: warpgroup 0 stages ``A`` tiles into a shared ring (each thread copies
    its elements, then arrives on ``full``), warpgroup 1 waits on ``full``, accumulates one
    row per thread and arrives on ``empty``. The k loop encloses both scopes (the order a
    lockstep emulator can follow). ``flip_parity`` makes the consumer wait on the wrong
    phase (a GPU would hang)."""
    nk = (K + bK - 1) // bK
    per_thread = bM * bK // 128

    @T.prim_func
    def main(
        A: T.Tensor((M, K), "float32"), x: T.Tensor((K,), "float32"), y: T.Tensor((M,), "float32")
    ):
        with T.Kernel(T.ceildiv(M, bM), threads=256) as bx:
            A_s = T.alloc_shared((stages, bM, bK), "float32")
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            acc = T.alloc_var("float32", 0.0)
            tx = T.get_thread_binding()
            for k in T.serial(nk):
                s = k % stages
                with T.ws(0):
                    T.mbarrier_wait_parity(empty[s], (k // stages + 1) % 2)
                    for r in T.serial(per_thread):
                        idx = r * 128 + tx
                        row = bx * bM + idx // bK
                        col = k * bK + idx % bK
                        A_s[s, idx // bK, idx % bK] = T.if_then_else(
                            (row < M) & (col < K), A[T.min(row, M - 1), T.min(col, K - 1)], 0.0
                        )
                    T.mbarrier_arrive(full[s])
                with T.ws(1):
                    if flip_parity:
                        T.mbarrier_wait_parity(full[s], (k // stages + 1) % 2)
                    else:
                        T.mbarrier_wait_parity(full[s], (k // stages) % 2)
                    for j in T.serial(bK):
                        xv = T.if_then_else(k * bK + j < K, x[T.min(k * bK + j, K - 1)], 0.0)
                        acc = acc + A_s[s, tx - 128, j] * xv
                    T.mbarrier_arrive(empty[s])
            with T.ws(1):
                if bx * bM + tx - 128 < M:
                    y[bx * bM + tx - 128] = acc

    return main


def make_ws_gemm(
    M, N, K, bM=64, bN=64, bK=32, stages=3, dtype="float16", interleaved=False, nreg=(40, 232)
):
    """``C = A @ B`` (float32 accumulators), 256 threads. Warpgroup 0 produces: it waits on
    ``empty[s]``, copies the A and B tiles of step k into ring stage ``s = k % stages`` and
    arrives on ``full[s]``; warpgroup 1 consumes: it waits on ``full[s]``, each thread
    accumulates a 1 x 32 strip of the bM x bN tile in registers, and arrives on
    ``empty[s]``. With ``interleaved=False`` each warpgroup runs its own k loop after
    ``T.dec_max_nreg(nreg[0])`` / ``T.inc_max_nreg(nreg[1])`` (the GPU schedule); with
    ``interleaved=True`` one k loop encloses both scopes (no register reallocation), the
    order a lockstep emulator follows."""
    assert bM * bN == 128 * 32 and bN % 32 == 0
    nk = (K + bK - 1) // bK
    a_per, b_per = bM * bK // 128, bK * bN // 128
    strips = bN // 32

    @T.macro
    def produce(A, B, A_s, B_s, full, empty, k, tx, bx, by):
        s = k % stages
        T.mbarrier_wait_parity(empty[s], (k // stages + 1) % 2)
        for r in T.serial(a_per):
            idx = r * 128 + tx
            row, col = by * bM + idx // bK, k * bK + idx % bK
            A_s[s, idx // bK, idx % bK] = T.if_then_else(
                (row < M) & (col < K), A[T.min(row, M - 1), T.min(col, K - 1)], T.cast(0, dtype)
            )
        for r in T.serial(b_per):
            idx = r * 128 + tx
            row, col = k * bK + idx // bN, bx * bN + idx % bN
            B_s[s, idx // bN, idx % bN] = T.if_then_else(
                (row < K) & (col < N), B[T.min(row, K - 1), T.min(col, N - 1)], T.cast(0, dtype)
            )
        T.mbarrier_arrive(full[s])

    @T.macro
    def consume(A_s, B_s, full, empty, acc, k, c):
        s = k % stages
        T.mbarrier_wait_parity(full[s], (k // stages) % 2)
        row, col0 = c // strips, (c % strips) * 32
        for kk in T.serial(bK):
            a = T.cast(A_s[s, row, kk], "float32")
            for j in T.unroll(32):
                acc[j] = acc[j] + a * T.cast(B_s[s, kk, col0 + j], "float32")
        T.mbarrier_arrive(empty[s])

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=256) as (bx, by):
            A_s = T.alloc_shared((stages, bM, bK), dtype)
            B_s = T.alloc_shared((stages, bK, bN), dtype)
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            acc = T.alloc_local((32,), "float32")
            tx = T.get_thread_binding()
            for j in T.unroll(32):
                acc[j] = 0.0
            if interleaved:
                for k in T.serial(nk):
                    with T.ws(0):
                        produce(A, B, A_s, B_s, full, empty, k, tx, bx, by)
                    with T.ws(1):
                        consume(A_s, B_s, full, empty, acc, k, tx - 128)
            else:
                with T.ws(0):
                    T.dec_max_nreg(nreg[0])
                    for k in T.serial(nk):
                        produce(A, B, A_s, B_s, full, empty, k, tx, bx, by)
                with T.ws(1):
                    T.inc_max_nreg(nreg[1])
                    for k in T.serial(nk):
                        consume(A_s, B_s, full, empty, acc, k, tx - 128)
            with T.ws(1):
                c = tx - 128
                row, col0 = by * bM + c // strips, bx * bN + (c % strips) * 32
                for j in T.unroll(32):
                    if (row < M) & (col0 + j < N):
                        C[row, col0 + j] = acc[j]

    return main


def make_wgmma_gemm(M, N, K, bM=64, bN=64, bK=32, threads=128, wait=True, dtype="float16"):
    """``C = A @ B`` with ``T.wgmma_gemm`` (no implicit wait) and an explicit
    ``T.wait_wgmma(0)`` before the shared tiles are rewritten (``wait=False`` omits it)."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")
    ):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_l = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_l)
            for k in T.serial(T.ceildiv(K, bK)):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.wgmma_gemm(A_s, B_s, C_l)  # WGMMA_GEMM
                if wait:
                    T.wait_wgmma(0)
            T.copy(C_l, C[by * bM, bx * bN])

    return main
