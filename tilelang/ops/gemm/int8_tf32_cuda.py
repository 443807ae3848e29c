"""``T.gemm`` on CUDA for int8 (``mma.m16n8k32 s8``) and float32 (``mma.m16n8k8 tf32``).

Called by :func:`tilelang.ops.gemm.mma_cuda.lower_gemm_cuda` when A and B are int8 (C int32)
or float32 (C float32); the layout rule, warp partition, accumulator fragment and C
register order are those of ``gemm_cuda.py`` (C tile ``(mi, ni)`` holds registers
``4 * (mi * tn + ni) + r``). Operand registers follow the PTX ISA tables "Matrix Fragments
for mma.m16n8k32" (8-bit) and "for mma.m16n8k8" (tf32), with ``g = lane // 4`` and
``t = lane % 4``::

    s8   a[i], i < 16: (m, k) = (g + 8 * ((i // 4) % 2), 4 t + i % 4 + 16 * (i // 8))
    s8   b[i], i < 8:  (k, n) = (4 t + i % 4 + 16 * (i // 4), g)
    tf32 a[i], i < 4:  (m, k) = (g + 8 * (i % 2), t + 4 * (i // 2))
    tf32 b[i], i < 2:  (k, n) = (t + 4 * i, g)

Loads from shared memory, per k step (32 for int8, 8 for tf32) and per warp:

* int8, K-major operand (A stored (M, K), B stored (N, K)): ``ldmatrix`` without
  ``.trans``. A 16-byte ldmatrix row holds 16 consecutive k of one m (n), and lane ``l``
  receives its 32-bit word ``l % 4`` = ``k = 4 t .. 4 t + 3``, which is the s8 table.
  A: one ``.x4`` per m16 tile (matrices at (m, k) = (0, 0), (8, 0), (0, 16), (8, 16));
  B: one ``.x4`` per two n8 tiles ((n, k) = (0, 0), (0, 16), (8, 0), (8, 16)), ``.x2``
  for an odd last tile.
* int8, MN-major operand (A stored (K, M), B stored (K, N)): ``ldmatrix.trans`` swaps
  16-bit halves, not bytes, so each lane reads its 16 (A) / 8 (B) bytes one by one
  (``ld.shared.s8``) into an int8 register array that the mma reads as 32-bit words.
  Correct for any layout; slower than the K-major path.
* tf32 (all transposes): each lane reads its 4 (A) / 2 (B) floats with 32-bit shared
  loads and rounds them with ``tl::float_to_tf32`` (``cvt.rna.tf32.f32``); ldmatrix
  moves 16-bit pairs and cannot gather these 32-bit elements.

A register A (``local.fragment``) is supported for int8 (the 8-bit mma A fragment,
``make_mma_a_fragment(element_bits=8)``), not for tf32 (``GemmPlan`` rejects it).
"""

from __future__ import annotations

from tvm_tirx import ir, tirx

from ...layout import make_linear_layout
from ...lowering import irb
from ...lowering.shared_address import shared_offset, shared_ptr
from ...lowering.thread_utils import extern_stmt
from .mma_cuda import WARP, _addr, _check_layout, _new_local

#: A/B dtype -> (mma wrapper of mma.h, A registers per m16 tile, B registers per n8 tile)
MMA_INT8_TF32 = {
    "int8": ("tl::mma_m16n8k32_s8s8s32", 16, 8),
    "float32": ("tl::mma_m16n8k8_tf32tf32f32", 4, 2),
}


def s8_a_elem(g, t, i):
    """(m, k) in the 16x32 A tile of s8 register element ``a[i]``."""
    return g + 8 * ((i // 4) % 2), t * 4 + i % 4 + 16 * (i // 8)


def s8_b_elem(g, t, i):
    """(k, n) in the 32x8 B tile of s8 register element ``b[i]``."""
    return t * 4 + i % 4 + 16 * (i // 4), g


def tf32_a_elem(g, t, i):
    """(m, k) in the 16x8 A tile of tf32 register ``a[i]``."""
    return g + 8 * (i % 2), t + 4 * (i // 2)


def tf32_b_elem(g, t, i):
    """(k, n) in the 8x8 B tile of tf32 register ``b[i]``."""
    return t + 4 * i, g


def element_read_shared_layout(view):
    """Layout of a shared tile read element by element (int8 MN-major, float32): linear.

    Not a swizzle: ``T.copy`` of a global tile with a tail into a swizzled int8 tile whose
    16-byte rows the copy lowering cannot prove contiguous (the XOR of the swizzle) keeps
    per-element shared stores under the in-bounds guard and drops the zero fill, so a K
    tail left stale data in shared memory (wrong int8 results for transpose_A=True on the
    H200 at M, N, K = 200, 136, 96; reproduced with ``backends/cuda/emulate.py``). Into the
    linear layout the copy is one vector access per vector, zero-filled at tails. The
    lost zero fill is ``copy_cuda.cooperative_loop``'s (its vector-form guard has no else
    branch); once that is fixed a swizzle can come back here (the element loads of the
    linear layout have bank conflicts).
    """
    return make_linear_layout(list(view.shape))


def shared_load(view, layout, rel_row, rel_col, ctx):
    """``TensorLoad`` of ``view[.., row, col]`` at its physical (layout-mapped) place.

    The storage offset is the one :func:`shared_offset` (and so ldmatrix/cp.async)
    uses, split again over the tensor's own shape.
    """
    flat = shared_offset(view, layout, rel_row, rel_col)
    shape = [int(s) for s in view.tensor.ty.shape]
    idx = []
    for extent in reversed(shape[1:]):
        idx.append(ctx.simplify(flat % extent))
        flat = flat // extent
    idx.append(ctx.simplify(flat))
    return ir.TensorLoad(view.tensor, list(reversed(idx)))


def _store(local, index, value):
    return ir.TensorStore(local, [ir.const(int(index), "int32")], value)


def _tf32(value):
    return tirx.call_extern("tl::float_to_tf32", value, ty="float32")


class _Loader:
    """Emits the operand loads of one warp (see the module docstring)."""

    def __init__(self, plan, v, ctx, lane, m0, n0):
        self.plan, self.v, self.ctx = plan, v, ctx
        self.lane, self.g, self.t = lane, lane // 4, lane % 4
        self.m0, self.n0 = m0, n0
        self.trans_a, self.trans_b = bool(v.transpose_A), bool(v.transpose_B)
        self.a_layout = ctx.get_layout(plan.a.tensor)
        self.b_layout = ctx.get_layout(plan.b.tensor)
        self.int8 = plan.in_dtype == "int8"

    def _a_at(self, m, k):
        if self.trans_a:
            return shared_load(self.plan.a, self.a_layout, k, m, self.ctx)
        return shared_load(self.plan.a, self.a_layout, m, k, self.ctx)

    def _b_at(self, k, n):
        if self.trans_b:
            return shared_load(self.plan.b, self.b_layout, n, k, self.ctx)
        return shared_load(self.plan.b, self.b_layout, k, n, self.ctx)

    def load_a(self, regs, kk, stmts):
        """A registers of every m16 tile of the warp at k offset ``kk``."""
        plan, lane = self.plan, self.lane
        for mi in range(plan.tm):
            mm = self.m0 + mi * 16
            if self.int8 and not self.trans_a:
                q = lane // 8
                row, col = lane % 8 + (q % 2) * 8, (q // 2) * 16
                ptr = shared_ptr(plan.a, self.a_layout, mm + row, kk + col)
                stmts.append(extern_stmt("tl::ptx_ldmatrix_x4", ptr, _addr(regs, 16 * mi)))
            elif self.int8:
                for i in range(16):
                    m, k = s8_a_elem(self.g, self.t, i)
                    stmts.append(_store(regs, 16 * mi + i, self._a_at(mm + m, kk + k)))
            else:
                for i in range(4):
                    m, k = tf32_a_elem(self.g, self.t, i)
                    stmts.append(_store(regs, 4 * mi + i, _tf32(self._a_at(mm + m, kk + k))))

    def load_b(self, regs, kk, stmts):
        """B registers of every n8 tile of the warp at k offset ``kk``."""
        plan, lane = self.plan, self.lane
        if self.int8 and self.trans_b:
            ni = 0
            while ni < plan.tn:
                nmat = 4 if ni + 1 < plan.tn else 2
                q = (lane // 8) % nmat
                row, col = lane % 8 + (q // 2) * 8, (q % 2) * 16
                ptr = shared_ptr(plan.b, self.b_layout, self.n0 + ni * 8 + row, kk + col)
                stmts.append(extern_stmt(f"tl::ptx_ldmatrix_x{nmat}", ptr, _addr(regs, 8 * ni)))
                ni += nmat // 2
            return
        for ni in range(plan.tn):
            nn = self.n0 + ni * 8
            if self.int8:
                for i in range(8):
                    k, n = s8_b_elem(self.g, self.t, i)
                    stmts.append(_store(regs, 8 * ni + i, self._b_at(kk + k, nn + n)))
            else:
                for i in range(2):
                    k, n = tf32_b_elem(self.g, self.t, i)
                    stmts.append(_store(regs, 2 * ni + i, _tf32(self._b_at(kk + k, nn + n))))


def lower_gemm_int8_tf32(plan, v, ctx):
    """Thread-level int8 / tf32 mma.sync gemm of ``plan`` (a ``gemm_cuda.GemmPlan``)."""
    a, b, c = plan.a, plan.b, plan.c
    _check_layout(ctx, c.tensor, plan.c_fragment(), "accumulator", v.loc)
    c_local = ctx.local_of(c.tensor)
    tx = ctx.thread_var
    warp, lane = (tx // WARP) % plan.num_warps, tx % WARP
    wm, wn = warp % plan.warp_m, warp // plan.warp_m
    m0, n0 = wm * plan.wtile_m, wn * plan.wtile_n
    mma, a_per_tile, b_per_tile = MMA_INT8_TF32[plan.in_dtype]
    stmts = []
    if v.clear_accum:
        zero = ir.const(0, c.dtype) if c.dtype == "int32" else ir.const(0.0, c.dtype)
        stmts.append(
            irb.loop_nest(
                [plan.tm * plan.tn * 4],
                lambda i: ir.TensorStore(c_local, [i[0]], zero),
                names=["i"],
                kind=ir.ForKind.UNROLLED,
            )
        )
    if plan.a_in_regs:
        _check_layout(ctx, a.tensor, plan.a_fragment(), "A operand", v.loc)
        a_local, a_regs = ctx.local_of(a.tensor), None
    else:
        a_regs, bind = _new_local(f"{a.name}_mma", a_per_tile * plan.tm, plan.in_dtype)
        stmts.append(bind)
    b_regs, bind = _new_local(f"{b.name}_mma", b_per_tile * plan.tn, plan.in_dtype)
    stmts.append(bind)
    loader = _Loader(plan, v, ctx, lane, m0, n0)
    trans_a = bool(v.transpose_A)
    for ki in range(plan.tk):
        kk = ki * plan.k_atom
        if not plan.a_in_regs:
            loader.load_a(a_regs, kk, stmts)
        loader.load_b(b_regs, kk, stmts)
        for mi in range(plan.tm):
            if plan.a_in_regs:
                tile = ki * plan.tm + mi if trans_a else mi * plan.tk + ki
                a_ptr = _addr(a_local, a_per_tile * tile)
            else:
                a_ptr = _addr(a_regs, a_per_tile * mi)
            for nj in range(plan.tn):
                ni = nj if mi % 2 == 0 else plan.tn - 1 - nj  # serpentine: reuse B regs
                acc = _addr(c_local, 4 * (mi * plan.tn + ni))
                stmts.append(extern_stmt(mma, acc, a_ptr, _addr(b_regs, b_per_tile * ni), acc))
    return irb.seq(stmts)


__all__ = [
    "MMA_INT8_TF32",
    "lower_gemm_int8_tf32",
    "s8_a_elem",
    "s8_b_elem",
    "shared_load",
    "tf32_a_elem",
    "tf32_b_elem",
]
