"""``T.gemm`` on CUDA (sm_80+): warp partition, layouts, and the mma.sync lowering.

Layout rule (``@layout_rule("gemm", "cuda")``)
    The block's warps split C into ``warp_m x warp_n`` warp tiles (``GemmWarpPolicy``,
    upstream's rules, see :func:`warp_partition`). C gets the block-level mma
    accumulator fragment (``make_mma_accumulator_fragment``); an A held in registers
    (``local.fragment``) gets the mma A-operand fragment; shared A/B tiles get the
    swizzled layout ``make_swizzled_layout`` (ldmatrix reads 8 rows x 16 bytes without
    bank conflicts). The copy that fills a shared tile must write it through the same
    layout (``ctx.layout_map``).

Lowering (``@lower_rule("gemm", "cuda")``)
    Thread-level code, run by every thread: warp ``w = tid // 32`` is warp
    ``(w % warp_m, w // warp_m)``. For each k16 step the warp loads its A tiles (16x16,
    ``ldmatrix.x4``, ``.trans`` when A is stored (K, M)) and B tiles (two 16x8 tiles per
    ``ldmatrix.x4``, ``.trans`` when B is stored (K, N)) into registers, then issues one
    ``mma.sync.m16n8k16`` per (m16, n8) tile, accumulating into ``ctx.local_of(C)``.

Inside a software-pipelined loop (``transform/pipeline_planning.py``) a 16-bit gemm may
arrive split into phases (call attribute ``tl_mma_phase``): ``PHASE_PREFETCH`` loads k16
slice 0 into fragment buffer 0, ``PHASE_MAIN`` loads slice ki+1 while issuing the mmas of
slice ki (double-buffered fragments, arrays given by the planner), ``PHASE_LAST`` issues
the mmas of the last slice; the planner puts the barrier and the next tile's prefetch
between the last two.

int8 x int8 -> int32 (``mma.m16n8k32`` s8) and float32 x float32 -> float32 (tf32
``mma.m16n8k8``) share the plan, warp partition and C fragment; their operand loads and
mmas are emitted by ``gemm_cuda_int8_tf32.py``. Their shared tiles read element by
element (int8 MN-major, all float32) get the linear layout
(``gemm_cuda_int8_tf32.element_read_shared_layout`` says why).

On sm_90a the registered rules (``infer_gemm_layout_dispatch`` / ``lower_gemm_dispatch`` at
the end of this file) send gemms that fit a warpgroup to ``gemm_wgmma.py`` instead.

Register order (the accumulator fragment): within the warp, C tile ``(mi, ni)`` (16x8,
row-major over the warp's ``tm x tn`` tiles) holds registers ``4 * (mi * tn + ni) + r``
with ``r`` the PTX ``c0..c3``. A fragment: tile ``(mi, ki)`` holds ``8 * (mi * tk + ki)
+ r`` (``8 * (ki * tm + mi) + r`` when transposed). Shared addresses are computed from the
shared tensor's layout: ``&tensor[0, ..., 0] + flat(layout(indices))`` elements.
"""

from __future__ import annotations

from tvm_tirx import ir, tirx
from tvm_tirx.tirx.tensor import TensorType

from ... import errors
from ...layout import make_mma_a_fragment, make_mma_accumulator_fragment, make_swizzled_layout
from ...lowering import irb
from ...lowering.region import _const
from ...lowering.shared_address import shared_offset, shared_ptr  # noqa: F401 - re-exported
from ...lowering.thread_utils import extern_stmt
from ..registry import layout_rule, lower_rule
from .op import GemmWarpPolicy, gemm_dims

WARP = 32
_MMA_16BIT = {
    "float16": "tl::mma_m16n8k16_f16f16f32",
    "bfloat16": "tl::mma_m16n8k16_bf16bf16f32",
}
#: A/B element type -> (C element type, K of one mma.sync): the supported mma.sync gemms.
#: int8 (m16n8k32 s8) and float32 (m16n8k8 tf32) are lowered by gemm_cuda_int8_tf32.py.
MMA_KINDS = {
    "float16": ("float32", 16),
    "bfloat16": ("float32", 16),
    "int8": ("int32", 32),
    "float32": ("float32", 8),
}


# ---------------------------------------------------------------------------------------
# warp partition
# ---------------------------------------------------------------------------------------
def warp_partition(m: int, n: int, num_warps: int, policy) -> tuple[int, int]:
    """``(warp_m, warp_n)`` for a ``m x n`` C tile (upstream's GemmWarpPolicy rules).

    FullRow puts as many warps along M as divide it into multiples of 16 rows (every
    warp when it can) and the rest along N -- upstream's fallback when ``M < 16 *
    num_warps``, e.g. a 64-row tile on 8 warps is 4 x 2; FullCol the same with N and
    8 columns. Square picks the split whose warp tile ``m/warp_m x n/warp_n`` (each a
    multiple of 16 x 8) is closest to square, preferring more warps along M on ties.
    Raises ValueError when no split divides the tile.
    """
    policy = GemmWarpPolicy(int(policy))

    def fits(wm, wn):
        return m % (16 * wm) == 0 and n % (8 * wn) == 0

    splits = [(wm, num_warps // wm) for wm in range(1, num_warps + 1) if num_warps % wm == 0]
    choices = [c for c in splits if fits(*c)]
    if not choices:
        raise ValueError(
            f"no {policy.name} split of {num_warps} warps divides a {m}x{n} C tile into "
            "multiples of 16x8"
        )

    def score(c):
        wm, wn = c
        if policy == GemmWarpPolicy.FullRow:
            return (-wm,)
        if policy == GemmWarpPolicy.FullCol:
            return (-wn,)
        # Square: warp tiles as close to square as the splits allow (balanced operand loads)
        return (abs(m / wm - n / wn), -wm)

    return min(choices, key=score)


# ---------------------------------------------------------------------------------------
# the static plan of one gemm
# ---------------------------------------------------------------------------------------
class GemmPlan:
    """Static facts of one ``T.gemm`` on the mma path (shapes, warps, layouts)."""

    def __init__(self, v, threads: int):
        a, b, c, m, n, k = gemm_dims(v)
        self.a, self.b, self.c, self.v = a, b, c, v
        dims = [_const(x) for x in (m, n, k)]
        if any(d is None for d in dims):
            raise errors.compile_error(
                f"T.gemm on CUDA needs static tile sizes, got M={m}, N={n}, K={k} "
                f"(A={a.name}, B={b.name}, C={c.name})",
                v.loc,
            )
        self.m, self.n, self.k = dims
        if threads % WARP:
            raise errors.compile_error(
                f"T.gemm on CUDA needs a multiple of 32 threads, the kernel has {threads}", v.loc
            )
        self.num_warps = threads // WARP
        try:
            self.warp_m, self.warp_n = warp_partition(self.m, self.n, self.num_warps, v.policy)
        except ValueError as err:
            raise errors.compile_error(
                f"T.gemm {a.name} x {b.name} -> {c.name}: {err}", v.loc
            ) from None
        self.wtile_m, self.wtile_n = self.m // self.warp_m, self.n // self.warp_n
        self.tm, self.tn = self.wtile_m // 16, self.wtile_n // 8
        self.in_dtype = a.dtype
        if a.dtype != b.dtype:
            raise errors.compile_error(
                f"T.gemm: A ({a.name}, {a.dtype}) and B ({b.name}, {b.dtype}) element types differ",
                v.loc,
            )
        if a.dtype not in MMA_KINDS or c.dtype != MMA_KINDS[a.dtype][0]:
            if str(a.dtype).startswith("float8"):
                raise errors.compile_error(
                    f"T.gemm {a.name} x {b.name} -> {c.name}: float8 inputs run on sm_90a "
                    "wgmma only, with K-major operands (A stored (M, K), B stored (N, K): "
                    "transpose_B=True), both in shared memory, K a multiple of 32 and a "
                    "float32 accumulator",
                    v.loc,
                )
            raise errors.compile_error(
                "T.gemm on CUDA supports float16/bfloat16 inputs with float32 accumulation "
                "(mma.sync m16n8k16), int8 with int32 (m16n8k32) and float32 with float32 "
                f"(tf32 m16n8k8); got A={a.name} {a.dtype}, B={b.name} {b.dtype}, "
                f"C={c.name} {c.dtype}",
                v.loc,
            )
        self.k_atom = MMA_KINDS[a.dtype][1]
        if self.k % self.k_atom:
            raise errors.compile_error(
                f"T.gemm on CUDA needs K % {self.k_atom} == 0 for {a.dtype} inputs, got "
                f"K={self.k} (A={a.name}, B={b.name})",
                v.loc,
            )
        self.tk = self.k // self.k_atom
        self.a_in_regs = a.scope.startswith("local")
        if self.a_in_regs and a.dtype == "float32":
            raise errors.compile_error(
                f"T.gemm on CUDA: a float32 (tf32) A operand ({a.name}) must be in shared "
                "memory; a register A is supported for float16/bfloat16/int8 only",
                v.loc,
            )
        if b.scope.startswith("local"):
            raise errors.compile_error(
                f"T.gemm on CUDA reads B ({b.name}) from shared memory; a register B is not "
                "supported",
                v.loc,
            )
        if not c.scope.startswith("local"):
            raise errors.compile_error(
                f"T.gemm on CUDA accumulates into a fragment; C ({c.name}) is {c.scope}", v.loc
            )

    # layouts ------------------------------------------------------------------------
    def c_fragment(self):
        return make_mma_accumulator_fragment(self.m, self.n, self.warp_m, self.warp_n)

    def a_fragment(self):
        bits = 8 if self.in_dtype == "int8" else 16
        return make_mma_a_fragment(
            self.m, self.n, self.k, self.warp_m, self.warp_n, bits, bool(self.v.transpose_A)
        )

    @staticmethod
    def shared_layout(view, k_major: bool):
        # int8 MN-major and float32 tiles are read element by element
        # (gemm_cuda_int8_tf32.py), not by ldmatrix: that file picks their layout
        if view.dtype == "float32" or (view.dtype == "int8" and not k_major):
            from .int8_tf32_cuda import element_read_shared_layout

            return element_read_shared_layout(view)
        return make_swizzled_layout((view.shape, view.dtype), k_major=k_major)


def _threads_of(ctx) -> int:
    return int(ctx.threads)


def infer_gemm_layout_cuda(v, ctx):
    """C: mma accumulator fragment; register A: mma A fragment; shared A/B: swizzled."""
    plan = GemmPlan(v, _threads_of(ctx))
    out = {plan.c.tensor: plan.c_fragment()}
    if plan.a_in_regs:
        out[plan.a.tensor] = plan.a_fragment()
    elif ctx.get_layout(plan.a.tensor) is None:
        out[plan.a.tensor] = plan.shared_layout(plan.a, not v.transpose_A)
    if ctx.get_layout(plan.b.tensor) is None:
        out[plan.b.tensor] = plan.shared_layout(plan.b, bool(v.transpose_B))
    return out


# ---------------------------------------------------------------------------------------
# address helpers
# ---------------------------------------------------------------------------------------
def _addr(local, index):
    return tirx.address_of(ir.TensorLoad(local, [ir.const(int(index), "int32")]))


def ldmatrix_origin(lane, num_matrices: int, rows_first: bool):
    """(row, col) in the stored tile of the 16-byte row that ``lane`` addresses.

    Matrix ``q = (lane // 8) % num_matrices`` starts at ``((q%2)*8, (q//2)*8)`` when
    ``rows_first`` else ``((q//2)*8, (q%2)*8)`` (``tilelang.layout.ldmatrix_lane_layout``).
    """
    q = (lane // 8) % num_matrices if num_matrices > 1 else lane * 0
    r = lane % 8
    lo, hi = (q % 2) * 8, (q // 2) * 8
    return (r + lo, hi) if rows_first else (r + hi, lo)


# ---------------------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------------------
def _new_local(name, size, dtype):
    var = ir.Var(name, TensorType([size], dtype, scope="local"))
    return var, ir.Bind(
        var, ir.Call("tirx.alloc_tensor", [], attrs={}, ty_args=[var.ty], ty=var.ty)
    )


def _check_layout(ctx, tensor, expected, what, loc):
    got = ctx.get_layout(tensor)
    if got is None:
        raise errors.compile_error(f"T.gemm: {what} {tensor.name} has no layout", loc)
    if not got.is_equal(expected):
        raise errors.compile_error(
            f"T.gemm: {what} {tensor.name} was given a layout that is not the mma {what} "
            f"layout of this gemm: {got}",
            loc,
        )


#: Call attributes of a gemm that software pipelining split into phases
#: (``transform/pipeline_planning.py``, the mma schedule): the phase, and the two
#: double-buffered fragment arrays (A: ``2 * 8 * tm`` elements, B: ``2 * 4 * tn``) the
#: phases of one gemm share.
ATTR_MMA_PHASE = "tl_mma_phase"
ATTR_MMA_FRAG_A = "tl_mma_frag_a"
ATTR_MMA_FRAG_B = "tl_mma_frag_b"
#: PHASE_MAIN only: the k16 slices ``[lo, hi)`` it covers (default ``[0, tk - 1)``).
ATTR_MMA_SLICES = "tl_mma_slices"
#: Phases: load k16 slice 0 of the tile into fragment buffer 0; for each slice ki < tk-1
#: (of ``ATTR_MMA_SLICES``) load slice ki+1 (buffer (ki+1) % 2) and issue the mmas of
#: slice ki (buffer ki % 2); issue the mmas of the last slice (buffer (tk-1) % 2 = 1).
PHASE_PREFETCH, PHASE_MAIN, PHASE_LAST = 1, 2, 3


def mma_phases_supported(plan, v) -> bool:
    """Whether the gemm can be lowered in phases (16-bit, A and B in shared memory, an even
    number of k16 slices so the next tile's slice 0 lands in buffer 0, no clear_accum)."""
    return (
        plan.in_dtype in _MMA_16BIT
        and not plan.a_in_regs
        and not v.clear_accum
        and plan.tk >= 2
        and plan.tk % 2 == 0
    )


def mma_fragment_buffers(plan, prefix: str):
    """(A buffer, B buffer, their Binds): the double-buffered fragments of a phased gemm."""
    a_var, a_bind = _new_local(f"{prefix}_A_frag", 2 * 8 * plan.tm, plan.in_dtype)
    b_var, b_bind = _new_local(f"{prefix}_B_frag", 2 * 4 * plan.tn, plan.in_dtype)
    return a_var, b_var, [a_bind, b_bind]


class _MmaEmitter:
    """The ldmatrix and mma.sync statements of one 16-bit gemm, k16 slice by slice."""

    def __init__(self, plan, v, ctx):
        self.plan, self.v = plan, v
        self.c_local = ctx.local_of(plan.c.tensor)
        tx = ctx.thread_var
        warp, self.lane = (tx // WARP) % plan.num_warps, tx % WARP
        wm, wn = warp % plan.warp_m, warp // plan.warp_m
        self.m0, self.n0 = wm * plan.wtile_m, wn * plan.wtile_n
        self.mma = _MMA_16BIT[plan.in_dtype]
        self.trans_a, self.trans_b = bool(v.transpose_A), bool(v.transpose_B)
        self.a_layout = None if plan.a_in_regs else ctx.get_layout(plan.a.tensor)
        self.b_layout = ctx.get_layout(plan.b.tensor)
        self.a_local = ctx.local_of(plan.a.tensor) if plan.a_in_regs else None

    def load(self, ki, a_regs, a_base, b_regs, b_base):
        """ldmatrix of k16 slice ``ki``: A tiles to ``a_regs[a_base + 8 mi]``, B tiles to
        ``b_regs[b_base + 4 ni]`` (no A loads when A is in registers)."""
        plan, a, b, lane = self.plan, self.plan.a, self.plan.b, self.lane
        kk = ki * 16
        stmts = []
        if not plan.a_in_regs:
            # A tile (16 x 16) of m-tile mi: stored (m, k) -> ldmatrix.x4; (k, m) -> .trans
            row, col = ldmatrix_origin(lane, 4, rows_first=not self.trans_a)
            for mi in range(plan.tm):
                mm = self.m0 + mi * 16
                ptr = (
                    shared_ptr(a, self.a_layout, kk + row, mm + col)
                    if self.trans_a
                    else shared_ptr(a, self.a_layout, mm + row, kk + col)
                )
                name = "tl::ptx_ldmatrix_x4_trans" if self.trans_a else "tl::ptx_ldmatrix_x4"
                stmts.append(extern_stmt(name, ptr, _addr(a_regs, a_base + 8 * mi)))
        # B tiles: two n8 tiles per ldmatrix.x4 (one per .x2 for an odd last tile)
        ni = 0
        while ni < plan.tn:
            nmat = 4 if ni + 1 < plan.tn else 2
            row, col = ldmatrix_origin(lane, nmat, rows_first=not self.trans_b)
            nn = self.n0 + ni * 8
            ptr = (
                shared_ptr(b, self.b_layout, nn + row, kk + col)
                if self.trans_b
                else shared_ptr(b, self.b_layout, kk + row, nn + col)
            )
            name = f"tl::ptx_ldmatrix_x{nmat}" + ("" if self.trans_b else "_trans")
            stmts.append(extern_stmt(name, ptr, _addr(b_regs, b_base + 4 * ni)))
            ni += nmat // 2
        return stmts

    def mmas(self, ki, a_regs, a_base, b_regs, b_base):
        """The ``tm x tn`` mma.sync of k16 slice ``ki`` from the fragments ``load`` wrote."""
        plan, stmts = self.plan, []
        for mi in range(plan.tm):
            if plan.a_in_regs:
                tile = ki * plan.tm + mi if self.trans_a else mi * plan.tk + ki
                a_ptr = _addr(self.a_local, 8 * tile)
            else:
                a_ptr = _addr(a_regs, a_base + 8 * mi)
            for nj in range(plan.tn):
                # serpentine over n keeps one B operand live across consecutive mmas
                ni = nj if mi % 2 == 0 else plan.tn - 1 - nj
                acc = _addr(self.c_local, 4 * (mi * plan.tn + ni))
                b_ptr = _addr(b_regs, b_base + 4 * ni)
                stmts.append(extern_stmt(self.mma, acc, a_ptr, b_ptr, acc))
        return stmts


def _phase_of(v) -> int:
    attrs = v.call.attrs
    return int(attrs[ATTR_MMA_PHASE]) if attrs is not None and ATTR_MMA_PHASE in attrs else 0


def lower_gemm_cuda(v, ctx):
    """ldmatrix + mma.sync.m16n8k16 (see the module docstring); int8/tf32 elsewhere."""
    plan = GemmPlan(v, _threads_of(ctx))
    if plan.in_dtype not in _MMA_16BIT:
        from .int8_tf32_cuda import lower_gemm_int8_tf32

        return lower_gemm_int8_tf32(plan, v, ctx)
    _check_layout(ctx, plan.c.tensor, plan.c_fragment(), "accumulator", v.loc)
    if plan.a_in_regs:
        _check_layout(ctx, plan.a.tensor, plan.a_fragment(), "A operand", v.loc)
    emit = _MmaEmitter(plan, v, ctx)
    phase = _phase_of(v)
    if phase:
        if not mma_phases_supported(plan, v):
            raise errors.compile_error(
                f"T.gemm {plan.a.name} x {plan.b.name}: internal error, a pipelined gemm "
                "phase on a gemm that cannot be split",
                v.loc,
            )
        a_buf, b_buf = v.call.attrs[ATTR_MMA_FRAG_A], v.call.attrs[ATTR_MMA_FRAG_B]
        sa, sb = 8 * plan.tm, 4 * plan.tn  # one slice's A / B fragment elements
        if phase == PHASE_PREFETCH:
            return irb.seq(emit.load(0, a_buf, 0, b_buf, 0))
        if phase == PHASE_LAST:
            last = plan.tk - 1
            return irb.seq(emit.mmas(last, a_buf, sa * (last % 2), b_buf, sb * (last % 2)))
        attrs = v.call.attrs
        lo, hi = 0, plan.tk - 1
        if ATTR_MMA_SLICES in attrs:
            lo, hi = (int(x) for x in attrs[ATTR_MMA_SLICES])
        stmts = []
        for ki in range(lo, hi):
            cur, nxt = ki % 2, (ki + 1) % 2
            stmts += emit.load(ki + 1, a_buf, sa * nxt, b_buf, sb * nxt)
            stmts += emit.mmas(ki, a_buf, sa * cur, b_buf, sb * cur)
        return irb.seq(stmts)
    stmts = []
    if v.clear_accum:
        nregs = plan.tm * plan.tn * 4
        stmts.append(
            irb.loop_nest(
                [nregs],
                lambda i: ir.TensorStore(emit.c_local, [i[0]], ir.const(0.0, "float32")),
                names=["i"],
                kind=ir.ForKind.UNROLLED,
            )
        )
    a_regs = None
    if not plan.a_in_regs:
        a_regs, bind = _new_local(f"{plan.a.name}_mma", 8 * plan.tm, plan.in_dtype)
        stmts.append(bind)
    b_regs, bind = _new_local(f"{plan.b.name}_mma", 4 * plan.tn, plan.in_dtype)
    stmts.append(bind)
    for ki in range(plan.tk):
        stmts += emit.load(ki, a_regs, 0, b_regs, 0)
        stmts += emit.mmas(ki, a_regs, 0, b_regs, 0)
    return irb.seq(stmts)


# ---------------------------------------------------------------------------------------
# sm_90a dispatch (wgmma). The registered ("gemm", "cuda") rules use the wgmma path of
# gemm_wgmma.py when wgmma_plan_for() accepts the gemm (sm_90a, fp16/bf16 A and B in shared
# memory, a warpgroup-compatible tile, layouts known so far compatible), else the mma.sync
# rules above; ``tl.gemm_scalar`` selects the scalar rules of scalar_cuda.py instead.
# ---------------------------------------------------------------------------------------
@layout_rule("gemm", "cuda")
def infer_gemm_layout_dispatch(v, ctx):
    """wgmma layouts on sm_90a when the gemm fits, else :func:`infer_gemm_layout_cuda`.

    With ``ctx.prefer_mma`` (layout inference's second attempt after a layout conflict,
    see ``transform/layout_inference.py``) a gemm whose wgmma accumulator puts rows on
    other threads than the mma.sync one takes the mma.sync path: with more than 64 rows
    per warpgroup each warp owns rows ``16 w + 64 i`` of wgmma's m64 instructions, but
    the contiguous rows ``w * M / warps ...`` of an mma.sync warp tile, so the row
    vectors of FlashAttention (a wgmma Q @ K^T next to an mma.sync P @ V whose A is in
    registers) could follow only one of them.
    """
    from .wgmma_cuda import infer_gemm_layout_wgmma, wgmma_plan_for

    if ctx.options["gemm_scalar"]:
        from .scalar_cuda import gemm_layout

        check_range_alignment(v, ctx, None)
        return gemm_layout(v, ctx)
    plan = wgmma_plan_for(v, ctx)
    check_range_alignment(v, ctx, plan)
    if plan is not None and getattr(ctx, "prefer_mma", False):
        plan = _wgmma_unless_rows_differ(plan, v, ctx)
    if plan is not None:
        return infer_gemm_layout_wgmma(plan, ctx)
    return infer_gemm_layout_cuda(v, ctx)


def check_range_alignment(v, ctx, wgmma_plan) -> None:
    """A CompileError (at the gemm's line) when the gemm runs on threads ``[lo, hi)`` of the
    block (under ``if tx < n`` / ``T.ws``: ``ctx`` is ``lowering.thread_range.range_context``'s,
    ``ctx.range_offset = lo``) that are not whole warps (mma.sync, scalar) or, when it lowers
    to wgmma, not whole warpgroups: those instructions run on hardware warps/warpgroups."""
    if getattr(ctx, "range_offset", None) is None:
        return
    lo = int(ctx.range_offset)
    hi = lo + int(ctx.threads)
    unit, what = (4 * WARP, "warpgroups (128 threads)") if wgmma_plan else (WARP, "warps")
    if lo % unit or (hi - lo) % unit:
        inst = "wgmma" if wgmma_plan else "mma.sync"
        raise errors.compile_error(
            f"T.gemm runs on threads {lo}..{hi - 1} of the block (the `if` / T.ws around it), "
            f"which are not whole {what}: {inst} is issued by whole {what}; keep a range "
            f"that starts and ends on a multiple of {unit} threads",
            v.loc,
        )


def _wgmma_unless_rows_differ(plan, v, ctx):
    """``plan``, or None when the mma.sync C fragment holds C on other threads."""
    from ...lowering.fragments import same_threads

    try:
        mma_c = GemmPlan(v, _threads_of(ctx)).c_fragment()
    except errors.CompileError:  # no mma.sync plan: keep wgmma
        return plan
    return plan if same_threads(plan.c_fragment(), mma_c) else None


@lower_rule("gemm", "cuda")
def lower_gemm_dispatch(v, ctx):
    """wgmma when the layouts the rule chose are the wgmma ones, else :func:`lower_gemm_cuda`."""
    from .wgmma_cuda import lower_gemm_wgmma, wgmma_plan_for

    if ctx.options["gemm_scalar"]:
        from .scalar_cuda import lower_gemm_scalar

        check_range_alignment(v, ctx, None)
        return lower_gemm_scalar(v, ctx)
    plan = wgmma_plan_for(v, ctx, require_known=True)
    check_range_alignment(v, ctx, plan)
    if plan is not None:
        return lower_gemm_wgmma(v, ctx, plan)
    return lower_gemm_cuda(v, ctx)


__all__ = [
    "ATTR_MMA_FRAG_A",
    "ATTR_MMA_FRAG_B",
    "ATTR_MMA_PHASE",
    "ATTR_MMA_SLICES",
    "PHASE_LAST",
    "PHASE_MAIN",
    "PHASE_PREFETCH",
    "GemmPlan",
    "infer_gemm_layout_cuda",
    "infer_gemm_layout_dispatch",
    "lower_gemm_cuda",
    "lower_gemm_dispatch",
    "mma_fragment_buffers",
    "mma_phases_supported",
    "warp_partition",
]
