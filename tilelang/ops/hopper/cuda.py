"""CUDA rules of the explicit Hopper API: calls of the ``tl::`` helpers in ``hopper.h``
(mbarrier arrive/expect_tx, setmaxnreg, cluster and named barriers), ``tma.h`` (mbarrier
init/wait/arrive_expect_tx) and ``wgmma.h`` (warpgroup fence/commit/wait).

mbarriers, ``fence.proxy.async`` and cluster barriers need sm_90; ``setmaxnreg`` and the
wgmma group instructions need sm_90a. Older architectures get a CompileError naming the
user's line.
"""

from __future__ import annotations

from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ... import errors
from ...lowering.target_info import cuda_arch_number
from ...lowering.thread_utils import extern_stmt, sync_threads
from ..registry import lower_rule
from . import op


def require_sm90(v, ctx, name: str, arch_specific: bool = False) -> None:
    """CompileError at the user's line unless ``ctx.arch`` is sm_90+ (sm_90a when
    ``arch_specific``: setmaxnreg and wgmma exist only on the ``a`` targets)."""
    number, feat = cuda_arch_number(ctx.arch)
    if number < 90 or (arch_specific and number == 90 and not feat):
        need = "sm_90a" if arch_specific else "sm_90 or later"
        raise errors.compile_error(
            f"T.{name} is not supported on CUDA {ctx.arch} (it needs {need})", v.loc
        )


def _u32(x):
    return ir.const(int(x), "uint32") if isinstance(x, int) else _tirx.Cast("uint32", x)


def bar_ptr(bar):
    """``&bars[i]`` of the barrier element expression ``bars[i]``."""
    return _tirx.address_of(bar)


def _simple(op_def, helper, arch_specific=False):
    @lower_rule(op_def.name, "cuda")
    def rule(v, ctx):
        require_sm90(v, ctx, op_def.name, arch_specific)
        return extern_stmt(helper)

    return rule


for _op, _helper in (
    (op.FENCE_PROXY_ASYNC, "tl::fence_proxy_async"),
    (op.CLUSTER_ARRIVE, "tl::cluster_arrive"),
    (op.CLUSTER_ARRIVE_RELAXED, "tl::cluster_arrive_relaxed"),
    (op.CLUSTER_WAIT, "tl::cluster_wait"),
    (op.CLUSTER_SYNC, "tl::cluster_sync"),
):
    _simple(_op, _helper)
_simple(op.WARPGROUP_ARRIVE, "tl::wgmma_arrive", arch_specific=True)
_simple(op.WARPGROUP_COMMIT_BATCH, "tl::wgmma_commit", arch_specific=True)


@lower_rule("warpgroup_wait", "cuda")
def lower_warpgroup_wait(v, ctx):
    require_sm90(v, ctx, "warpgroup_wait", arch_specific=True)
    return extern_stmt(f"tl::wgmma_wait<{int(v.num_mma)}>")


@lower_rule("set_max_nreg", "cuda")
def lower_set_max_nreg(v, ctx):
    require_sm90(v, ctx, "set_max_nreg", arch_specific=True)
    return extern_stmt(f"tl::set_max_nreg<{int(v.reg_count)}, {int(v.is_inc)}>")


@lower_rule("alloc_barrier", "cuda")
def lower_alloc_barrier(v, ctx):
    """Thread 0 initialises every barrier, fences the init, then the block synchronises."""
    require_sm90(v, ctx, "alloc_barrier")
    tensor = v.bar.source
    inits = [
        extern_stmt(
            "tl::mbarrier_init", bar_ptr(ir.TensorLoad(tensor, [ir.const(i, "int32")])), _u32(c)
        )
        for i, c in enumerate(v.counts)
    ]
    inits.append(extern_stmt("tl::mbarrier_init_fence"))
    return ir.SeqStmt([ir.If(ctx.thread_var == 0, ir.SeqStmt(inits), None), sync_threads()])


def _mbarrier_rule(name, helper, operand=None):
    """Lower ``name`` to ``helper(&bar[, (uint32) v.<operand>])`` (sm_90+)."""

    @lower_rule(name, "cuda")
    def rule(v, ctx):
        require_sm90(v, ctx, name)
        extra = [] if operand is None else [_u32(getattr(v, operand))]
        return extern_stmt(helper, bar_ptr(v.bar), *extra)

    return rule


for _name, _helper, _operand in (
    ("mbarrier_arrive", "tl::mbarrier_arrive", None),
    ("mbarrier_expect_tx", "tl::mbarrier_expect_tx", "tx"),
    ("mbarrier_arrive_expect_tx", "tl::mbarrier_arrive_expect_tx", "tx"),
):
    _mbarrier_rule(_name, _helper, _operand)


@lower_rule("mbarrier_wait_parity", "cuda")
def lower_mbarrier_wait_parity(v, ctx):
    """``tl::mbarrier_wait`` (acquire at CTA scope), or ``tl::mbarrier_wait_cluster`` on a
    cluster barrier, whose phase other blocks' releases complete."""
    require_sm90(v, ctx, "mbarrier_wait_parity")
    helper = "tl::mbarrier_wait_cluster" if int(v.cluster) else "tl::mbarrier_wait"
    return extern_stmt(helper, bar_ptr(v.bar), _u32(v.parity))


@lower_rule("mbarrier_arrive_cluster", "cuda")
def lower_mbarrier_arrive_cluster(v, ctx):
    """``mbarrier.arrive`` on the barrier at the same address in block ``cta`` (``mapa``)."""
    require_sm90(v, ctx, "mbarrier_arrive")
    return extern_stmt("tl::mbarrier_arrive_cluster", bar_ptr(v.bar), _u32(v.cta))


@lower_rule("named_barrier_arrive", "cuda")
def lower_named_barrier_arrive(v, ctx):
    return extern_stmt("tl::named_barrier_arrive", _u32(v.barrier_id), _u32(v.thread_count))


@lower_rule("named_barrier_sync", "cuda")
def lower_named_barrier_sync(v, ctx):
    return extern_stmt("tl::named_barrier_sync", _u32(v.barrier_id), _u32(v.thread_count))


#: The marker a ``T.ws`` branch starts with until ``passes/warp_specialize.py`` chains it.
WS_MARKER = "tl::ws_branch"


@lower_rule("ws", "cuda")
def lower_ws(v, ctx):
    return extern_stmt(WS_MARKER)


@lower_rule("block_rank_in_cluster", "cuda")
def lower_block_rank_in_cluster(v, ctx):
    require_sm90(v, ctx, "block_rank_in_cluster")
    cell = v.out.source
    rank = _tirx.call_extern("tl::block_rank_in_cluster", ty="uint32")
    return ir.TensorStore(cell, list(v.out.indices), _tirx.Cast(str(cell.ty.dtype), rank))


@lower_rule("wait_wgmma", "cuda")
def lower_wgmma_fence_accum(v, ctx):
    """``tl::wgmma_fence_operand<R>`` on the accumulator's registers (after the wait)."""
    require_sm90(v, ctx, "wait_wgmma", arch_specific=True)
    local = ctx.local_of(v.c.source)
    regs = 1
    for extent in local.ty.shape:
        regs *= int(extent)
    addr = _tirx.address_of(ir.TensorLoad(local, [ir.const(0, "int32")]))
    return extern_stmt(f"tl::wgmma_fence_operand<{regs}>", addr)


@lower_rule("wgmma_gemm", "cuda")
def lower_wgmma_gemm_marker(v, ctx):
    require_sm90(v, ctx, "wgmma_gemm", arch_specific=True)
    return None


def _explicit_wgmma_rule(inner, backend):
    """The gemm rule of ``backend``, refusing a ``T.wgmma_gemm`` that cannot lower to wgmma
    (any backend but CUDA; on CUDA below sm_90a or when the layouts are not wgmma's)."""

    def rule(v, ctx):
        attrs = v.call.attrs
        if attrs is not None and op.ATTR_EXPLICIT_WGMMA in attrs:
            if backend != "cuda":
                raise errors.compile_error(
                    f"T.wgmma_gemm is not supported on the {backend} target", v.loc
                )
            from ..gemm.wgmma_cuda import lowers_to_wgmma

            require_sm90(v, ctx, "wgmma_gemm", arch_specific=True)
            if not lowers_to_wgmma(v, ctx):
                raise errors.compile_error(
                    "T.wgmma_gemm: this gemm cannot use wgmma (operand types, tile shape, "
                    "thread count or layouts; T.gemm picks another instruction for it)",
                    v.loc,
                )
        return inner(v, ctx)

    rule.__doc__ = inner.__doc__
    rule._explicit_wgmma = True
    return rule


def _install_explicit_wgmma_check():
    from .. import registry

    for key, current in list(registry._LOWERINGS.items()):
        if key[0] == "gemm" and not getattr(current, "_explicit_wgmma", False):
            registry._LOWERINGS[key] = _explicit_wgmma_rule(current, key[1])


_install_explicit_wgmma_check()
