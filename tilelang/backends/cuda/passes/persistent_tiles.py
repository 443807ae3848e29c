"""Persistent warp-specialized kernels (CUDA sm_90a, pass config ``tl.persistent_tiles``).

An automatically warp-specialized kernel (:mod:`.warp_specialize_auto`) normally runs one
block per output tile: the producer fills the stages, the consumers run the loop and the
epilogue while the producer idles, and the SM waits for the next block. Persistent, the
kernel launches ``G = min(tiles, SM count)`` blocks and each walks the tiles
``blockIdx.x, blockIdx.x + G, ...`` (``tiles`` = the product of the user's grid)::

    launch G blocks (host: min(tiles, __tl_sm_count()), the device's multiProcessorCount)
    [binds not reading a block index, allocations, mbarrier init]
    if tx < T:                                          consumers
        for j in range(ceildiv(tiles - blockIdx.x, gridDim.x)):
            tile = blockIdx.x + j * gridDim.x
            bx, by, bz = tile % gx, tile // gx % gy, tile // (gx gy)
            [the user's binds reading block indices: T.use_swizzle's panels]
            tile_iter_base = j * n                      (n: the pipelined loop's extent)
            [statements before the loop]; the loop (rings at tile_iter_base + k - begin)
            [the drain]; arrive(empty[last stage of the tile])
            if tx == 0: cp.async.bulk.wait_group.read 0 (the previous tile's store)
            bar.sync 1, T
            [epilogue]                                  (TMA store: commit, no wait)
        if tx == 0: cp.async.bulk.wait_group.read 0
    else: if tx == T: the same tile loop around the producer's loop

The full/empty rings' stage and phase (``(base + rel) % S``, ``(base + rel) / S % 2``)
run on across tiles, so the producer loads the next tile's first stages while the
consumers store the current one: its epilogue tile must not take the stage bytes
(:mod:`.tma_store` allocates it; the tile loop is one statement for
:mod:`.plan_shared_memory`, so everything it touches stays live across it). Correctness
does not depend on ``G``: every block computes the tiles of its own sequence.

Applies when: ``tl.persistent_tiles`` is on, the target is sm_90a, the kernel's pipelined
loop is warp-specialized (an ordered ``T.Pipelined(order=, stage=)`` consumer loop too:
``pipeline_order.ordered_loop`` offsets its stage indices and hands the last iteration's
late-read stages back), the grid is static, there is no cluster launch (``cluster_dims``, ``tl.cluster_multicast``), no atomic
on global memory, no ``while`` loop, the loop's extent reads no block index and block
indices appear only in binds before the split and inside it. Otherwise the kernel is
unchanged and ``tl.tma`` says why (:func:`ring_base`, :func:`stage_persistent_tiles`).
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm_tirx import ir, sym, tirx
from tvm_tirx.ir import prim as P

from ....lowering.stmt import (
    alloc_of,
    bound_vars,
    flatten_seq,
    launch_of,
    launches_of,
    substitute,
    uses_any,
    with_launch_body,
)
from ....lowering.thread_utils import extern_calls, extern_name, sync_threads
from ....lowering.thread_utils import extern_stmt as _call
from ..tensor_map import ATTR_TMA

#: Host helper (``host_library``) giving the current device's multiprocessor count.
SM_COUNT_FUNC = "__tl_sm_count"
#: Device helper (``tl_templates/cuda/common.h``): ``gridDim.x`` as an int.
GRID_DIM_FUNC = "tl::grid_dim_x"
_NOTE = "persistent tiles"
_WAIT_READ = "tl::tma_store_wait_read<0>"


@dataclass
class PersistentPlan:
    """What pipeline planning decided for the tile loop (``ctx.persistent``)."""

    base: ir.Var  # iterations of the ring before this tile (bound per tile)
    loop: ir.Var  # the warp-specialized loop's variable
    extent: object  # its iteration count (the same for every tile)


def _i32(x):
    return ir.const(int(x), "int32")


def _block_launches(body):
    return [(tag, ext, var) for tag, ext, var in launches_of(body)[0] if tag.startswith("block")]


def _why_not(planner, loop, ordered) -> str | None:
    """Why the kernel cannot be persistent, or None."""
    pctx = planner.pctx
    if pctx.arch != "sm_90a":
        return f"needs sm_90a (target {pctx.arch})"
    cluster = tuple(int(d) for d in getattr(pctx, "cluster_dims", (1, 1, 1)))
    if cluster != (1, 1, 1) or int(pctx.options.get("cluster_multicast") or 1) > 1:
        return "a thread-block cluster launch (cluster_dims / tl.cluster_multicast)"
    blocks = _block_launches(planner.root)
    if not blocks:
        return "the kernel has no block index"
    if any(not isinstance(ext, ir.IntImm) for _, ext, _ in blocks):
        return "the grid is not static"
    if not any(tag == "blockIdx.x" for tag, _, _ in blocks):
        return "the kernel has no blockIdx.x"
    tiles = 1
    for _, ext, _ in blocks:
        tiles *= int(ext)
    if tiles < 2:
        return "the grid has one block"
    _, inner = launches_of(planner.root)
    bad = []

    def call(c):
        name = extern_name(c) or getattr(c.op, "name", "") or ""
        if "atomic" in name or "sync_grid" in name:
            bad.append(f"a cross-block operation ({name})")

    tvm_ffi.structural_walk(
        inner, [(ir.Call, call), (ir.While, lambda w: bad.append("a while loop"))]
    )
    if bad:
        return bad[0]
    kernel_vars = [var for _, _, var in launches_of(planner.root)[0]] + bound_vars(inner)
    if uses_any(loop.end - loop.begin, kernel_vars):
        return f"the extent of loop {loop.var.name} depends on a value the kernel computes"
    need, limit = _shared_estimate(planner, loop, inner)
    if need > limit:
        return (
            f"about {need} bytes of shared memory with every tile apart from the stages "
            f"(the epilogue overlaps the next tile's loads), {pctx.arch} allows {limit}"
        )
    return None


def _shared_estimate(planner, loop, inner):
    """(shared bytes the persistent kernel needs at most, the architecture's limit): every
    shared tile (those the loop copies into times its stages) and the staging tile of each
    epilogue ``T.copy(fragment -> global)`` that ``tma_store`` stages, none of them sharing
    bytes with another, 1 KB alignment slack each."""
    from ....layout import expr as E
    from ....lowering.region import RegionView
    from ....lowering.thread_utils import _bits, is_fragment, is_global, is_shared
    from ....ops import tile_op_of
    from ....ops.copy.op import COPY
    from .plan_shared_memory import smem_limit, tile_bytes

    pctx = planner.pctx
    stages = int((loop.annotations or {}).get("num_stages", 1))

    def copies(node):
        out = []

        def visit(stmt):
            hit = tile_op_of(stmt)
            if hit is not None and hit[0] is COPY:
                view = COPY.view(hit[1])
                out.append((RegionView.of(view.src), RegionView.of(view.dst)))

        tvm_ffi.structural_walk(node, [(ir.Evaluate, visit)])
        return out

    staged = {dst.tensor.__chandle__() for _, dst in copies(loop.body) if is_shared(dst.tensor)}
    total = 0
    for s in flatten_seq(inner):
        var = alloc_of(s)
        if var is not None and is_shared(var):
            times = stages if var.__chandle__() in staged else 1
            total += tile_bytes(var) * times + 1024
    option = pctx.options.get("tma_store_epilogue")
    for src, dst in copies(inner):
        if not (is_fragment(src.tensor) and is_global(dst.tensor)):
            continue
        if option is False or (option is None and dst.dtype not in ("float16", "bfloat16")):
            continue
        elems = E.as_const_int(E.prod(list(src.tensor.ty.shape))) or 0
        total += elems * _bits(dst.tensor) // 8 + 1024
    return total, smem_limit(pctx.arch)


def ring_base(planner, loop, ordered=None):
    """The Var counting the ring iterations of earlier tiles when the kernel of ``planner``
    becomes persistent (the ``tl.persistent_tiles`` plan, recorded as ``ctx.persistent``),
    else None (the reason noted in ``tl.tma`` once). Called for the warp-specialized loop
    by ``tma_lowering.tma_loop`` (the consumer's stage index) and ``ws_loop`` (rings)."""
    pctx = planner.pctx
    option = pctx.options.get("persistent_tiles")
    if option is False or (option is None and not default_applies(planner, loop, ordered)):
        return None
    plan = getattr(pctx, "persistent", None)
    if plan is not None:
        return plan.base if plan.loop.same_as(loop.var) else None
    if getattr(pctx, "persistent_reason", None) is not None:
        return None
    reason = _why_not(planner, loop, ordered)
    if reason is not None:
        pctx.persistent_reason = reason
        if option:  # asked for: say why not (by default the kernel is left alone quietly)
            pctx.tma_notes.append(f"{_NOTE}: not applied ({reason})")
        return None
    pctx.persistent = PersistentPlan(
        ir.Var("tile_iter_base", "int32"), loop.var, loop.end - loop.begin
    )
    return pctx.persistent.base


def default_applies(planner, loop, ordered) -> bool:
    """Whether ``tl.persistent_tiles`` unset makes the kernel persistent (where it can be):
    a GEMM's loop - one gemm, not software-pipelined (FlashAttention's two-gemm loop measured
    0.97x of its non-persistent self on the H200) - in a block of 256 or more consumer
    threads, whose ``setmaxnreg`` split keeps one block per SM anyway (the README GEMM
    128x256x64: 4096³ 0.99 -> 1.03x torch fp16, 1.00 -> 1.14x bf16; 8192³ 1.06 -> 1.13x /
    1.18x, session 8)."""
    if ordered is not None or int(planner.threads) < 256:
        return False
    gemms = []

    def visit(node):
        if planner._reader_of(node) is not None:
            gemms.append(node)

    tvm_ffi.structural_walk(loop.body, [(ir.Evaluate, visit)])
    return len(gemms) == 1


def persistent(ctx) -> bool:
    """Whether pipeline planning planned a persistent kernel not given up since."""
    return (
        getattr(ctx, "persistent", None) is not None
        and getattr(ctx, "persistent_reason", None) is None
    )


def cancel(ctx, reason):
    """Give the persistent plan up (a later stage found a reason); the tile loop is not
    built and the ring base becomes 0."""
    if getattr(ctx, "persistent", None) is not None:
        ctx.persistent_reason = reason
        ctx.tma_notes.append(f"{_NOTE}: not applied ({reason})")


# ---------------------------------------------------------------------------------------
# the stage: the tile loop around both branches
# ---------------------------------------------------------------------------------------
def _split_index(stmts):
    from .warp_specialize_auto import CONSUMER_MARKER

    for i, s in enumerate(stmts):
        if isinstance(s, ir.If) and s.else_case is not None:
            first = flatten_seq(s.then_case)
            if first and extern_name(first[0]) == CONSUMER_MARKER:
                return i
    return None


def _prefix_len(stmts) -> int:
    """Leading statements that stay outside the tile loop: the consumer marker and
    ``setmaxnreg``."""
    from .warp_specialize_auto import CONSUMER_MARKER

    n = 0
    for s in stmts:
        name = extern_name(s) if isinstance(s, ir.Evaluate) else None
        if name is None or not (name.startswith("tl::set_max_nreg") or name == CONSUMER_MARKER):
            break
        n += 1
    return n


def _without_last_wait(stmt):
    """``stmt`` without its last ``tma_store_wait_read<0>`` (that store's read is awaited
    before the next tile's epilogue instead); earlier ones stay (a tile reused within
    the epilogue). Looks through sequences and ``if``s only; None when there is none."""
    if isinstance(stmt, ir.SeqStmt):
        seq = list(stmt.seq)
        for i in range(len(seq) - 1, -1, -1):
            if extern_name(seq[i]) == _WAIT_READ:
                rest = seq[:i] + seq[i + 1 :]
            elif extern_calls(seq[i], _WAIT_READ):
                new = _without_last_wait(seq[i])
                if new is None:
                    return None
                rest = [*seq[:i], new, *seq[i + 1 :]]
            else:
                continue
            return None if not rest else rest[0] if len(rest) == 1 else ir.SeqStmt(rest)
        return None
    if isinstance(stmt, ir.If) and extern_calls(stmt.then_case, _WAIT_READ):
        if stmt.else_case is not None and extern_calls(stmt.else_case, _WAIT_READ):
            return None
        new = _without_last_wait(stmt.then_case)
        return None if new is None else ir.If(stmt.condition, new, stmt.else_case)
    return None


def _epilogue_guarded(stmts, tx):
    """(``stmts`` with the epilogue guard, whether it has TMA stores): after the last
    statement using the mbarrier rings, thread 0 waits until its previous tile's TMA
    store has read the epilogue tile, and the consumers meet at a barrier before anyone
    writes it again (the wait after the last commit is dropped)."""
    last = max((i for i, s in enumerate(stmts) if extern_calls(s, "tl::mbarrier_")), default=None)
    if last is None or last == len(stmts) - 1:
        return stmts, False
    post = list(stmts[last + 1 :])
    stores = any(extern_calls(s, "tl::tma_store_") for s in post)
    waits = [i for i, s in enumerate(post) if extern_calls(s, _WAIT_READ)]
    if waits:  # the last store's wait moves to the guard (the read overlaps the next loop)
        i = waits[-1]
        if extern_name(post[i]) == _WAIT_READ:
            del post[i]
        else:
            new = _without_last_wait(post[i])
            post[i] = post[i] if new is None else new
    guard = [ir.If(tx == 0, _call(_WAIT_READ), None)] if stores else []
    return [*stmts[: last + 1], *guard, sync_threads(), *post], stores


def _tile_loop(name, tiles, bid, grid, body_stmts, prelude):
    """``for j in range(ceildiv(tiles - bid, grid)): prelude(j); body``."""
    j = ir.Var(name, "int32")
    # (non-negative operands: C division, no floor corrections)
    count = tirx.truncdiv(_i32(tiles) - bid + grid - _i32(1), grid)
    body = ir.SeqStmt(prelude(j) + list(body_stmts))
    return ir.For(j, _i32(0), count, _i32(1), ir.ForKind.DEFAULT, body, None, ir.UNKNOWN_LOC)


def _relaunch(stmt, bid, extent):
    """The launch chain ``stmt`` with ``blockIdx.x`` bound to ``bid`` over ``extent`` and
    the other block launches dropped."""
    while isinstance(stmt, ir.SeqStmt) and len(stmt.seq) == 1:
        stmt = stmt.seq[0]
    launch = launch_of(stmt)
    if launch is None or not launch[0].startswith("block"):
        return stmt
    inner = _relaunch(stmt.body, bid, extent)
    if launch[0] != "blockIdx.x":
        return inner
    args = list(stmt.args)
    args[1] = extent
    return ir.RegionStmt(stmt.op, args, [bid], stmt.attrs, inner, stmt.result_vars, stmt.loc)


def _block_index_binds(dims, tiles, tile):
    """``(Var, value)`` of each block index of the ``dims`` grid (x fastest) at ``tile``."""
    out, stride = [], 1
    for tag in ("blockIdx.x", "blockIdx.y", "blockIdx.z"):
        if tag not in dims:
            continue
        ext, var = dims[tag]
        value = tile if stride == 1 else tirx.truncdiv(tile, _i32(stride))
        if ext == 1:
            value = _i32(0)
        elif stride * ext < tiles:
            value = tirx.truncmod(value, _i32(ext))  # (tile >= 0: C's % is the floor mod)
        out.append((var, value))
        stride *= ext
    return out


def _truncating(moved, dims):
    """The ``moved`` binds with each ``floordiv`` / ``floormod`` whose dividend is provably
    >= 0 and divisor provably > 0 replaced by ``truncdiv`` / ``truncmod`` (equal there).

    In the tile loop the block indices are bound to ``tile % gx, ...`` with ``tile = bid +
    j * grid``, whose sign TIRx cannot see (``grid`` is a run-time value): the floor
    operations of ``T.use_swizzle``'s panels (a run-time panel width) would be lowered
    with sign corrections, each proved or refuted through TIRx's slow symbolic prover
    (~80 ms of the README GEMM's compile). Here each block index lies in ``[0, extent)``
    (``0 <= tile < tiles``), so the binds read as in a kernel of one tile per block,
    where TIRx proves the same facts from the launch ranges and prints the same C.
    """
    analyzer = sym.Analyzer()
    context = sym.ConstraintContext()
    for ext, var in dims.values():
        context.append(sym.RangeConstraint(var, ir.Range.from_min_extent(0, ext)))
    analyzer.sync_constraint_context(context)

    def trunc(node):
        a, b = node.a, node.b
        if not (analyzer.can_prove(a >= 0) and analyzer.can_prove(b > 0)):
            return node
        return tirx.truncdiv(a, b) if isinstance(node, P.FloorDiv) else tirx.truncmod(a, b)

    out = []
    for bind in moved:
        value = tvm_ffi.structural_map(bind.value, [(P.FloorDiv, trunc), (P.FloorMod, trunc)])
        if not value.same_as(bind.value):
            bind = ir.Bind(bind.var, value, loc=bind.loc)
        out.append(bind)
        if str(bind.var.ty).startswith(("int", "uint")):  # (the analyzer's facts: integers)
            context.append(sym.BindingConstraint(bind.var, value))
            analyzer.sync_constraint_context(context)
    return out


def persistent_tiles(func, ctx):
    """``func`` (tile level, after ``tma_store``) as the persistent kernel of the module
    doc when pipeline planning planned one (``ctx.persistent``); else unchanged."""
    plan = getattr(ctx, "persistent", None)
    if plan is None:
        if ctx.options.get("persistent_tiles") and getattr(ctx, "persistent_reason", None) is None:
            return _not_applied(func, ctx, "the kernel is not automatically warp-specialized")
        return func
    if getattr(ctx, "persistent_reason", None) is not None:  # given up after planning
        return func.with_body(_one_tile(func.body, plan))
    launches, inner = launches_of(func.body)
    stmts = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    at = _split_index(stmts)
    if at is None:  # planned, but the loop was not warp-specialized in the end
        ctx.persistent = None
        func = func.with_body(_one_tile(func.body, plan))
        return _not_applied(func, ctx, "the kernel is not automatically warp-specialized")
    tx = next(var for tag, _, var in launches if tag == "threadIdx.x")
    dims = {tag: (int(ext), var) for tag, ext, var in _block_launches(func.body)}
    tiles = 1
    for ext, _ in dims.values():
        tiles *= ext
    # binds before the split that read a block index move into the tile loops
    block_vars = [var for _, var in dims.values()]
    dependent = list(block_vars)
    moved, kept = [], []
    for s in stmts[:at]:
        if isinstance(s, ir.Bind) and alloc_of(s) is None and uses_any(s.value, dependent):
            dependent.append(s.var)
            moved.append(s)
        else:
            kept.append(s)
    if any(uses_any(s, dependent) for s in kept + stmts[at + 1 :]):
        cancel(ctx, "a block index is used outside the warp-specialized branches")
        return func.with_body(_one_tile(func.body, plan))
    moved = _truncating(moved, dims)

    bid = ir.Var("block_id", "int32")
    grid = ir.Var("num_blocks", "int32")

    def prelude(rename, suffix):
        def make(j):
            tile = ir.Var(f"tile{suffix}", "int32")
            out = [ir.Bind(tile, bid + j * grid)]
            out += [ir.Bind(var, value) for var, value in _block_index_binds(dims, tiles, tile)]
            out += moved
            out.append(ir.Bind(plan.base, j * plan.extent))
            return [substitute(x, rename) for x in out] if rename else out

        return make

    # the consumers bind the original Vars, the producer fresh copies (one bind per Var)
    split = stmts[at]
    consumer = flatten_seq(split.then_case)
    n = _prefix_len(consumer)
    body, stores = _epilogue_guarded(consumer[n:], tx)
    c_loop = _tile_loop("tile_j", tiles, bid, grid, body, prelude({}, ""))
    c_after = [ir.If(tx == 0, _call(_WAIT_READ), None)] if stores else []
    new_consumer = ir.SeqStmt([*consumer[:n], c_loop, *c_after])

    fresh = {v: ir.Var(f"{v.name}_load", v.ty) for v in [*block_vars, *(b.var for b in moved)]}
    fresh[plan.base] = ir.Var(f"{plan.base.name}_load", "int32")
    producer = flatten_seq(split.else_case)
    pn = _prefix_len(producer)
    rest = [substitute(s, fresh) for s in producer[pn:]]
    make = prelude(fresh, "_load")
    if len(rest) == 1 and isinstance(rest[0], ir.If) and rest[0].else_case is None:
        guard = rest[0]  # if tx == T: the loop (the other producer threads stay idle)
        loop = _tile_loop("tile_j_load", tiles, bid, grid, [guard.then_case], make)
        rest = [ir.If(guard.condition, loop, None)]
    else:
        rest = [_tile_loop("tile_j_load", tiles, bid, grid, rest, make)]
    new_producer = ir.SeqStmt([*producer[:pn], *rest])
    new_split = ir.If(split.condition, new_consumer, new_producer)

    grid_bind = ir.Bind(grid, tirx.call_extern(GRID_DIM_FUNC, ty="int32"))
    new_inner = ir.SeqStmt([*kept, grid_bind, new_split, *stmts[at + 1 :]])
    extent = tirx.min(_i32(tiles), tirx.call_extern(SM_COUNT_FUNC, ty="int32"))
    body = _relaunch(with_launch_body(func.body, new_inner), bid, extent)
    shape = " x ".join(str(ext) for ext, _ in dims.values())
    ctx.tma_notes.append(
        f"{_NOTE}: persistent: G = min(tiles, SMs) blocks, tiles = {shape} = {tiles}; tile "
        f"loop `for tile in range(blockIdx.x, {tiles}, gridDim.x)` in both branches, block "
        f"indices recomputed from tile; the mbarrier rings run on across tiles (iteration "
        f"base tile_j * {plan.extent})"
        + ("; the TMA store's read awaited before the next tile's epilogue" if stores else "")
    )
    return func.with_body(body).with_attr(ATTR_TMA, list(ctx.tma_notes))


def _one_tile(body, plan):
    """``body`` planned for a persistent kernel back to one tile per block: the ring base
    0 and the release of the tile's last stage after the drain gone."""

    release = {"tl::mbarrier_arrive", "tl::fence_proxy_async_shared"}

    def extra_release(x):  # (not the producer's arrive.expect_tx: it reads its own loop)
        names = {extern_name(c) for c in extern_calls(x)}
        return (
            not isinstance(x, ir.For)
            and "tl::mbarrier_arrive" in names
            and names <= release
            and uses_any(x, [plan.base])
            and not uses_any(x, [plan.loop])
        )

    def seq(s):
        kept = [x for x in s.seq if not extra_release(x)]
        return kept[0] if len(kept) == 1 else ir.SeqStmt(kept)

    body = tvm_ffi.structural_map(body, [(ir.SeqStmt, seq)])
    return substitute(body, {plan.base: _i32(0)})


def _not_applied(func, ctx, reason):
    ctx.persistent_reason = reason
    ctx.tma_notes.append(f"{_NOTE}: not applied ({reason})")
    return func.with_attr(ATTR_TMA, list(ctx.tma_notes))


def stage_persistent_tiles(func, state):
    """Pipeline stage (after ``tma_store``): the tile loop of a persistent kernel."""
    return persistent_tiles(func, state.ctx)


__all__ = [
    "GRID_DIM_FUNC",
    "SM_COUNT_FUNC",
    "PersistentPlan",
    "cancel",
    "persistent",
    "persistent_tiles",
    "ring_base",
    "stage_persistent_tiles",
]
