"""Upstream's ``TensorCoreIntrinEmitter``: warp-level ``ldmatrix`` + ``mma.sync`` written by hand.

A kernel that manages its own register fragments (``T.alloc_local``) calls, inside a
``T.Kernel``, ``ldmatrix_a`` / ``ldmatrix_b`` (shared tile -> this thread's A/B registers),
``mma`` (``C += A B`` over the warp's ``warp_rows x warp_cols`` mma tiles) and ``stmatrix``
(this thread's accumulators -> a shared or global tile). Each call emits statements into
the kernel being traced:

* ``ldmatrix_*``: ``tl::ptx_ldmatrix_x{2,4}[_trans]`` helpers (``ldsm.h``) for 16-bit
  operands and K-major int8 operands; element-by-element loads where ``ldmatrix`` cannot
  deliver the fragment (int8 stored MN-major), as upstream does.
* ``mma``: ``tl::mma_m16n8k16_{f16f16,bf16bf16}f32`` / ``tl::mma_m16n8k32_s8s8s32``
  helpers (``mma.h``), two per 16x16 tile (one per n8 half).
* ``stmatrix``: per-thread element stores through upstream's ``mma_store_index_map``.

The helpers are the same ones ``T.gemm`` lowers to on CUDA, so the CUDA build, the CUDA
emulator (``tilelang/testing``) and the CPU backend (``backends/cpu/warp_mma.py``, which
gives them a block-shared form) all run them. Register order is upstream's (PTX's): the A
registers of warp-row tile ``i`` are ``A_local[i * local_size_a + r]``, B of warp-col tile
``j`` are ``B_local[j * local_size_b + r]`` (two n8 halves), C of ``(i, j)`` are
``C_local[(i * warp_cols + j) * local_size_out + r]``.

Supported: A/B float16 or bfloat16 with float32 accumulators, int8 with int32; upstream's
float32 (tf32), float64, fp8 and int4 paths, ``num_elems_per_byte != 1`` and operands held in
``local.fragment`` tensors raise a clear error.
"""

from __future__ import annotations

from typing import Literal

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx
from tvm_tirx.script import tirx as _T

from .... import dtypes
from .... import language as T
from ....language import builder
from ....language import kernel as _kernel
from ....lowering.mma_fragments import MMA_BY_DTYPES, ldmatrix_name
from ..layout.mma_layout import mma_store_32x8_to_shared_16x16_layout
from ..layout.utils import mma_store_index_map

_ABBREV = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "int8": "int8",
    "int32": "int32",
}


def _dtype_name(dtype, what) -> str:
    try:
        return dtypes.canonical(dtype)
    except Exception as err:  # noqa: BLE001 - re-raised with the argument's name
        raise ValueError(f"TensorCoreIntrinEmitter: {what}={dtype!r} is not a dtype") from err


def _tensor(buf, what: str, method: str):
    """``buf`` as a traced tensor (a ``T.alloc_*`` result or kernel parameter)."""
    buf = builder.unwrap(buf)
    if isinstance(buf, ir.Var) and hasattr(buf.ty, "shape"):
        return buf
    raise TypeError(
        f"TensorCoreIntrinEmitter.{method}: {what} must be a tensor (T.alloc_shared / "
        f"T.alloc_local / a kernel parameter), got {type(buf).__name__}"
    )


def _region_origin(buf, what: str, method: str):
    """(tensor, leading indices, row origin, col origin) of a tensor or ``tensor[a:b, c:d]``."""
    buf = builder.unwrap(buf)
    if isinstance(buf, ir.TensorRegion):
        tensor = buf.source
        mins = [r.min if hasattr(r, "min") else r for r in buf.region]
        if len(mins) < 2:
            raise ValueError(f"TensorCoreIntrinEmitter.{method}: {what} region must be 2-d or more")
        return tensor, mins[:-2], mins[-2], mins[-1]
    tensor = _tensor(buf, what, method)
    if len(tensor.ty.shape) < 2:
        raise ValueError(
            f"TensorCoreIntrinEmitter.{method}: {what} {tensor.name} must be 2-d or more, "
            f"got shape {tuple(tensor.ty.shape)}"
        )
    return tensor, [0] * (len(tensor.ty.shape) - 2), 0, 0


def _local_operand(buf, what: str, method: str, dtype: str):
    tensor = _tensor(buf, what, method)
    scope = str(tensor.ty.scope)
    if scope != "local":
        raise NotImplementedError(
            f"TensorCoreIntrinEmitter.{method}: {what} {tensor.name} is in {scope!r}; tilelang's "
            "emitter works on per-thread registers from T.alloc_local (upstream's "
            "local.fragment operands are not supported)"
        )
    if str(tensor.ty.dtype) != dtype:
        raise TypeError(
            f"TensorCoreIntrinEmitter.{method}: {what} {tensor.name} is {tensor.ty.dtype}, "
            f"expected {dtype}"
        )
    return tensor


def _addr(tensor, indices):
    return _tirx.address_of(ir.TensorLoad(tensor, [_as_index(i) for i in indices]))


def _as_index(i):
    return ir.const(i, "int32") if isinstance(i, int) else builder.unwrap(i)


def _emit_extern(name, *args):
    _T.emit_(ir.Evaluate(_tirx.call_extern(name, *args, ty="void"), loc=builder.user_loc()))


@T.macro
def _store_loop(c_local, c_buf, count, index_of):
    for n in T.serial(count):
        c_buf[index_of(n)] = c_local[n]


class TensorCoreIntrinEmitter:
    """Emit ldmatrix / mma.sync / store code for one warp tiling (upstream's signature)."""

    M_DIM = 16
    n_dim = 16
    WARP_SIZE = 32
    dtype_abbrv = dict(_ABBREV)
    is_m_first: bool = False
    warp_rows: int = 1
    warp_cols: int = 1

    def __init__(
        self,
        a_dtype: str = "float16",
        b_dtype: str = "float16",
        accum_dtype: str = "float16",
        a_transposed: bool = False,
        b_transposed: bool = False,
        block_row_warps: int = 2,
        block_col_warps: int = 2,
        warp_row_tiles: int = 8,
        warp_col_tiles: int = 8,
        chunk: int = 16,
        reduce_k: int = 1,
        num_elems_per_byte: int = 1,
        is_m_first: bool | None = False,
        thread_var=None,
    ):
        self.a_dtype = _dtype_name(a_dtype, "a_dtype")
        self.b_dtype = _dtype_name(b_dtype, "b_dtype")
        self.accum_dtype = _dtype_name(accum_dtype, "accum_dtype")
        if self.a_dtype != self.b_dtype:
            raise ValueError(
                f"TensorCoreIntrinEmitter: a_dtype={self.a_dtype} and b_dtype={self.b_dtype} "
                "differ; tilelang's mma helpers take equal operand types"
            )
        key = (self.a_dtype, self.accum_dtype)
        if key not in MMA_BY_DTYPES:
            supported = ", ".join(f"{a} -> {c}" for a, c in MMA_BY_DTYPES)
            raise ValueError(
                f"TensorCoreIntrinEmitter: a_dtype={self.a_dtype} with accum_dtype="
                f"{self.accum_dtype} is not supported (supported: {supported})"
            )
        if num_elems_per_byte != 1:
            raise ValueError(
                f"TensorCoreIntrinEmitter: num_elems_per_byte={num_elems_per_byte} (packed "
                "sub-byte operands) is not supported; only 1"
            )
        self.mma_name = MMA_BY_DTYPES[key]
        self.a_transposed, self.b_transposed = bool(a_transposed), bool(b_transposed)
        self.block_row_warps, self.block_col_warps = int(block_row_warps), int(block_col_warps)
        self.warp_row_tiles, self.warp_col_tiles = int(warp_row_tiles), int(warp_col_tiles)
        self.chunk = int(chunk)
        self.k_dim = min(256 // dtypes.bits(self.a_dtype), self.chunk)
        if self.k_dim != (32 if self.a_dtype == "int8" else 16):
            raise ValueError(
                f"TensorCoreIntrinEmitter: chunk={chunk} is smaller than one mma step "
                f"(k={32 if self.a_dtype == 'int8' else 16} for {self.a_dtype})"
            )
        if self.chunk % self.k_dim:
            raise ValueError(
                f"TensorCoreIntrinEmitter: chunk={chunk} must be a multiple of {self.k_dim}"
            )
        if self.warp_row_tiles < 16 or self.warp_row_tiles % 16:
            raise ValueError(
                f"TensorCoreIntrinEmitter: warp_row_tiles={warp_row_tiles} must be a positive "
                "multiple of 16"
            )
        if self.warp_col_tiles < 8 or self.warp_col_tiles % 8:
            raise ValueError(
                f"TensorCoreIntrinEmitter: warp_col_tiles={warp_col_tiles} must be a positive "
                "multiple of 8"
            )
        self.warp_rows = self.warp_row_tiles // self.M_DIM
        self.n_dim = 16 if self.warp_col_tiles % 16 == 0 else 8
        self.warp_cols = self.warp_col_tiles // self.n_dim
        self.micro_size_x, self.micro_size_y, self.micro_size_k = 16, self.n_dim, self.k_dim
        self.local_size_a = (16 * self.k_dim) // self.WARP_SIZE
        self.local_size_b = (self.n_dim * self.k_dim) // self.WARP_SIZE
        self.local_size_out = (16 * self.n_dim) // self.WARP_SIZE
        self.a_dtype_abbrv = _ABBREV[self.a_dtype]
        self.b_dtype_abbrv = _ABBREV[self.b_dtype]
        self.accum_dtype_abbrv = _ABBREV[self.accum_dtype]
        self.mma_prefix = f"m16n8k{self.k_dim}"
        if is_m_first is not None:
            self.is_m_first = bool(is_m_first)
        self.reduce_k = int(reduce_k)
        self.threads = self.WARP_SIZE * self.block_row_warps * self.block_col_warps * self.reduce_k
        self.num_elems_per_byte = num_elems_per_byte
        self.thread_var = thread_var

    # ------------------------------------------------------------------ threads
    def get_thread_binding(self):
        """The thread index the emitted code uses (``thread_var`` or the kernel's threadIdx.x)."""
        if self.thread_var is not None:
            return self.thread_var
        return _kernel.get_thread_binding(0)

    def extract_thread_binding(self, thread_id, is_m_first: bool | None = None):
        """``(lane, warp_n, warp_m)`` of ``thread_id`` (upstream's warp order)."""
        w = self.WARP_SIZE
        if is_m_first is None:
            is_m_first = self.is_m_first
        if is_m_first:
            return (
                thread_id % w,
                (thread_id // w) % self.block_col_warps,
                (thread_id // (w * self.block_col_warps)) % self.block_row_warps,
            )
        return (
            thread_id % w,
            (thread_id // (w * self.block_row_warps)) % self.block_col_warps,
            (thread_id // w) % self.block_row_warps,
        )

    def get_store_index_map(self, inverse: bool = False):
        """Upstream returns a TVM IndexMap; tilelang exposes the function itself."""
        if inverse:
            raise NotImplementedError(
                "TensorCoreIntrinEmitter.get_store_index_map(inverse=True) is not supported"
            )
        return mma_store_index_map

    # ------------------------------------------------------------------ loads
    def _origin(self, lane, num, rows_first, unit):
        """(row, col) in the stored tile of the 16-byte row ``lane`` addresses (``unit``
        elements per 16 bytes): matrix ``q`` starts at ``(8 (q%2), unit (q//2))`` when
        ``rows_first`` else ``(8 (q//2), unit (q%2))``."""
        q = (lane // 8) % num
        lo, hi = q % 2, q // 2
        r = lane % 8
        return (r + 8 * lo, unit * hi) if rows_first else (r + 8 * hi, unit * lo)

    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0):  # noqa: N803 - upstream names
        """Load this warp's A fragments of k-step ``ki`` (``rk``: reduce-k slice) from shared."""
        a_local = _local_operand(A_local_buf, "A_local_buf", "ldmatrix_a", self.a_dtype)
        a_buf, other, base0, base1 = _region_origin(A_shared_buf, "A_shared_buf", "ldmatrix_a")
        tx, _, warp_m = self.extract_thread_binding(self.get_thread_binding())
        wk = rk * self.chunk + ki * self.k_dim
        int8 = self.a_dtype == "int8"
        for i in range(self.warp_rows):
            wi = warp_m * self.warp_row_tiles + i * self.M_DIM
            dst = i * self.local_size_a
            if int8 and self.a_transposed:  # ldmatrix cannot transpose 8-bit: element loads
                self._element_loads(a_local, dst, a_buf, other, base0, base1, tx,
                                    self.local_size_a, "a", wi, wk)  # fmt: skip
                continue
            unit = 16 if int8 else 8
            row, col = self._origin(tx, 4, not self.a_transposed, unit)
            src = (wk + row, wi + col) if self.a_transposed else (wi + row, wk + col)
            _emit_extern(
                ldmatrix_name(4, self.a_transposed),
                _addr(a_buf, [*other, base0 + src[0], base1 + src[1]]),
                _addr(a_local, [dst]),
            )

    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0):  # noqa: N803
        """Load this warp's B fragments of k-step ``ki`` from shared (two n8 halves per tile)."""
        b_local = _local_operand(B_local_buf, "B_local_buf", "ldmatrix_b", self.b_dtype)
        b_buf, other, base0, base1 = _region_origin(B_shared_buf, "B_shared_buf", "ldmatrix_b")
        tx, warp_n, _ = self.extract_thread_binding(self.get_thread_binding())
        wk = rk * self.chunk + ki * self.k_dim
        int8 = self.b_dtype == "int8"
        num = 4 if self.n_dim == 16 else 2
        for j in range(self.warp_cols):
            wi = warp_n * self.warp_col_tiles + j * self.n_dim
            dst = j * self.local_size_b
            if int8 and not self.b_transposed:
                self._element_loads(b_local, dst, b_buf, other, base0, base1, tx,
                                    self.local_size_b, "b", wi, wk)  # fmt: skip
                continue
            unit = 16 if int8 else 8
            # stored (N, K): matrix q = (n8 half q // 2, k half q % 2); stored (K, N): .trans
            row, col = self._origin(tx, num, not self.b_transposed, unit)
            src = (wi + row, wk + col) if self.b_transposed else (wk + row, wi + col)
            _emit_extern(
                ldmatrix_name(num, not self.b_transposed),
                _addr(b_buf, [*other, base0 + src[0], base1 + src[1]]),
                _addr(b_local, [dst]),
            )

    def _element_loads(self, local, dst, buf, other, base0, base1, tx, count, which, wi, wk):
        """Per-element loads of one fragment (MN-major int8, which ldmatrix cannot transpose)."""
        from ....lowering.mma_fragments import MMA_SHAPES

        shape = MMA_SHAPES[self.mma_name]
        g, t = tx // 4, tx % 4
        per = shape.a_elems if which == "a" else shape.b_elems  # elements of one n8 half
        for e in range(count):
            half, r = divmod(e, per)
            if which == "a":
                mn, k = shape.a_map(g, t, r)
                idx = (wk + k, wi + mn)  # A stored (K, M)
            else:
                k, n = shape.b_map(g, t, r)
                idx = (wk + k, wi + 8 * half + n)  # B stored (K, N)
            value = ir.TensorLoad(
                buf, [_as_index(x) for x in (*other, base0 + idx[0], base1 + idx[1])]
            )
            builder.store(local, [_as_index(dst + e)], value)

    # ------------------------------------------------------------------ mma
    @property
    def mma_num_inst_m(self) -> int:
        """Number of mma tiles along M per warp."""
        return self.warp_rows

    @property
    def mma_num_inst_n(self) -> int:
        """Number of mma tiles along N per warp."""
        return self.warp_cols

    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0):  # noqa: N803
        """``C += A B`` for every (warp-row, warp-col) tile of this warp."""
        for i in range(self.warp_rows):
            for j in range(self.warp_cols):
                self.mma_atom(A_local_buf, B_local_buf, C_local_buf, i, j, k_inner)

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx, k_inner=0):  # noqa: N803
        """One tile's mma: ``C[(i, j)] += A[i] B[j]`` (two m16n8 mmas when n_dim is 16)."""
        a = _local_operand(A_local_buf, "A_local_buf", "mma", self.a_dtype)
        b = _local_operand(B_local_buf, "B_local_buf", "mma", self.b_dtype)
        c = _local_operand(C_local_buf, "C_local_buf", "mma", self.accum_dtype)
        a_off = inst_m_idx * self.local_size_a
        b_off = inst_n_idx * self.local_size_b
        c_off = (inst_m_idx * self.warp_cols + inst_n_idx) * self.local_size_out
        halves = 2 if self.n_dim == 16 else 1
        for h in range(halves):
            cb = c_off + h * (self.local_size_out // halves)
            bb = b_off + h * (self.local_size_b // halves)
            _emit_extern(self.mma_name, _addr(c, [cb]), _addr(a, [a_off]), _addr(b, [bb]),
                         _addr(c, [cb]))  # fmt: skip

    # ------------------------------------------------------------------ stores
    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None):  # noqa: N803
        """Store this thread's accumulators to ``C_buf``: shared ``(M, N)`` or
        ``(M/16, N/n_dim, 16, n_dim)``, or global ``(M, N)`` at block ``(pid_m, pid_n)``."""
        c_local = _tensor(C_local_buf, "C_local_buf", "stmatrix")
        c_buf = _tensor(C_buf, "C_buf", "stmatrix")
        dims = len(c_buf.ty.shape)
        if dims not in (2, 4):
            raise ValueError(
                f"TensorCoreIntrinEmitter.stmatrix: C_buf {c_buf.name} must be 2-d or 4-d, got "
                f"shape {tuple(c_buf.ty.shape)}"
            )
        is_global = pid_m is not None and pid_n is not None
        if (pid_m is None) != (pid_n is None):
            raise ValueError(
                "TensorCoreIntrinEmitter.stmatrix: give both pid_m and pid_n, or neither"
            )
        if is_global and dims != 2:
            raise ValueError("TensorCoreIntrinEmitter.stmatrix: a global C_buf must be 2-d")
        tx, warp_n, warp_m = self.extract_thread_binding(self.get_thread_binding())
        block_m = self.block_row_warps * self.warp_rows
        block_n = self.block_col_warps * self.warp_cols
        per_tile = self.local_size_out

        def index_of(n):
            """C_buf index of accumulator ``n`` of this thread (tile ``(i, j)``, slot ``r``)."""
            i, j, r = (
                n // (self.warp_cols * per_tile),
                (n // per_tile) % self.warp_cols,
                n % per_tile,
            )
            row, col = mma_store_32x8_to_shared_16x16_layout(tx, r)
            tile_m, tile_n = warp_m * self.warp_rows + i, warp_n * self.warp_cols + j
            if is_global:
                return ((pid_m * block_m + tile_m) * self.M_DIM + row,
                        (pid_n * block_n + tile_n) * self.n_dim + col)  # fmt: skip
            if dims == 2:
                return tile_m * self.M_DIM + row, tile_n * self.n_dim + col
            return tile_m, tile_n, row, col

        # one loop with one store: the barrier pass sees one writer, not one per element
        _store_loop(c_local, c_buf, self.warp_rows * self.warp_cols * per_tile, index_of)

    # ------------------------------------------------------------------ layouts
    def make_mma_load_layout(self, local_buf, matrix: Literal["A", "B"] = "A"):
        """Upstream: a T.Fragment for an operand in local.fragment; not supported here."""
        raise NotImplementedError(
            "TensorCoreIntrinEmitter.make_mma_load_layout: operands in local.fragment tensors "
            "are not supported; hold the fragments in T.alloc_local and use ldmatrix_a/b"
        )

    def make_mma_store_layout(self, local_buf):
        """Upstream: a T.Fragment for the accumulator in local.fragment; not supported here."""
        raise NotImplementedError(
            "TensorCoreIntrinEmitter.make_mma_store_layout: accumulators in local.fragment "
            "tensors are not supported; hold them in T.alloc_local and use stmatrix"
        )


class TensorCoreIntrinEmitterWithLadderTransform(TensorCoreIntrinEmitter):
    """Upstream's emitter for ladder-transformed (pre-permuted) operands: not supported."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "TensorCoreIntrinEmitterWithLadderTransform (BitBLAS ladder-transformed operands) "
            "is not supported by tilelang; use TensorCoreIntrinEmitter"
        )
