"""The CUDA backend pipeline: traced tilelang kernel -> thread-level TIRx -> CudaArtifact.

Every stage is ``stage(func, state) -> func``: it takes the TIRx function and the typed
:class:`CudaLowering` state, and returns the next function. Decisions a stage makes are
written onto the function as attributes (``tl.layouts``, ``tl.loop_layouts``,
``tl.shared_memory``), so ``tilelang.lower(...)`` and ``TILELANG_DUMP_IR`` show them right
after the stage that made them. The passes live in ``passes/``; the tile-op rules in
``tilelang/ops/<op>/``.

``lower(func, target)`` returns the thread-level function (what tests inspect);
``build(func, target, ...)`` compiles it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm_tirx import ir

from ... import errors
from ...engine.instrument import run_stages
from ...engine.pass_config import build_options
from ...layout import expr as E
from ...lowering.atomic_mem import stage_cuda as stage_atomic_mem
from ...lowering.cuda_context import CudaLowerContext
from ...lowering.global_layouts import no_vectors_for
from ...lowering.kernels import lower_each_kernel
from ...lowering.stmt import StripScheduleHints, launches_of, with_launch_body
from ...lowering.thread_utils import is_fragment, new_tensor
from ...transform.apply_global_layouts import apply_global_layouts, collect_global_layouts
from ...transform.legalize_safe_access import legalize_safe_memory_access
from ...transform.lower_tile_ops import LowerTileOps
from ...transform.unswitch_uniform_select import unswitch_uniform_select
from .passes.apply_shared_layouts import apply_shared_layouts
from .passes.cluster_multicast import mark_cluster_launch, take_cluster_dims
from .passes.heavy_blocks_first import heavy_blocks_first
from .passes.insert_sync import insert_sync
from .passes.layout_inference import infer_layouts, strip_layout_annotations
from .passes.lower_assume import stage_lower_assume
from .passes.lower_fragments import lower_fragments
from .passes.lower_parallel import lower_parallel
from .passes.persistent_tiles import stage_persistent_tiles
from .passes.pipeline_planning import plan_pipelines
from .passes.plan_shared_memory import plan_shared_memory
from .passes.proxy_fences import drop_proxy_fences
from .passes.rasterize_blocks import rasterize_blocks
from .passes.tma_lowering import tma_supported
from .passes.tma_store import stage_tma_store
from .passes.warp_specialize import check_ws_scopes, merge_ws_branches
from .passes.warp_specialize_auto import consumer_barriers
from .passes.wgmma_prefetch import stage_wgmma_prefetch_shared_reads
from .passes.wgmma_wait_sinking import sink_wgmma_waits
from .passes.ws_schedule import materialize_ws_schedule, place_ws_roles
from .tensor_map import ATTR_TMA, host_encode_stmts, register_pipeline, uses_tensor_maps


@dataclass
class CudaLowering:
    """What the CUDA stages hand each other besides the function itself.

    ``arch`` and ``options`` (the pass configs' code-generation choices, see
    ``engine.pass_config.build_options``) are fixed before the first stage;
    ``layouts``/``ctx`` are set by ``layout_inference`` and read by the later stages;
    ``global_layouts`` are the ``T.annotate_layout``-ed global tensors (read before any stage).
    """

    arch: str
    options: dict
    global_layouts: dict = field(default_factory=dict)
    thread_var: object = None
    threads: int = 0
    layouts: object = None  # passes.layout_inference.InferResult
    ctx: CudaLowerContext | None = None
    shared_memory: dict = field(default_factory=dict)  # tile name -> (offset, bytes)
    cluster_dims: tuple = (1, 1, 1)  # T.Kernel(cluster_dims=...), passes/cluster_multicast.py
    ws_schedule: object = None  # T.annotate_ws_schedule's WsPlan (passes/ws_schedule.py)


# ------------------------------------------------------------------------------- stages
def stage_cluster_launch(func, state):
    """``T.Kernel(cluster_dims=...)``: the shape moves from its op to ``state.cluster_dims``
    (sm_90+; ``passes/cluster_multicast.py``)."""
    func, dims = take_cluster_dims(func)
    if dims is not None:
        if not tma_supported(state.arch, {}):
            raise errors.compile_error(
                f"T.Kernel(cluster_dims={list(dims)}): thread-block clusters need CUDA sm_90 "
                f"or later (target {state.arch})"
            )
        state.cluster_dims = dims
    return func


def stage_heavy_blocks_first(func, state):
    """``tl.heavy_blocks_first``: a block index whose loops' work provably grows with it
    (causal attention) is reversed, heaviest blocks first; skipped for atomics, ``while``
    loops, clusters and ``T.use_swizzle`` (``passes/heavy_blocks_first.py``). After
    ``cluster_launch`` (reads the cluster shape), before ``rasterize_blocks`` (reads its
    hint). Records ``tl.block_order``."""
    return heavy_blocks_first(
        func,
        state.cluster_dims,
        int(state.options.get("cluster_multicast") or 1),
        state.options.get("heavy_blocks_first", True),
    )


def stage_rasterize_blocks(func, state):
    """``T.use_swizzle``: blocks renumbered in panels for L2 reuse (before anything reads
    blockIdx), at cluster granularity in a cluster launch (the kernel's ``cluster_dims``,
    or ``tl.cluster_multicast`` blocks along x). Assumes a traced kernel; guarantees no
    ``tl.use_swizzle`` remains."""
    cluster = state.cluster_dims[:2]
    multicast = int(state.options.get("cluster_multicast") or 1)
    if cluster == (1, 1) and multicast > 1:
        cluster = (multicast, 1)
    return rasterize_blocks(func, cluster)


def stage_check_ws_scopes(func, state):
    """``T.ws`` scopes hold only per-thread code (``passes/warp_specialize.py``)."""
    check_ws_scopes(func.body)
    return func


def stage_unswitch_uniform_select(func, state):
    """``T.Parallel`` selects on a tile-uniform condition get select-free copies under a
    block-uniform ``if`` (``transform/unswitch_uniform_select.py``; before layout inference,
    which gives each copy its own loop layout; one statement in, one out, so pipeline
    annotations keep their indices; ``tl.unswitch_uniform_select``)."""
    if not state.options.get("unswitch_uniform_select", True):
        return func
    return unswitch_uniform_select(func)


def stage_legalize_safe_memory_access(func, state):
    """Global loads/stores outside ``T.Parallel`` loops that the analyzer cannot prove in
    bounds (SIMT code indexing with the thread) are guarded, as upstream: a store skipped,
    a load reading 0 (``transform/legalize_safe_access.py``; a parallel loop's tails are
    guarded by ``lower_parallel``). Off with ``tl.disable_safe_memory_legalize`` or
    ``tl.enable_bounds_check`` (which traps on those accesses instead)."""
    if not state.options.get("safe_memory_access", True) or state.options.get("bounds_check"):
        return func
    body = legalize_safe_memory_access(func.body, "cuda", everywhere=True, inside_parallel=False)
    return func.with_body(body)


def stage_layout_inference(func, state):
    """Every fragment and ``T.Parallel`` nest gets a Fragment, shared tiles their Layouts.

    Guarantees: ``state.layouts`` / ``state.ctx`` are set; the consumed ``T.annotate_layout``
    statements are gone; the function carries ``tl.layouts`` (tensor -> layout) and
    ``tl.loop_layouts`` (one entry per parallel nest) for the dumps.
    """
    tvar, threads = _thread_info(func)
    info = infer_layouts(func, threads, state.arch, _layout_annotations(func), state.options)
    locals_ = {}
    for var, frag in info.layouts.items():
        if is_fragment(var):
            locals_[var] = new_tensor(
                f"{var.name}_local", [frag.get_local_size()], str(var.ty.dtype), "local"
            )
    state.thread_var, state.threads, state.layouts = tvar, threads, info
    state.ctx = CudaLowerContext(
        "cuda",
        {},
        threads,
        None,
        tvar,
        state.arch,
        info.layouts,
        locals_,
        [],
        {tag: var for tag, _, var in launches_of(func.body)[0]},
        state.options,
    )
    state.ctx.cluster_dims = state.cluster_dims
    func = func.with_body(strip_layout_annotations(func.body))
    func = func.with_attr("tl.layouts", {v.name: repr(lay) for v, lay in info.layouts.items()})
    return func.with_attr("tl.loop_layouts", info.loop_layout_lines())


def stage_pipeline_planning(func, state):
    """``T.Pipelined`` loops: multi-buffered shared tiles, cp.async prologue/steady state,
    gemm phases (tile level, needs the layouts). See ``passes/pipeline_planning.py``.
    On sm_90+ the kernel's one top-level pipelined loop whose copies all fit TMA boxes is
    warp-specialized (a producer warpgroup appended to the block: ``passes/
    warp_specialize_auto.py``); the decisions are recorded as ``tl.tma``."""
    func = plan_pipelines(func, state.ctx)
    if state.ctx.tma_notes:
        func = func.with_attr(ATTR_TMA, list(state.ctx.tma_notes))
    return func


def stage_apply_shared_layouts(func, state):
    """Element accesses of laid-out shared tiles go through their Layout (swizzles)."""
    return func.with_body(apply_shared_layouts(func.body, state.ctx))


def stage_lower_parallel(func, state):
    """``T.Parallel`` nests partitioned over threads by their loop layout."""
    body = lower_parallel(
        func.body, state.layouts.loops, state.thread_var, state.threads, state.ctx
    )
    return func.with_body(body)


def stage_lower_tile_ops(func, state):
    """Each tile op replaced by its ``(op, "cuda")`` rule's thread-level code."""
    return func.with_body(LowerTileOps("cuda")(func.body, state.ctx))


def stage_lower_fragments(func, state):
    """Fragments become per-thread register arrays (``ctx.local_of``)."""
    body = lower_fragments(func.body, state.layouts.layouts, state.ctx.local_arrays, state.ctx)
    return func.with_body(body)


def stage_hoist_allocs(func, state):
    """Allocations the rules requested (``ctx.extra_allocs``) move to the kernel's top."""
    if not state.ctx.extra_allocs:
        return func
    _, inner = launches_of(func.body)
    inner_seq = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
    new_inner = ir.SeqStmt(list(state.ctx.extra_allocs) + inner_seq)
    return func.with_body(with_launch_body(func.body, new_inner))


def stage_insert_sync(func, state):
    """``__syncthreads`` wherever shared memory is handed from some threads to others
    (warp-specialized ``T.ws`` branches chained first: ``passes/warp_specialize.py``; the
    consumer branch of an automatically specialized kernel gets its own analysis with
    ``bar.sync 1, threads``: ``passes/warp_specialize_auto.py``)."""
    body = merge_ws_branches(func.body, state.thread_var)
    # automatic warp specialization: the consumer branch synchronises on a named barrier
    body, _ = consumer_barriers(body, state.thread_var, insert_sync)
    return func.with_body(insert_sync(body, state.thread_var))


def stage_wgmma_wait_sinking(func, state):
    """Each wgmma gemm's ``wgmma.wait_group`` moves down to the first statement that needs
    its result, so independent work overlaps the tensor cores
    (``passes/wgmma_wait_sinking.py``; ``tl.wgmma_wait_sinking``)."""
    if not state.options.get("wgmma_wait_sinking", True):
        return func
    hoist = state.options.get("wgmma_issue_hoisting", True)
    past = state.options.get("wgmma_wait_past_barriers", True)
    paired = state.options.get("wgmma_wait_paired_barriers", False)
    return func.with_body(
        sink_wgmma_waits(func.body, hoist_issues=hoist, past_barriers=past, paired_barriers=paired)
    )


def stage_drop_proxy_fences(func, state):
    """``fence.proxy.async`` calls that order no generic shared access before an async one
    go (``passes/proxy_fences.py``; ``tl.drop_proxy_fences``)."""
    if not state.options.get("drop_proxy_fences", True):
        return func
    return func.with_body(drop_proxy_fences(func.body))


def stage_bounds_check(func, state):
    """``tl.enable_bounds_check``: ``printf`` + ``__trap()`` before every element access not
    proven in bounds (``tilelang/transform/check_bounds.py``)."""
    if not state.options.get("bounds_check"):
        return func
    from ...transform.check_bounds import cuda_check, insert_bounds_checks

    return func.with_body(insert_bounds_checks(func.body, cuda_check, "cuda"))


def stage_plan_shared_memory(func, state):
    """All shared tiles in one ``shared.dyn`` buffer; records ``tl.shared_memory``
    (tile -> [offset, bytes]) on the function."""
    body = plan_shared_memory(
        func.body,
        state.arch,
        state.ctx.layout_map,
        plan=state.shared_memory,
        ws_split=state.thread_var if _specialized(state) else None,
    )
    func = func.with_body(body)
    if state.shared_memory:
        plan = {name: [int(o), int(sz)] for name, (o, sz) in state.shared_memory.items()}
        func = func.with_attr("tl.shared_memory", plan)
    return func


def stage_strip_schedule_hints(func, state):
    """Scheduling annotations only tilelang reads are removed before codegen."""
    return func.with_body(StripScheduleHints("cuda")(func.body, state.ctx))


def stage_apply_global_layouts(func, state):
    """Accesses of laid-out global tensors go to their storage place (last: tail guards
    were computed on logical indices)."""
    return func.with_body(apply_global_layouts(func.body, state.global_layouts))


def stage_widen_indices(func, state):
    """Indices of tensors with 2**31 elements or more computed in int64
    (``tilelang/transform/wide_index.py``)."""
    from ...transform.wide_index import widen_indices

    return func.with_body(widen_indices(func.body))


def stage_exact_float64_constants(func, state):
    """float64 constants the C printer would round (15 fixed decimals: ``1e-20`` -> 0)
    written as their bit patterns (``tilelang/transform/exact_float_constants.py``)."""
    from ...transform.exact_float_constants import exact_float64_constants

    return func.with_body(exact_float64_constants(func.body))


def stage_float_min_max(func, state):
    """Scalar float max/min as ``fmaxf``/``fminf`` (``__hmax``/``__hmin``, ...): one
    instruction each instead of TIRx's NaN-propagating select, upstream's semantics
    (``tilelang/transform/float_min_max.py``); ``tl.nan_propagating_max`` keeps the select."""
    if state.options.get("nan_propagating_max", False):
        return func
    from ...transform.float_min_max import float_min_max_calls

    return func.with_body(float_min_max_calls(func.body, state.arch))


def stage_mark_cluster_launch(func, state):
    """A cluster kernel (``cluster_dims``, or TMA multicast planned by pipeline planning)
    calls ``tl::cluster_dims<x, y, z>()``, turned into ``__cluster_dims__`` on its
    definition (``hopper_source.py``); dynamic grid extents are checked on the host."""
    return mark_cluster_launch(func, state.ctx.cluster_dims if state.ctx else state.cluster_dims)


def stage_tma_host_encode(func, state):
    """The tensor maps of TMA copies are encoded on the host in front of the launch
    (``tensor_map.host_encode_stmts``); the kernel receives them as grid-constant
    parameters. Last: the stages before work on the launch region alone."""
    if not state.ctx.tma_maps:
        return func
    stmts = host_encode_stmts(state.ctx.tma_maps)
    return func.with_body(ir.SeqStmt([*stmts, func.body]))


def stage_materialize_ws_schedule(func, state):
    """``T.annotate_ws_schedule``: checked (clear errors for schedules that do not describe
    the kernel); a producer/consumer schedule on sm_90+ drives the automatic warp
    specialization (its loop's stages = the pipeline depth, the block = the consumer's
    threads), any other runs in program order. Assumes a traced kernel; guarantees no
    schedule marker or ``tl.ws_op_id`` remains (``passes/ws_schedule.py``)."""
    return materialize_ws_schedule(func, state)


def stage_place_ws_roles(func, state):
    """A materialized schedule's roles put on their warps with their ``setmaxnreg``.
    Assumes ``pipeline_planning``'s producer/consumer split; guarantees the block has the
    schedule's ``num_warps`` (``passes/ws_schedule.py``)."""
    return place_ws_roles(func, state)


#: The CUDA pipeline, in order.
STAGES = [
    ("materialize_ws_schedule", stage_materialize_ws_schedule),  # T.annotate_ws_schedule
    ("cluster_launch", stage_cluster_launch),
    ("heavy_blocks_first", stage_heavy_blocks_first),
    ("rasterize_blocks", stage_rasterize_blocks),
    ("check_ws_scopes", stage_check_ws_scopes),
    ("unswitch_uniform_select", stage_unswitch_uniform_select),
    ("legalize_safe_memory_access", stage_legalize_safe_memory_access),
    ("layout_inference", stage_layout_inference),
    ("pipeline_planning", stage_pipeline_planning),
    ("apply_shared_layouts", stage_apply_shared_layouts),
    ("tma_store", stage_tma_store),  # T.copy(shared -> global) as TMA stores (passes/tma_store.py)
    # tl.persistent_tiles: G = min(tiles, SMs) blocks walk a tile loop (passes/persistent_tiles.py)
    ("persistent_tiles", stage_persistent_tiles),
    ("lower_parallel", stage_lower_parallel),
    ("lower_tile_ops", stage_lower_tile_ops),
    ("lower_fragments", stage_lower_fragments),
    ("hoist_allocs", stage_hoist_allocs),
    ("insert_sync", stage_insert_sync),
    ("wgmma_wait_sinking", stage_wgmma_wait_sinking),
    ("wgmma_prefetch_shared_reads", stage_wgmma_prefetch_shared_reads),  # passes/wgmma_prefetch.py
    ("drop_proxy_fences", stage_drop_proxy_fences),
    ("bounds_check", stage_bounds_check),
    ("plan_shared_memory", stage_plan_shared_memory),
    ("place_ws_roles", stage_place_ws_roles),  # the schedule's warps and setmaxnreg
    ("strip_schedule_hints", stage_strip_schedule_hints),
    ("apply_global_layouts", stage_apply_global_layouts),
    ("lower_assume", stage_lower_assume),  # T.assume -> __builtin_assume
    ("lower_atomic_mem", stage_atomic_mem),  # T.atomic_load/store (lowering/atomic_mem.py)
    ("widen_indices", stage_widen_indices),
    ("exact_float64_constants", stage_exact_float64_constants),
    ("float_min_max", stage_float_min_max),
    ("mark_cluster_launch", stage_mark_cluster_launch),
    ("tma_host_encode", stage_tma_host_encode),
]


def lower(func, target=None, pass_configs=None):
    """The thread-level TIRx function for ``func``: :data:`STAGES` in order.

    ``T.alloc_global`` workspaces become trailing parameters; each of several ``T.Kernel``
    blocks runs through the stages on its own, and the joined function launches them in
    order (``tilelang.lowering.kernels``). The stages run through ``tilelang.engine.instrument.run_stages``, so
    ``TILELANG_DUMP_IR``/``tl.enable_dump_ir``, pass timing and ``tilelang.lower`` see each.
    """
    import tilelang.ops  # noqa: F401 - registers the op rules

    options = build_options(pass_configs)
    arch = (target or {}).get("arch", "sm_90a")
    if options["disable_wgmma"] and arch.endswith("a"):
        arch = arch[:-1]  # instruction selection without wgmma; the build keeps the real arch

    def lower_one(part, opts=options):
        state = CudaLowering(arch, opts, collect_global_layouts(part.body))
        try:
            with no_vectors_for(state.global_layouts):
                return run_stages(part, STAGES, pass_configs, state=state)
        except errors.CompileError as err:
            # a warp-specialized kernel keeps every shared tile alive at once (producer and
            # consumers run concurrently): when that does not fit, and TMA was not asked
            # for explicitly, the kernel is lowered again without the producer warpgroup
            if not (_specialized(state) and opts["disable_tma"] is None):
                raise
            if "shared memory:" not in str(err) or "bytes needed" not in str(err):
                raise
            return lower_one(part, {**opts, "warp_specialize": False})

    return lower_each_kernel(func, lower_one)


def build(func, target=None, pass_configs=None, compile_flags=None, compiler=None):
    """Compile ``func`` for CUDA; returns a CudaArtifact."""
    from .build import _nvrtc_available, build_cuda

    target = dict(target or {"kind": "cuda", "arch": "sm_90a"})
    options = build_options(pass_configs)
    lowered = lower(func, target, pass_configs)
    compiler = compiler or ("nvrtc" if _nvrtc_available() else "nvcc")
    return build_cuda(
        lowered,
        pipeline=register_pipeline() if uses_tensor_maps(lowered) else "default",
        arch=target.get("arch", "sm_90a"),
        compiler=compiler,
        compile_flags=[*(compile_flags or ()), *options["device_flags"]],
        fast_math=True if options["fast_math"] is None else options["fast_math"],
        compact=options["compact_source"],
    )


# ------------------------------------------------------------------------------ helpers
def _specialized(state) -> bool:
    """Whether the pipeline_planning stage warp-specialized the kernel."""
    notes = state.ctx.tma_notes if state.ctx is not None else []
    return any("warp-specialized (" in n for n in notes)


def _thread_info(func):
    launches, _ = launches_of(func.body)
    threads = [x for x in launches if x[0].startswith("threadIdx")]
    if not threads:
        raise errors.compile_error("a CUDA kernel needs a T.Kernel(..., threads=N) launch")
    if len(threads) > 1:
        raise errors.compile_error("the CUDA backend supports one thread dimension (threads=N)")
    tag, extent, var = threads[0]
    n = E.as_const_int(extent)
    if n is None:
        raise errors.compile_error("the CUDA block size must be static")
    return var, n


def _layout_annotations(func):
    ann = func.attrs["tl.layout_map"] if func.attrs and "tl.layout_map" in func.attrs else None
    return dict(ann.items()) if ann is not None else {}
