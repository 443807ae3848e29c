"""``T.gemm`` on sm_90a: warpgroup MMA (``wgmma.mma_async.m64nNk16``), B in shared memory and
A in shared memory (SS form) or in registers (RS form).

When it applies (:func:`wgmma_plan_for`)
    target arch ``sm_90a``; A and B float16 or bfloat16 (the same), or both float8
    (e4m3 or e5m2, C float32) or both int8/uint8 (C int32), 8-bit ones K-major (A stored
    (M, K), B stored (N, K): ``transpose_B=True``), in shared memory, K % 32 == 0, with the
    ``k32`` instructions; B in shared memory,
    A in shared memory (whose last two dimensions the gemm covers whole, like B's, except
    that a K-major operand may be a K slice starting at a multiple of the instruction's K:
    ``KV_shared[:, 256:]``, same swizzle as the whole tile) or a whole 2-D fragment that is not transposed (register A); C a float32 fragment; static
    M, N, K with ``K % 16 == 0``; the block's threads are whole warpgroups (128 threads)
    that can split C so that each warpgroup owns ``64 * t`` rows (see
    :func:`warpgroup_partition`); the shared operands get a swizzled layout a descriptor
    can express; and the layouts already known for A, B and C (if any) are the ones below.
    Otherwise the mma.sync path of ``gemm_cuda.py`` stays. A register A also stays on
    mma.sync in layout inference's second attempt (``ctx.prefer_mma``, after a layout
    conflict): there every gemm falls back as before the RS form existed.

Layouts (the layout rule)
    C: the wgmma accumulator fragment (``make_wgmma_accumulator_fragment``): warpgroup
    ``(gm, gn)`` = warpgroup ``gm + wg_m * gn`` owns the contiguous sub-tile ``(M / wg_m) x
    (N / wg_n)``, covered by ``tm x tn`` instructions ``m64n<instr_n>``. A and B: a CUTLASS
    swizzle over the stored tile (``make_swizzle_layout_for_mode``), 8-row atoms of
    ``W = 32/64/128`` bytes, atoms of one ``W``-byte column block stacked along the rows
    (:mod:`tilelang.layout.swizzle`). K-major operands (A stored (M, K), B stored (N, K))
    take the widest swizzle whose width divides K; MN-major ones (A stored (K, M), B stored
    (K, N)) the widest whose width in elements divides the instruction's 64 / instr_n. The
    copies that fill the tiles (``T.copy``, the cp.async pipeline) write them in this order.
    Register A: ``make_wgmma_a_fragment`` (the wgmma A-register layout, warp ``w`` of a
    warpgroup holding rows ``16 w ..`` of each m64 tile, warpgroups split along M as C is,
    replicated over the warpgroups along N). It has the thread map of the wgmma
    accumulator of the same rows, so ``T.copy(acc_s, acc_s_cast)`` from a wgmma C (Q @ K^T)
    into P @ V's A is a per-thread cast (FlashAttention-3's layout trick).

Descriptors (PTX ISA "Matrix Descriptor Format"; CUTLASS ``GmmaDescriptor``)
    start = shared address of the instruction's first element (unswizzled: it sits in row
    0 of an atom and at the start of a 16-byte chunk) >> 4; layout type 1/2/3 for
    128/64/32B; base offset 0 (tiles start on their swizzle period: ``plan_shared_memory``
    aligns them). K-major: SBO = 8 * W (next 8 M/N rows), LBO unused (1). The k16 steps
    inside a W-byte row advance the start by 32 bytes; the hardware applies the XOR swizzle
    to the resulting addresses. MN-major: SBO = 8 * W (next 8 K rows), LBO = rows * W
    (next column block of W / 2 elements along M/N). ``imm-trans-a/b`` = 1 for MN-major.

Lowering (thread-level code, all threads)::

    [fence.proxy.async.shared::cta]        unless the pipeline already fenced the tiles
    wgmma_fence_operand(C); wgmma.fence
    for k16 step ki: for m64 tile mi: for n tile ni:
        wgmma.mma_async(desc_A(mi, ki), desc_B(ni, ki), C regs of (mi, ni), scale_d)
    wgmma.commit_group; wgmma.wait_group w; wgmma_fence_operand(C)

RS form: ``wgmma_m64n<N>k16_rs(&A_local[8 * (mi * tk + ki)], desc_B(ni, ki), C, scale_d)``,
with ``wgmma_fence_operand`` on A's registers next to C's (before ``wgmma.fence`` and after
the wait: a register read by a wgmma in flight must not be rewritten, and the compiler must
not move A's next write above the wait). It always waits for ``wait_group 0``: A is
usually rewritten in the next iteration (P = cast(S) in FlashAttention), so the pipeline's
``tl_wgmma_in_flight`` / ``tl_wgmma_defer_wait`` are ignored for it (a later
``wait_group 1`` or drain is then a no-op).

``scale_d`` is 0 for ``ki == 0`` when ``clear_accum``. ``w`` is 0, or 1 when the cp.async
pipeline keeps one group in flight across iterations (call attribute ``tl_wgmma_in_flight``;
it then waits for 0 after the loop, :func:`wgmma_drain`; with ``tl_wgmma_defer_wait`` the
pipeline emits that wait itself, after issuing its copies). The user's ``wg_wait`` is not
used: this backend has no ``T.wait_wgmma``, so every gemm leaves C complete, as far as the
program can tell: the CUDA pipeline's ``wgmma_wait_sinking`` stage then moves each
``wait_group 0`` (and its operand fences) down to the first statement that needs the gemm's
result (``backends/cuda/passes/wgmma_wait_sinking.py``), so independent work overlaps it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_tirx import ir, tirx

from ... import errors
from ...layout import make_wgmma_a_fragment, make_wgmma_accumulator_fragment
from ...layout.swizzle import SwizzleMode, dtype_bits, make_swizzle_layout_for_mode
from ...lowering import irb
from ...lowering.region import _const
from ...lowering.shared_address import shared_ptr
from ...lowering.thread_utils import extern_stmt as _call
from .op import GemmWarpPolicy, gemm_dims
from .wgmma_header import WGMMA_N

WARPGROUP = 128
INSTR_M = 64
INSTR_K = 16  # 16-bit inputs; 8-bit inputs take k32 instructions (:attr:`WgmmaPlan.instr_k`)
_BF16 = {"float16": "false", "bfloat16": "true"}
#: 8-bit inputs: ``dtype -> (instruction kind, template flag, accumulator dtype)``.
_EIGHT_BIT = {
    "float8_e4m3fn": ("fp8", "false", "float32"),
    "float8_e5m2": ("fp8", "true", "float32"),
    "int8": ("int8", "false", "int32"),
    "uint8": ("int8", "true", "int32"),
}
#: Call attributes the cp.async pipeline (``pipeline_planning``) sets on a wgmma gemm.
ATTR_FENCED = "tl_wgmma_fenced"
ATTR_IN_FLIGHT = "tl_wgmma_in_flight"
ATTR_DEFER_WAIT = "tl_wgmma_defer_wait"  # the pipeline emits the wait (after its copies)
_WIDTH_BYTES = {
    SwizzleMode.SWIZZLE_128B: 128,
    SwizzleMode.SWIZZLE_64B: 64,
    SwizzleMode.SWIZZLE_32B: 32,
}


# ---------------------------------------------------------------------------------------
# warpgroup partition
# ---------------------------------------------------------------------------------------
def instr_n_for(width: int, mn_major_b: bool) -> int | None:
    """The widest wrapped ``wgmma`` N dividing a warpgroup's ``width`` columns.

    An N-major B needs N to be a multiple of 16 (its tile needs a 32B+ swizzle whose
    column block divides each instruction).
    """
    for n in WGMMA_N:
        if width % n == 0 and (not mn_major_b or n % 16 == 0):
            return n
    return None


def warpgroup_partition(m: int, n: int, num_wg: int, policy, mn_major_b: bool = False):
    """``(wg_m, wg_n, instr_n)`` splitting an ``m x n`` C tile over ``num_wg`` warpgroups.

    Each warpgroup owns ``m / wg_m`` rows (a multiple of 64) and ``n / wg_n`` columns (a
    multiple of ``instr_n``). FullRow puts as many warpgroups along M as fit (every one
    when it can) and the rest along N -- upstream's fallback, as ``warp_partition`` of the
    mma.sync path: a 64-row tile on 2 warpgroups is 1 x 2; FullCol the same with N.
    Square takes the split that reads the fewest shared-memory operand bytes per k16 step
    (``sum over instructions of 64 + instr_n``; e.g. 128x256 on 2 warpgroups -> 2 x 1 with
    m64n256), preferring more warpgroups along M on ties. None when no split fits.
    """
    policy = GemmWarpPolicy(int(policy))
    choices = [(wm, num_wg // wm) for wm in range(1, num_wg + 1) if num_wg % wm == 0]
    best = None
    for wm, wn in choices:
        if m % (INSTR_M * wm) or n % wn or (n // wn) % 8:
            continue
        inst = instr_n_for(n // wn, mn_major_b)
        if inst is None:
            continue
        tm, tn = m // wm // INSTR_M, n // wn // inst
        if policy == GemmWarpPolicy.FullRow:
            key = (-wm,)
        elif policy == GemmWarpPolicy.FullCol:
            key = (-wn,)
        else:
            key = (num_wg * tm * tn * (INSTR_M + inst), -wm)
        if best is None or key < best[0]:
            best = (key, (wm, wn, inst))
    return None if best is None else best[1]


# ---------------------------------------------------------------------------------------
# operands
# ---------------------------------------------------------------------------------------
# Layouts are immutable values, and the plans of one kernel ask for the same few of them
# many times (layout inference, pipeline planning, synchronization, lowering: 15-30
# plans per gemm); each costs ~1 ms of expression building and simplification. Keyed by
# the constructor's arguments; bounded.
_LAYOUTS: dict[tuple, object] = {}
_LAYOUTS_MAX = 512


def _layout(key: tuple, make):
    """``make()``, built once per ``key`` (see ``_LAYOUTS``)."""
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        layout = _LAYOUTS[key] = make()
    return layout


@dataclass
class WgmmaOperand:
    """One shared operand: its stored tile, major-ness, swizzle and descriptor constants."""

    view: object
    k_major: bool
    mode: SwizzleMode
    rows: int  # stored tile (last two dims)
    cols: int

    @property
    def tensor(self):
        return self.view.tensor

    @property
    def width_bytes(self) -> int:
        return _WIDTH_BYTES[self.mode]

    @property
    def sbo(self) -> int:
        """Bytes between consecutive 8-row atoms (K-major: 8 M/N rows; MN-major: 8 K rows)."""
        return 8 * self.width_bytes

    @property
    def lbo(self) -> int:
        """MN-major: bytes between column blocks along M/N; K-major: unused (16 = "1")."""
        return self.rows * self.width_bytes if not self.k_major else 16

    @property
    def layout_type(self) -> int:
        return self.mode.wgmma_layout_type()

    @property
    def trans(self) -> int:
        """PTX imm-trans-a/b: 0 K-major, 1 MN-major."""
        return 0 if self.k_major else 1

    def layout_2d(self):
        shape, dtype = (self.rows, self.cols), self.view.dtype
        return _layout(
            ("swizzle", shape, str(dtype), self.mode),
            lambda: make_swizzle_layout_for_mode((shape, dtype), self.mode),
        )

    def full_layout(self):
        """The layout over the whole tensor (leading dimensions map identically)."""
        leading = tuple(int(_const(s)) for s in self.view.shape[:-2])
        if not leading:
            return self.layout_2d()
        return _layout(
            ("swizzle", (self.rows, self.cols), str(self.view.dtype), self.mode, leading),
            lambda: self.layout_2d().expand(list(leading)),
        )

    def origin(self, mn, kk):
        """Stored ``(row, col)`` of the instruction element (mn, k) = (mn, kk)."""
        return (mn, kk) if self.k_major else (kk, mn)

    def desc(self, layout, mn, kk):
        """``tl::wgmma_desc<...>(&tile[origin])`` for the instruction starting at (mn, kk)."""
        row, col = self.origin(mn, kk)
        ptr = shared_ptr(self.view, layout, _i32(row), _i32(col))
        name = f"tl::wgmma_desc<{self.layout_type}, {self.lbo}, {self.sbo}>"
        return tirx.call_extern(name, ptr, ty="uint64")


class WgmmaRegisterA:
    """A held in registers (a ``local.fragment``): the RS form's A operand."""

    def __init__(self, view):
        self.view = view

    @property
    def tensor(self):
        return self.view.tensor

    def fragment(self, plan):
        """The wgmma A-register fragment of ``plan``'s ``m x k`` A (``make_wgmma_a_fragment``)."""
        key = (plan.m, plan.k, plan.wg_m, plan.wg_n)
        return _layout(("a_fragment", *key), lambda: make_wgmma_a_fragment(*key))


def _i32(x):
    return ir.const(int(x), "int32") if isinstance(x, int) else x


def _pick_mode(rows: int, cols: int, bits: int, unit: int) -> SwizzleMode:
    """Widest swizzle whose column block (in elements) divides ``unit`` and ``cols``."""
    vec = 128 // bits
    if rows % 8:
        return SwizzleMode.NONE
    for mode in (SwizzleMode.SWIZZLE_128B, SwizzleMode.SWIZZLE_64B, SwizzleMode.SWIZZLE_32B):
        width = _WIDTH_BYTES[mode] // 16 * vec
        if unit % width == 0 and cols % width == 0:
            return mode
    return SwizzleMode.NONE


def _whole_fragment(view, rank=2) -> bool:
    """Whether the region is its whole tensor (of ``rank`` dimensions unless None)."""
    if rank is not None and len(view.shape) != rank:
        return False
    return all(_const(b) == 0 for b in view.begins) and [_const(e) for e in view.extents] == [
        _const(s) for s in view.shape
    ]


def _whole_tile(view, k_slice_step: int | None = None) -> bool:
    """Whether the region covers the last two dimensions of its tensor. With
    ``k_slice_step`` (a K-major operand: K is the last dimension) the columns may be a slice
    whose start is a constant multiple of ``k_slice_step`` (the instruction's K): each
    instruction's descriptor then starts on a 16-byte chunk of an atom row, as the k16
    steps inside a whole tile do, and the swizzle is the whole tile's."""
    for dim, (begin, e, s) in enumerate(zip(view.begins[-2:], view.extents[-2:], view.shape[-2:])):
        b, e, s = _const(begin), _const(e), _const(s)
        if dim == 1 and k_slice_step and b is None and e is not None and s is not None:
            # a K slice at a run-time start (``[:, j * 64 : (j + 1) * 64]`` in a T.unroll):
            # the same descriptors when the start is a multiple of the instruction's K
            if e <= s and _multiple_of(begin, k_slice_step):
                continue
            return False
        if b is None or e is None or s is None:
            return False
        if dim == 1 and k_slice_step and b % k_slice_step == 0 and b + e <= s:
            continue
        if b != 0 or e != s:
            return False
    return all(_const(e) == 1 for e in view.extents[:-2])


def _mn_slice(view, unit: int) -> bool:
    """Whether the region is whole along its rows (K of an MN-major operand) and, along its
    columns (M or N), a constant extent starting at a multiple of ``unit``."""
    b_rows, e_rows, s_rows = (
        _const(x) for x in (view.begins[-2], view.extents[-2], view.shape[-2])
    )
    e, s = _const(view.extents[-1]), _const(view.shape[-1])
    if b_rows != 0 or e_rows is None or e_rows != s_rows or e is None or s is None or e > s:
        return False
    begin = view.begins[-1]
    start = _const(begin)
    if start is not None and (start % unit or start + e > s):
        return False
    if start is None and not _multiple_of(begin, unit):
        return False
    return all(_const(x) == 1 for x in view.extents[:-2])


def _multiple_of(expr, step: int) -> bool:
    """Whether ``expr % step == 0`` for every value of its variables (the simplifier's proof)."""
    from tvm_tirx import sym

    return bool(sym.Analyzer().can_prove(tirx.floormod(expr, step) == 0))


# ---------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------
class WgmmaPlan:
    """Static facts of one ``T.gemm`` on the wgmma path. Build with :meth:`build`."""

    def __init__(self, v, a, b, c, m, n, k, part):
        self.v, self.a_view, self.b_view, self.c = v, a, b, c
        self.m, self.n, self.k = m, n, k
        self.wg_m, self.wg_n, self.instr_n = part
        self.num_wg = self.wg_m * self.wg_n
        self.wg_tile_m, self.wg_tile_n = m // self.wg_m, n // self.wg_n
        self.dtype = a.dtype
        self.instr_k = 32 if a.dtype in _EIGHT_BIT else INSTR_K
        self.tm, self.tn, self.tk = (
            self.wg_tile_m // INSTR_M,
            self.wg_tile_n // self.instr_n,
            k // self.instr_k,
        )
        self.acc_regs = self.tm * self.tn * self.instr_n // 2
        self.a_in_regs = a.scope.startswith("local")
        self.a_regs = self.tm * self.tk * 8  # 16-bit elements of a register A per thread
        self.A = self.B = None

    @classmethod
    def build(cls, v, threads: int):
        """The plan, or ``(None, reason)`` when the gemm cannot use wgmma."""
        a, b, c, m, n, k = gemm_dims(v)
        m, n, k = (_const(x) for x in (m, n, k))
        if None in (m, n, k):
            return None, "dynamic tile sizes"
        a_in_regs = a.scope.startswith("local")
        if a.dtype in _EIGHT_BIT:
            if b.dtype != a.dtype or c.dtype != _EIGHT_BIT[a.dtype][2]:
                return None, f"types {a.dtype} x {b.dtype} -> {c.dtype}"
            if a_in_regs:
                return None, "8-bit A in registers (only the shared-memory form is lowered)"
            if v.transpose_A or not v.transpose_B:
                return None, "8-bit wgmma reads K-major operands only: A stored (M, K), B (N, K)"
            if k % 32:
                return None, f"K={k} is not a multiple of 32 (8-bit wgmma is k32)"
        elif a.dtype not in _BF16 or b.dtype != a.dtype or c.dtype != "float32":
            return None, f"types {a.dtype} x {b.dtype} -> {c.dtype}"
        if not (a_in_regs or a.scope.startswith("shared")) or not b.scope.startswith("shared"):
            return None, "A not in shared memory or registers, or B not in shared memory"
        if not c.scope.startswith("local"):
            return None, "C not a fragment"
        if k % INSTR_K or threads % WARPGROUP:
            return None, f"K={k} or threads={threads}"
        trans_a, trans_b = bool(v.transpose_A), bool(v.transpose_B)
        k_step = 32 if a.dtype in _EIGHT_BIT else INSTR_K
        if a_in_regs:
            if v.transpose_A:
                return None, "register A stored (K, M)"
            if not _whole_fragment(a):
                return None, "register A is not a whole 2-D fragment"
        elif not (_whole_tile(a, None if trans_a else k_step) or (trans_a and _mn_slice(a, 1))):
            return None, "A region is not a whole tile (or a K slice of a K-major one)"
        if not (_whole_tile(b, k_step if trans_b else None) or (not trans_b and _mn_slice(b, 1))):
            return None, "B region is not a whole tile (or a K slice of a K-major one)"
        if not _whole_fragment(c, rank=None):
            return None, "C region is not the whole fragment"
        part = warpgroup_partition(m, n, threads // WARPGROUP, v.policy, mn_major_b=not trans_b)
        if part is None:
            return None, f"no warpgroup split of {m}x{n} over {threads // WARPGROUP}"
        plan = cls(v, a, b, c, m, n, k, part)
        # an M/N slice of an MN-major tile (``KV[stage, :, : dim // 2]``): its instructions
        # start where the whole tile's do when it starts on a multiple of their M/N
        if trans_a and not a_in_regs and not _whole_tile(a) and not _mn_slice(a, INSTR_M):
            return None, "A is an M slice that does not start on a multiple of 64"
        if not trans_b and not _whole_tile(b) and not _mn_slice(b, plan.instr_n):
            return None, f"B is an N slice that does not start on a multiple of {plan.instr_n}"
        bits = dtype_bits(a.dtype)
        a_rows, a_cols = int(_const(a.shape[-2])), int(_const(a.shape[-1]))
        b_rows, b_cols = int(_const(b.shape[-2])), int(_const(b.shape[-1]))
        a_kmaj, b_kmaj = not trans_a, trans_b
        # K-major: the stored K extent (the gemm's K, or more for a K slice) picks the swizzle,
        # so a slice gets the whole tile's
        a_mode = _pick_mode(a_rows, a_cols, bits, a_cols if a_kmaj else INSTR_M)
        b_mode = _pick_mode(b_rows, b_cols, bits, b_cols if b_kmaj else plan.instr_n)
        if b_mode == SwizzleMode.NONE or (a_mode == SwizzleMode.NONE and not a_in_regs):
            return None, "no descriptor-compatible swizzle"
        if a_in_regs:
            plan.A = WgmmaRegisterA(a)
        else:
            plan.A = WgmmaOperand(a, a_kmaj, a_mode, a_rows, a_cols)
        plan.B = WgmmaOperand(b, b_kmaj, b_mode, b_rows, b_cols)
        return plan, ""

    def c_fragment(self):
        key = (self.m, self.n, self.wg_m, self.wg_n, self.instr_n)
        return _layout(("c_fragment", *key), lambda: make_wgmma_accumulator_fragment(*key))

    def a_layout(self):
        """The layout A must have: its fragment (register A) or its swizzle (shared A)."""
        return self.A.fragment(self) if self.a_in_regs else self.A.full_layout()

    def instruction(self) -> str:
        if self.dtype in _EIGHT_BIT:
            kind, flag, _ = _EIGHT_BIT[self.dtype]
            return f"tl::wgmma_m64n{self.instr_n}k32_ss_{kind}<{flag}>"
        if self.a_in_regs:
            return f"tl::wgmma_m64n{self.instr_n}k16_rs<{_BF16[self.dtype]}, {self.B.trans}>"
        return (
            f"tl::wgmma_m64n{self.instr_n}k16_ss<{_BF16[self.dtype]}, {self.A.trans}, "
            f"{self.B.trans}>"
        )


def _same_layout(got, want) -> bool:
    try:
        return got.input_dim == want.input_dim and bool(got.is_equal(want))
    except Exception:  # noqa: BLE001 - incomparable layouts are different
        return False


def wgmma_plan_for(v, ctx, require_known: bool = False):
    """The :class:`WgmmaPlan` of gemm ``v`` when it runs on wgmma in ``ctx``, else None.

    ``ctx`` has ``arch``, ``threads`` and ``get_layout`` (a LayoutInferContext or a
    CudaLowerContext); layouts already known must be the wgmma ones, and with
    ``require_known`` (after layout inference) A, B and C must all have them. A register
    A is refused while layout inference retries after a conflict (``ctx.prefer_mma``).
    """
    if not str(getattr(ctx, "arch", "")).startswith("sm_90a"):
        return None
    plan, _ = WgmmaPlan.build(v, int(ctx.threads))
    if plan is None:
        return None
    if plan.a_in_regs and getattr(ctx, "prefer_mma", False):
        return None
    wanted = [(plan.A.tensor, plan.a_layout()), (plan.B.tensor, plan.B.full_layout())]
    wanted.append((plan.c.tensor, plan.c_fragment()))
    for tensor, want in wanted:
        got = ctx.get_layout(tensor)
        if got is None and require_known:
            return None
        if got is not None and not _same_layout(got, want):
            return None
    return plan


def lowers_to_wgmma(v, ctx) -> bool:
    """Whether the CUDA pipeline will lower gemm ``v`` with wgmma (layouts already inferred).

    True unless the pass configs select the scalar gemm (``tl.gemm_scalar``), when
    :func:`wgmma_plan_for` accepts the inferred layouts.
    """
    options = getattr(ctx, "options", None)
    if options is not None and options["gemm_scalar"]:
        return False
    return wgmma_plan_for(v, ctx, require_known=True) is not None


def infer_gemm_layout_wgmma(plan, ctx) -> dict:
    """C: wgmma accumulator fragment; register A: the wgmma A fragment; shared A/B (when not
    yet known): the descriptor swizzles."""
    out = {plan.c.tensor: plan.c_fragment()}
    if plan.a_in_regs:
        out[plan.A.tensor] = plan.a_layout()
    for op in (plan.B,) if plan.a_in_regs else (plan.A, plan.B):
        if ctx.get_layout(op.tensor) is None:
            out[op.tensor] = op.full_layout()
    return out


# ---------------------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------------------
def _addr(local, index):
    return tirx.address_of(ir.TensorLoad(local, [ir.const(int(index), "int32")]))


def warp_uniform(value):
    """``value`` (int32, equal on every lane of a warp) read from lane 0 with ``__shfl_sync``.

    The warpgroup index ``threadIdx.x / 128`` is warp-uniform, but nvcc cannot prove it: the
    descriptor arithmetic derived from it then lives in per-thread registers, is hoisted out
    of the loop and (with 240-register consumers full of accumulators) spilled; the FA
    backward at head dim 128 reloaded its descriptors from local memory before its HGMMAs
    (ncu, H200: long-scoreboard stalls on the spill loads). Broadcast from lane 0, nvcc keeps
    it and the descriptors in uniform registers. All 32 lanes call it (wgmma is
    ``.sync.aligned``: whole warpgroups)."""
    return tirx.call_extern("__shfl_sync", ir.const(0xFFFFFFFF, "uint32"), value,
                             ir.const(0, "int32"), ty="int32")  # fmt: skip


def _attr(v, key) -> bool:
    attrs = v.call.attrs
    return bool(attrs is not None and key in attrs and int(attrs[key]))


def lower_gemm_wgmma(v, ctx, plan) -> ir.Stmt:
    """Thread-level wgmma code of one gemm (see the module docstring)."""
    if ctx.thread_var is None:
        raise errors.compile_error("T.gemm (wgmma): no thread variable in context", v.loc)
    c_local = ctx.local_of(plan.c.tensor)
    b_layout = ctx.get_layout(plan.B.tensor)
    if plan.a_in_regs:
        a_local, a_layout = ctx.local_of(plan.A.tensor), None
        a_fence = [_call(f"tl::wgmma_fence_operand<{plan.a_regs}>", _addr(a_local, 0))]
    else:
        a_local, a_layout, a_fence = None, ctx.get_layout(plan.A.tensor), []
    wg = ctx.thread_var // WARPGROUP
    options = getattr(ctx, "options", None)
    if options is None or options.get("wgmma_uniform_warpgroup", True):
        wg = warp_uniform(wg)
    wg = wg % plan.num_wg
    m0 = (wg % plan.wg_m) * plan.wg_tile_m
    n0 = (wg // plan.wg_m) * plan.wg_tile_n
    regs = plan.acc_regs
    per_instr = plan.instr_n // 2
    stmts = []
    if not _attr(v, ATTR_FENCED):
        stmts.append(_call("tl::fence_proxy_async_shared"))
    stmts.append(_call(f"tl::wgmma_fence_operand<{regs}>", _addr(c_local, 0)))
    stmts += a_fence
    stmts.append(_call("tl::wgmma_arrive"))
    inst = plan.instruction()
    for ki in range(plan.tk):
        kk = ki * plan.instr_k
        scale = 0 if (v.clear_accum and ki == 0) else 1
        for mi in range(plan.tm):
            if plan.a_in_regs:  # tile (mi, ki) of the warpgroup's rows: 8 registers
                op_a = _addr(a_local, 8 * (mi * plan.tk + ki))
            else:
                op_a = plan.A.desc(a_layout, m0 + mi * INSTR_M, kk)
            for ni in range(plan.tn):
                desc_b = plan.B.desc(b_layout, n0 + ni * plan.instr_n, kk)
                acc = _addr(c_local, (mi * plan.tn + ni) * per_instr)
                stmts.append(_call(inst, op_a, desc_b, acc, ir.const(scale, "int32")))
    stmts.append(_call("tl::wgmma_commit"))
    if plan.a_in_regs:  # A may be rewritten right after: always complete the group here
        stmts += wgmma_wait(ctx, plan, 0) + a_fence
    elif not _attr(v, ATTR_DEFER_WAIT):
        stmts += wgmma_wait(ctx, plan, 1 if _attr(v, ATTR_IN_FLIGHT) else 0)
    return irb.seq(stmts)


def wgmma_wait(ctx, plan, pending: int) -> list:
    """``wgmma.wait_group pending`` and the compiler fence on ``plan``'s accumulators."""
    c_local = ctx.local_of(plan.c.tensor)
    return [
        _call(f"tl::wgmma_wait<{int(pending)}>"),
        _call(f"tl::wgmma_fence_operand<{plan.acc_regs}>", _addr(c_local, 0)),
    ]


def wgmma_drain(ctx, plan) -> list:
    """Statements completing every pending wgmma group of ``plan``'s accumulator."""
    return wgmma_wait(ctx, plan, 0)


__all__ = [
    "ATTR_FENCED",
    "ATTR_DEFER_WAIT",
    "ATTR_IN_FLIGHT",
    "WgmmaOperand",
    "WgmmaPlan",
    "WgmmaRegisterA",
    "infer_gemm_layout_wgmma",
    "instr_n_for",
    "lower_gemm_wgmma",
    "lowers_to_wgmma",
    "warpgroup_partition",
    "wgmma_drain",
    "wgmma_plan_for",
    "wgmma_wait",
]
