"""Thread-level TIRx kernels (and Python reference models) used by test_build.py.

Each ``make_*`` returns a ``@T.function`` written directly at thread level, the form the
CUDA backend's ``build_cuda`` receives from the lowering passes. The header kernels call
``tilelang/backends/cuda/include/tl_templates/cuda`` helpers by name through ``T.call_extern``.
"""

from tvm_tirx.script import tirx as T


def make_vadd():
    """C = A + B over a symbolic length n, 128 threads per block, tail guarded."""
    n = T.dynamic("n")

    @T.function
    def vadd(
        A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")
    ):
        with T.launch_thread("blockIdx.x", (n + 127) // 128) as bx:
            with T.launch_thread("threadIdx.x", 128) as tx:
                if bx * 128 + tx < n:
                    C[bx * 128 + tx] = A[bx * 128 + tx] + B[bx * 128 + tx]

    return vadd


def make_transpose(scope):
    """B = A^T for A of shape (n, 64), n symbolic and a multiple of 64.

    Block bx stages rows [64 bx, 64 bx + 64) of A in a padded 64 x 65 shared tile;
    thread tx handles column tx % 64 and rows tx // 64 + 4 i.
    """
    n = T.dynamic("n")

    @T.function
    def transpose(A: T.Tensor((n, 64), "float32"), B: T.Tensor((64, n), "float32")):
        with T.launch_thread("blockIdx.x", n // 64) as bx:
            with T.launch_thread("threadIdx.x", 256) as tx:
                S = T.alloc_shared((64, 65), "float32", scope=scope)
                for i in T.serial(16):
                    S[i * 4 + tx // 64, tx % 64] = A[bx * 64 + i * 4 + tx // 64, tx % 64]
                T.cuda.cta_sync()
                for i in T.serial(16):
                    B[i * 4 + tx // 64, bx * 64 + tx % 64] = S[tx % 64, i * 4 + tx // 64]

    return transpose


def make_block_reverse(elems):
    """Each block reverses its `elems` floats through one dynamic shared buffer.

    With elems > 12288 the buffer is over 48 KB, the default dynamic shared-memory limit.
    """
    nblk = T.dynamic("nblk")
    iters = elems // 256

    @T.function
    def block_reverse(
        A: T.Tensor((nblk * elems,), "float32"), B: T.Tensor((nblk * elems,), "float32")
    ):
        with T.launch_thread("blockIdx.x", nblk) as bx:
            with T.launch_thread("threadIdx.x", 256) as tx:
                S = T.alloc_shared((elems,), "float32", scope="shared.dyn")
                for i in T.serial(iters):
                    S[i * 256 + tx] = A[bx * elems + i * 256 + tx]
                T.cuda.cta_sync()
                for i in T.serial(iters):
                    B[bx * elems + i * 256 + tx] = S[elems - 1 - i * 256 - tx]

    return block_reverse


def ext(name, *args, ty="void"):
    """`T.call_extern` shorthand; as a statement inside a kernel it is evaluated."""
    return T.call_extern(name, *args, ty=ty)


ptr = T.address_of


def make_warp_reduce():
    """One warp; row r of O is one reduction flavour of A (see test_gpu_warp_reduce)."""

    @T.function
    def warp_reduce(
        A: T.Tensor((32,), "float32"),
        I: T.Tensor((32,), "int32"),
        O: T.Tensor((4, 32), "float32"),
        OI: T.Tensor((32,), "int32"),
    ):
        with T.launch_thread("threadIdx.x", 32) as tx:
            O[0, tx] = ext("tl::warp_reduce_sum<32, 1>", A[tx], ty="float32")
            O[1, tx] = ext("tl::warp_reduce_max<8, 4>", A[tx], ty="float32")
            O[2, tx] = ext("tl::warp_reduce_min<4, 1>", A[tx], ty="float32")
            O[3, tx] = ext("tl::warp_allreduce<tl::SumOp, 2, 16>", A[tx], ty="float32")
            OI[tx] = ext("tl::warp_reduce_sum<32>", I[tx], ty="int32")

    return warp_reduce


def make_cp_async():
    """cp.async of 16/8/4 bytes, plus predicated zero-filling copies of 16 and 4 bytes."""

    @T.function
    def cp_async(
        A: T.Tensor((256,), "float16"),
        F: T.Tensor((64,), "float32"),
        O: T.Tensor((2, 256), "float16"),
        OF: T.Tensor((2, 64), "float32"),
    ):
        with T.launch_thread("threadIdx.x", 32) as tx:
            S = T.alloc_shared((256,), "float16")
            Z = T.alloc_shared((256,), "float16")
            S8 = T.alloc_shared((64,), "float32")
            S4 = T.alloc_shared((64,), "float32")
            ext("tl::cp_async_gs<16>", ptr(S[tx * 8]), ptr(A[tx * 8]))
            ext("tl::cp_async_gs_conditional<16>", ptr(Z[tx * 8]), ptr(A[tx * 8]), tx < 16)
            ext("tl::cp_async_gs<8>", ptr(S8[tx * 2]), ptr(F[tx * 2]))
            ext("tl::cp_async_commit")
            ext("tl::cp_async_gs<4>", ptr(S4[tx]), ptr(F[tx]))
            ext("tl::cp_async_gs_conditional<4>", ptr(S4[tx + 32]), ptr(F[tx + 32]), tx % 2 == 0)
            ext("tl::cp_async_commit")
            ext("tl::cp_async_wait<1>")
            ext("tl::cp_async_wait<0>")
            T.cuda.cta_sync()
            for i in T.serial(8):
                O[0, tx * 8 + i] = S[tx * 8 + i]
                O[1, tx * 8 + i] = Z[tx * 8 + i]
            for i in T.serial(2):
                OF[0, tx * 2 + i] = S8[tx * 2 + i]
                OF[1, tx * 2 + i] = S4[tx * 2 + i]

    return cp_async


def make_atomics():
    """256 threads fold A/H/Bf/I into [sum, max, min] with tl::AtomicAdd/Max/Min."""

    @T.function
    def atomics(
        A: T.Tensor((256,), "float32"),
        H: T.Tensor((256,), "float16"),
        Bf: T.Tensor((256,), "bfloat16"),
        I: T.Tensor((256,), "int32"),
        OF: T.Tensor((3,), "float32"),
        OH: T.Tensor((3,), "float16"),
        OB: T.Tensor((3,), "bfloat16"),
        OI: T.Tensor((3,), "int32"),
    ):
        with T.launch_thread("threadIdx.x", 256) as tx:
            ext("tl::AtomicAdd", ptr(OF[0]), A[tx])
            ext("tl::AtomicMax", ptr(OF[1]), A[tx])
            ext("tl::AtomicMin", ptr(OF[2]), A[tx])
            ext("tl::AtomicAdd", ptr(OH[0]), H[tx])
            ext("tl::AtomicMax", ptr(OH[1]), H[tx])
            ext("tl::AtomicMin", ptr(OH[2]), H[tx])
            ext("tl::AtomicAdd", ptr(OB[0]), Bf[tx])
            ext("tl::AtomicMax", ptr(OB[1]), Bf[tx])
            ext("tl::AtomicMin", ptr(OB[2]), Bf[tx])
            ext("tl::AtomicAdd", ptr(OI[0]), I[tx])
            ext("tl::AtomicMax", ptr(OI[1]), I[tx])
            ext("tl::AtomicMin", ptr(OI[2]), I[tx])

    return atomics


def make_mma_k16(dtype):
    """D (16x8, f32) = A (16x16) @ Bt (8x16)^T with one m16n8k16 mma (mma.h layouts)."""
    fn = {"float16": "tl::mma_m16n8k16_f16f16f32", "bfloat16": "tl::mma_m16n8k16_bf16bf16f32"}
    fn = fn[dtype]

    @T.function
    def mma_k16(
        A: T.Tensor((16, 16), dtype), Bt: T.Tensor((8, 16), dtype), D: T.Tensor((16, 8), "float32")
    ):
        with T.launch_thread("threadIdx.x", 32) as tx:
            a = T.alloc_local((8,), dtype)
            b = T.alloc_local((4,), dtype)
            c = T.alloc_local((4,), "float32")
            for i in T.serial(8):
                a[i] = A[tx // 4 + 8 * (i // 2 % 2), tx % 4 * 2 + i % 2 + 8 * (i // 4)]
            for i in T.serial(4):
                b[i] = Bt[tx // 4, tx % 4 * 2 + i % 2 + 8 * (i // 2)]
                c[i] = T.float32(0)
            ext(fn, ptr(c[0]), ptr(a[0]), ptr(b[0]), ptr(c[0]))
            for i in T.serial(4):
                D[tx // 4 + 8 * (i // 2), tx % 4 * 2 + i % 2] = c[i]

    return mma_k16


def make_mma_tf32():
    """D (16x8) = A (16x8) @ Bt (8x8)^T with one m16n8k8 tf32 mma."""

    @T.function
    def mma_tf32(
        A: T.Tensor((16, 8), "float32"),
        Bt: T.Tensor((8, 8), "float32"),
        D: T.Tensor((16, 8), "float32"),
    ):
        with T.launch_thread("threadIdx.x", 32) as tx:
            a = T.alloc_local((4,), "float32")
            b = T.alloc_local((2,), "float32")
            c = T.alloc_local((4,), "float32")
            for i in T.serial(4):
                a[i] = A[tx // 4 + 8 * (i % 2), tx % 4 + 4 * (i // 2)]
                c[i] = T.float32(0)
            for i in T.serial(2):
                b[i] = Bt[tx // 4, tx % 4 + 4 * i]
            ext("tl::mma_m16n8k8_tf32tf32f32", ptr(c[0]), ptr(a[0]), ptr(b[0]), ptr(c[0]))
            for i in T.serial(4):
                D[tx // 4 + 8 * (i // 2), tx % 4 * 2 + i % 2] = c[i]

    return mma_tf32


def make_mma_s8():
    """D (16x8, s32) = A (16x32, s8) @ Bt (8x32, s8)^T with one m16n8k32 mma."""

    @T.function
    def mma_s8(
        A: T.Tensor((16, 32), "int8"), Bt: T.Tensor((8, 32), "int8"), D: T.Tensor((16, 8), "int32")
    ):
        with T.launch_thread("threadIdx.x", 32) as tx:
            a = T.alloc_local((16,), "int8")
            b = T.alloc_local((8,), "int8")
            c = T.alloc_local((4,), "int32")
            for i in T.serial(16):
                a[i] = A[tx // 4 + 8 * (i // 4 % 2), tx % 4 * 4 + i % 4 + 16 * (i // 8)]
            for i in T.serial(8):
                b[i] = Bt[tx // 4, tx % 4 * 4 + i % 4 + 16 * (i // 4)]
            for i in T.serial(4):
                c[i] = 0
            ext("tl::mma_m16n8k32_s8s8s32", ptr(c[0]), ptr(a[0]), ptr(b[0]), ptr(c[0]))
            for i in T.serial(4):
                D[tx // 4 + 8 * (i // 2), tx % 4 * 2 + i % 2] = c[i]

    return mma_s8


LDMATRIX_VARIANTS = [  # (function, number of matrices, transposed)
    ("tl::ptx_ldmatrix_x1", 1, False),
    ("tl::ptx_ldmatrix_x2", 2, False),
    ("tl::ptx_ldmatrix_x4", 4, False),
    ("tl::ptx_ldmatrix_x1_trans", 1, True),
    ("tl::ptx_ldmatrix_x2_trans", 2, True),
    ("tl::ptx_ldmatrix_x4_trans", 4, True),
]


def make_ldmatrix(variant):
    """Stage A (16x16 f16) in shared memory; O[lane, :] = the lane's ldmatrix registers.

    Matrix k is the 8x8 block at rows 8 (k % 2), cols 8 (k // 2); lane l passes row l % 8
    of matrix l // 8.
    """
    fn = LDMATRIX_VARIANTS[variant][0]

    @T.function
    def ldmatrix(A: T.Tensor((16, 16), "float16"), O: T.Tensor((32, 8), "float16")):
        with T.launch_thread("threadIdx.x", 32) as tx:
            S = T.alloc_shared((16, 16), "float16")
            f = T.alloc_local((8,), "float16")
            for i in T.serial(8):
                S[tx // 2, tx % 2 * 8 + i] = A[tx // 2, tx % 2 * 8 + i]
                f[i] = T.float16(0)
            T.cuda.cta_sync()
            ext(fn, ptr(S[8 * (tx // 8 % 2) + tx % 8, 8 * (tx // 16)]), ptr(f[0]))
            for i in T.serial(8):
                O[tx, i] = f[i]

    return ldmatrix


def make_swizzle(order, panel, gx, gy):
    """Block (bx, by) writes its launch-order id at its rasterized coordinates."""
    fx = f"tl::rasterization2D{order}X<{panel}>"
    fy = f"tl::rasterization2D{order}Y<{panel}>"

    @T.function
    def swizzle(O: T.Tensor((gy, gx), "int32")):
        with T.launch_thread("blockIdx.x", gx) as bx:
            with T.launch_thread("blockIdx.y", gy) as by:
                O[ext(fy, ty="int32"), ext(fx, ty="int32")] = bx + by * gx

    return swizzle


GPU_KERNELS = {
    "vadd": make_vadd,
    "transpose_shared": lambda: make_transpose("shared"),
    "transpose_dyn": lambda: make_transpose("shared.dyn"),
    "reverse_96k": lambda: make_block_reverse(24576),
    "reverse_200k": lambda: make_block_reverse(51200),
    "warp_reduce": make_warp_reduce,
    "cp_async": make_cp_async,
    "atomics": make_atomics,
    "mma_f16": lambda: make_mma_k16("float16"),
    "mma_bf16": lambda: make_mma_k16("bfloat16"),
    "mma_tf32": make_mma_tf32,
    "mma_s8": make_mma_s8,
    "ldmatrix_x4_trans": lambda: make_ldmatrix(5),
    "swizzle_row": lambda: make_swizzle("Row", 3, 5, 7),
    "swizzle_column": lambda: make_swizzle("Column", 2, 6, 5),
}

# --------------------------------------------------------------------------- references


def raster_row(pw, bx, by, gx, gy):
    """Python model of tl::rasterize_2d_row."""
    i = bx + by * gx
    panel, off = divmod(i, pw * gx)
    rows = min(pw, gy - panel * pw)
    col, row = off // rows, panel * pw + off % rows
    return (gx - 1 - col if panel % 2 else col), row


def raster_column(pw, bx, by, gx, gy):
    """Python model of tl::rasterize_2d_column."""
    i = bx + by * gx
    panel, off = divmod(i, pw * gy)
    cols = min(pw, gx - panel * pw)
    row, col = off // cols, panel * pw + off % cols
    return col, (gy - 1 - row if panel % 2 else row)


def expected_ldmatrix(a, count, trans):
    """Registers per lane for ldmatrix (ldsm.h layout), as a (32, 8) list of values."""
    out = [[0.0] * 8 for _ in range(32)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for k in range(count):
            r0, c0 = 8 * (k % 2), 8 * (k // 2)
            for j in range(2):
                if trans:
                    out[lane][2 * k + j] = a[r0 + 2 * t + j][c0 + g]
                else:
                    out[lane][2 * k + j] = a[r0 + g][c0 + 2 * t + j]
    return out
