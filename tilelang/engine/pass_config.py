"""Pass-config keys: ``pass_configs={tilelang.PassConfigKey.X: value}`` on ``jit``/``compile``.

Names follow upstream TileLang where the option exists there. Keys not listed here are
passed through to the pipelines unchanged (a pipeline documents the keys it reads).
Every key is part of the kernel cache key, except the observation-only ones in
:data:`OBSERVATION_KEYS` (IR dumps and pass timing), which change no generated code.
"""

from __future__ import annotations

from enum import Enum


class PassConfigKey(str, Enum):
    """Pass configuration keys understood by tilelang (upstream spellings)."""

    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    """Write the IR after every pipeline stage to a folder. Default: False.

    The folder is ``TL_DUMP_IR_DIR`` (default ``./dump_ir``); the environment variable
    ``TILELANG_DUMP_IR=<dir>`` does the same for every kernel. See
    ``tilelang.engine.instrument``.
    """

    TL_DUMP_IR_DIR = "tl.dump_ir_path"
    """Folder for ``TL_ENABLE_DUMP_IR``; setting it alone also enables the dump.

    ``"tl.dump_ir_dir"`` is accepted as a synonym.
    """

    TL_PASS_PROFILE = "tl.pass_profile"
    """Print a table of the time spent in each pipeline stage. Default: False.

    The environment variable ``TILELANG_PASS_TIMING=1`` does the same for every kernel.
    """

    TL_PASS_PROFILE_THRESHOLD_MS = "tl.pass_profile_threshold_ms"
    """Only list stages slower than this many milliseconds in the timing table. Default: 0."""

    # -- read by the CUDA backend (see build_options) --------------------------------------
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    """CUDA: compile the device code with ``--use_fast_math`` (True) or without (False).
    Unset, tilelang keeps fast math on (upstream's default is off)."""

    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"
    """CUDA: the older spelling of ``TL_ENABLE_FAST_MATH = False``."""

    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    """CUDA: extra NVRTC/nvcc flags, a string (split like a shell) or a list of strings."""

    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    """CUDA sm_90a: lower ``T.gemm`` to ldmatrix + mma.sync instead of wgmma."""

    TL_DISABLE_LDMATRIX = "tl.disable_ldmatrix"
    """CUDA: copy shared tiles to fragments element-wise, never with ``ldmatrix``."""

    TL_GEMM_SCALAR = "tl.gemm_scalar"
    """CUDA: lower ``T.gemm`` to plain FMAs (slow; any layout). Used to run a kernel's
    CUDA lowering in the CUDA emulator (``tilelang.testing.cuda_emulator``), which has no
    tensor-core model for mma.sync. Default: False."""

    TL_DROP_PROXY_FENCES = "tl.drop_proxy_fences"
    """CUDA sm_90a: drop each ``fence.proxy.async`` (SASS ``MEMBAR.ALL.CTA;
    FENCE.VIEW.ASYNC.S``) that orders no generic shared-memory access before an async-proxy
    one (wgmma operand reads, TMA); the wgmma lowering puts one before every gemm
    (``backends/cuda/passes/proxy_fences.py``). FlashAttention backward: 4 per iteration ->
    1. Default: True."""

    TL_REDUCE_MERGED_EXCHANGE = "tl.reduce_merged_exchange"
    """CUDA: a ``T.reduce_*`` whose rows span warps exchanges all of a thread's rows through
    shared memory at once (one lane per shuffle group writes, one barrier, all read), in a
    workspace no larger than one slot per thread; off: one write + barrier + read per row
    (MLA decode's two cross-warpgroup reductions: 8 barriers per iteration -> 2).
    Default: True."""

    TL_WGMMA_IN_FLIGHT = "tl.wgmma_in_flight"
    """CUDA sm_90a: keep one wgmma group in flight across iterations of a pipelined loop
    (needs ``num_stages >= 3``). Default: True."""

    TL_WGMMA_WAIT_SINKING = "tl.wgmma_wait_sinking"
    """CUDA sm_90a: a wgmma gemm's ``wgmma.wait_group`` moves down to the first statement
    that needs its result (reads or writes its accumulator or register A, overwrites its
    shared operands, synchronises), so independent work overlaps the tensor cores
    (``backends/cuda/passes/wgmma_wait_sinking.py``). Default: True."""

    TL_WGMMA_ISSUE_HOISTING = "tl.wgmma_issue_hoisting"
    """CUDA sm_90a, with ``tl.wgmma_wait_sinking``: a wgmma gemm's issue first moves up past
    preceding statements it does not depend on (no shared register, no write to what it
    reads, no synchronisation), so it runs together with the gemm before it
    (FlashAttention backward: ``dP^T`` issued with ``S^T``, overlapping ``exp2``).
    Default: True."""

    TL_WGMMA_PREFETCH_SHARED_READS = "tl.wgmma_prefetch_shared_reads"
    """CUDA sm_90a: the shared-tile reads (``tl::copy_vec``) at the top of an unrolled
    elementwise loop right after a ``wgmma.wait_group`` are issued before the wait, into a
    register array of at most 32 registers per thread, when nothing between writes the tiles
    (FlashAttention backward: the ``lse``/``Delta`` loads no longer wait behind the gemm)
    (``backends/cuda/passes/wgmma_prefetch.py``). Default: True."""

    TL_WGMMA_UNIFORM_WARPGROUP = "tl.wgmma_uniform_warpgroup"
    """CUDA sm_90a: a wgmma gemm reads its warpgroup index ``threadIdx.x / 128`` through
    ``__shfl_sync`` from lane 0, so nvcc knows it is warp-uniform and keeps the shared-memory
    descriptors in uniform registers (without it they are per-thread registers, hoisted out
    of the loop and spilled when the accumulators fill the register file: FA backward at
    head dim 128, 56 bytes of spills reloaded before its HGMMAs). Default: True."""

    TL_WGMMA_WAIT_PAST_BARRIERS = "tl.wgmma_wait_past_barriers"
    """CUDA sm_90a, with ``tl.wgmma_wait_sinking``: the wait of a wgmma gemm whose shared
    operands only TMA loads write (a warp-specialized stage) may move past thread barriers
    (which order generic accesses only; the stage comes back through an mbarrier arrive,
    which no wait passes). FlashAttention backward: ``dV += P^T dO`` stays in flight across
    the barriers around the ``dS^T`` store. Default: True."""

    TL_WGMMA_WAIT_PAIRED_BARRIERS = "tl.wgmma_wait_paired_barriers"
    """CUDA sm_90a, with ``tl.wgmma_wait_sinking``: any gemm's wait (shared operands written
    by threads too) also moves past a named barrier ``bar.sync id, n`` when the same barrier
    comes again later in the sequence and no statement between the two writes the gemm's
    shared operands (every thread that could overwrite them after the first barrier waits
    at the second one, which this thread reaches only after its wait). MLA decoding's
    cross-warpgroup row reductions and its ``S_shared`` barrier otherwise stop the waits of
    both of its gemms (with ``tl.wgmma_overlap``: ``P @ V`` of block k-1 then runs during the
    exp2 of block k). Default: False (opt-in, not yet measured on the GPU)."""

    TL_UNSWITCH_UNIFORM_SELECT = "tl.unswitch_uniform_select"
    """Every backend: a ``T.Parallel`` nest selecting on a condition affine in its loop
    variables (FlashAttention's causal mask ``bx * bM + i >= k * bN + j``) also gets
    select-free copies, run when the condition holds (or fails) for the whole tile
    (``tilelang/transform/unswitch_uniform_select.py``). Default: True."""

    TL_PIPELINE_ORDER = "tl.pipeline_order"
    """CUDA sm_90a, warp-specialized loops: honor ``T.Pipelined(order=, stage=, group=)``
    (statement groups run ``stage`` iterations late, in ``order``: upstream's
    ``wgmma_pipelined`` FlashAttention issues Q @ K^T of iteration k before the softmax of
    k and P @ V of k-1; ``backends/cuda/passes/pipeline_order.py``). Default: True."""

    TL_WGMMA_OVERLAP = "tl.wgmma_overlap"
    """CUDA sm_90a, warp-specialized loops without ``order``/``stage`` annotations: derive
    FlashAttention's overlap schedule automatically (the gemm that starts the body and the
    statements it feeds run in iteration k, the rest of the body one iteration late) when
    the loop's carried dependences allow it. Unset (default): for loops of one score gemm
    and one value gemm (FlashAttention's forward as upstream's plain examples write it:
    bhsd 0.95 -> 0.88 ms, varlen causal 0.91 -> 0.85 ms on the H200, session 9); True: also
    for several score gemms into one accumulator (MLA decoding, measured slower: 0.33 ->
    0.45-0.50 ms); False: never."""

    TL_WGMMA_COPIES_AFTER = "tl.wgmma_copies_after"
    """CUDA sm_90a, with a wgmma group in flight: issue each iteration's copies after the
    wgmma batch, then wait. Default: False (measured slower on the H200)."""

    TL_MMA_SPLIT_PIPELINE = "tl.mma_split_pipeline"
    """CUDA mma.sync: split a lone pipelined gemm into phases with double-buffered
    fragments (ldmatrix of slice k+1 overlaps the mma of slice k). Default: True."""

    TL_PIPELINE_COPY_SCHEDULE = "tl.pipeline_copy_schedule"
    """CUDA: which global->shared copies of a ``T.Pipelined`` body become cp.async stages:
    ``"leading"`` (only the copies that start the body), ``"hoist"`` (the later ones too,
    issued with the leading ones), ``"split"`` (the later ones each in their own group) or
    ``"auto"`` (default: ``"hoist"`` with ``num_stages >= 2``, else ``"split"``). ROCm
    (register-staged stages, no groups): ``"leading"`` as on CUDA, anything else hoists."""

    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    """CUDA sm_90+: keep cp.async for the copies of ``T.Pipelined`` loops instead of TMA
    (``cp.async.bulk.tensor`` boxes of a host-encoded tensor map, completing on one mbarrier
    per stage; ``backends/cuda/passes/tma_lowering.py``). Unset (the default), a loop uses
    TMA when it is also warp-specialized (``tl.disable_warp_specialized``): a producer
    warpgroup issues the boxes while the block's threads compute (the README GEMM measured
    0.98-1.02x torch.matmul at 8192³ on the H200, against 0.74-0.76x with cp.async); other
    loops keep cp.async, because TMA with every thread waiting on the stage's mbarrier
    measured slower than cp.async (0.66-0.71x). ``False`` turns TMA on wherever a copy
    allows it, ``True`` turns it off. The function attribute ``tl.tma`` of
    ``tilelang.lower``'s output says which copies use it and why the others do not. A TMA
    kernel refuses, with a clear error at the call, a tensor whose data pointer is not
    16-byte aligned."""

    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    """CUDA sm_90a, with TMA loads: a ``T.Pipelined`` loop whose copies all use TMA runs
    them in a producer warpgroup added to the block (one elected thread issues the boxes),
    while the block's own threads only compute, handing stages back through "empty"
    mbarriers (``backends/cuda/passes/warp_specialize_auto.py``). ``True`` keeps every thread
    on both jobs (the TMA schedule of ``tma_lowering.py``). Default: False."""

    TL_TMA_STORE_EPILOGUE = "tl.tma_store_epilogue"
    """CUDA sm_90a, warp-specialized kernels: a ``T.copy(fragment -> global)`` after the
    pipelined loop goes through a swizzled shared staging tile (reusing a pipeline stage
    buffer when one is large enough) and leaves as a TMA store (``cp.async.bulk.tensor``,
    one elected thread; ``backends/cuda/passes/tma_store.py``) instead of per-thread
    stores. ``tl.tma`` says where it applied and why not elsewhere. Default (unset): on for
    float16/bfloat16 outputs (the ``stmatrix`` path run on the H200: README GEMM 128x256x64
    8192 fp16 0.95x -> 1.05x torch.matmul, 4096 fp16 0.97x -> 1.01x, bf16 within noise;
    benchmark/RESULTS.md, session 6); ``True`` stages other output types too (8-byte shared
    stores, emulated only), ``False`` never."""

    TL_TMA_REDUCE_DEFER_WAIT = "tl.tma_reduce_defer_wait"
    """CUDA sm_90+, ``T.atomic_add(global, shared, use_tma=True)`` inside a loop whose body
    writes the shared tile before the reduce: the elected thread waits for the reduce to have
    read the tile (``cp.async.bulk.wait_group.read``) just before the next iteration's first
    access of the tile (and after the loop) instead of right after issuing it, so its warp
    goes on meanwhile (``backends/cuda/passes/tma_reduce.py``); the barrier before those
    writes then follows the wait (in the FlashAttention backward: one more consumer barrier
    per iteration). Default: False (unmeasured)."""

    TL_COMPACT_SOURCE = "tl.compact_source"
    """CUDA: ``T.unroll`` loops reach nvcc/NVRTC as ``#pragma unroll`` loops and TIRx's
    device-side StmtSimplify is skipped (``backends/cuda/compact_source.py``): the README
    GEMM's source is 13 KB instead of 208 KB and compiles in 0.42 s instead of 2.55 s on
    the dev machine, with the same SASS instruction mix. ``False`` gives TIRx's fully
    unrolled source. Default: True."""

    TL_WS_PINGPONG = "tl.ws_pingpong"
    """CUDA sm_90a, warp-specialized loops with two or more consumer warpgroups (256, 384,
    ... threads) and two gemms (FlashAttention's Q @ K^T and P @ V): the warpgroups take
    turns issuing the gemms, round robin (warpgroup w waits on named barrier 2 + w and hands
    over on 2 + (w + 1) % W; skipped with a note when the kernel's own named barriers use
    those ids), so one warpgroup's softmax runs while another's gemms keep the tensor cores
    busy (FlashAttention-3's scheduler barrier; three warpgroups: its 192-row blocks at head
    dim 64). In a consumer loop ordered by ``T.Pipelined(order=, stage=)`` or
    ``tl.wgmma_overlap`` the turn spans Q @ K^T of block k and P @ V of k-1 and the waits
    sink past its hand-over: on unless this key is False (H200, session 8, two warpgroups:
    FA forward D64 0.93 -> 1.03x cuDNN, D128 0.98 -> 1.01x, causal unchanged; three not
    measured yet). In a loop without that order the turn spans the first gemm, only when
    this key is True (session 5: no gain)."""

    TL_WS_RELEASE_PER_WARP = "tl.ws_release_per_warp"
    """CUDA sm_90a, warp-specialized loops without cluster multicast: each consumer warp
    hands a stage back with one mbarrier arrival (lane 0, after ``__syncwarp``; the empty
    barriers count ``T / 32`` arrivals) instead of one arrival per consumer thread (CUTLASS
    and FlashAttention-3 arrive once per consumer warpgroup). Generic-proxy stage reads keep
    each thread's ``fence.proxy.async`` before the warp's arrival. Default: False (not yet
    measured on the GPU; 384 consumer threads make 384 arrivals per stage and ring)."""

    TL_NAN_PROPAGATING_MAX = "tl.nan_propagating_max"
    """CUDA: scalar float ``max``/``min`` (``T.max``, ``T.reduce_max``'s combiner, ...) as
    TIRx prints them, NaN-propagating selects of four instructions each (True), instead of
    ``fmaxf``/``fminf``/``__hmax``/``__hmin``, one instruction each, upstream TileLang's
    CUDA ``max`` (a NaN operand is dropped; ``transform/float_min_max.py``). Reductions
    asked for ``nan_propagate=True`` propagate NaN either way. Default: False."""

    TL_CLUSTER_MULTICAST = "tl.cluster_multicast"
    """CUDA sm_90a, warp-specialized TMA loops: launch the kernel in thread-block clusters of
    ``C`` blocks along ``blockIdx.x`` (``C`` = 2, 4 or 8) and load each TMA tile that is the
    same for the blocks of a cluster (the README GEMM's A tile when ``blockIdx.x`` walks N)
    once per cluster: each block loads a ``1/C`` row slice with ``.multicast::cluster`` into
    all of them, halving (for ``C = 2``) that operand's L2 reads
    (``backends/cuda/passes/cluster_multicast.py``; ``tl.tma`` notes why it did not apply).
    Needs a static grid x extent that is a multiple of ``C``. Default: 0 (off)."""

    TL_CLUSTER_MULTICAST_SYNC = "tl.cluster_multicast_sync"
    """CUDA sm_90a, with ``tl.cluster_multicast``: the memory scope of the main loop's
    cross-block synchronisation. ``"cta"`` (default, CUTLASS's ``PipelineTmaAsync``): the
    consumers hand a stage back to every block with plain remote ``mbarrier.arrive`` (one
    ``SYNCS.ARRIVE`` each), the producer waits with a CTA-scope ``try_wait``, the barriers
    are published with a relaxed cluster arrive, and each thread arrives on the closing
    cluster barrier as soon as its loop is done (the epilogue overlaps the wait; the TMA-store
    epilogue applies). ``"cluster"``: the first schedule, kept for A/B runs: remote arrivals
    with ``.release.cluster`` (``MEMBAR.ALL.GPU`` before each, in every iteration of every
    consumer warp), cluster-scope acquire waits (``CCTL.IVALL``), a full cluster barrier at
    the end and register-store epilogues; measured 0.64-0.69x torch.matmul on the H200
    where one-block launches ran 1.01-1.05x (benchmark/RESULTS.md, session 6)."""

    TL_HEAVY_BLOCKS_FIRST = "tl.heavy_blocks_first"
    """CUDA/ROCm/Metal: when every loop extent of a kernel that depends on a block index is
    provably non-decreasing in it and one is not constant (causal attention's
    ``min(.., ceildiv((bx + 1) * block_M, block_N))``), the index is reversed
    (``gridDim - 1 - b``) so the heaviest blocks launch first and the last wave has no long
    tail (FlashAttention 2/3's ``num_m_blocks - 1 - blockIdx.x``). Kernels with global
    atomics, ``while`` loops, cluster launches or ``T.use_swizzle`` are left alone; the
    function attribute ``tl.block_order`` says what was decided and why
    (``backends/cuda/passes/heavy_blocks_first.py``). Default: True."""

    TL_PERSISTENT_TILES = "tl.persistent_tiles"
    """CUDA sm_90a, automatically warp-specialized kernels with a static grid, no cluster
    launch, no global atomics or ``while`` loops, a pipelined loop whose extent reads no
    block index: a persistent launch. The kernel launches
    ``G = min(tiles, SM count)`` blocks (the host launcher queries the device's
    ``multiProcessorCount`` at launch time, cached per device) and each block walks
    ``for tile in range(blockIdx.x, tiles, gridDim.x)``, recomputing the user's block
    indices from ``tile`` (``T.use_swizzle`` and ``tl.heavy_blocks_first`` orders kept).
    Producer and consumers walk the same tiles and the mbarrier rings run on across tiles,
    so the producer loads the next tile's first stages during the current tile's epilogue;
    the epilogue tile gets its own shared memory (not a stage buffer's bytes). Kernels it
    does not apply to are unchanged, with the reason in ``tl.tma`` when the key is True
    (``backends/cuda/passes/persistent_tiles.py``). Unset: on for GEMMs (a loop with one
    gemm, not software-pipelined) with 256 or more consumer threads (the README GEMM
    128x256x64 on the H200 went from 0.99-1.06x torch to 1.03-1.18x); FlashAttention's
    two-gemm loop measured 0.97x of itself and stays off unless True. False: never."""

    TL_ENABLE_BOUNDS_CHECK = "tl.enable_bounds_check"
    """Debug: check every element access the compiler cannot prove in bounds when the kernel
    runs. CPU: the call raises ``BoundsCheckError`` naming the line, tensor and shape (blocks
    then run one after another); CUDA: the thread prints that and executes ``__trap()``.
    Default: False. (Accesses that are certainly out of bounds are compile errors anyway.)"""

    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_legalize"
    """True: global loads/stores outside ``T.Parallel`` loops (SIMT code such as
    ``O[bx * 128 + tx] = v``) that the compiler cannot prove in bounds are left as written.
    Default False: as upstream, such a store is skipped and such a load reads 0 (CPU and
    CUDA; a ``T.Parallel`` loop's tails are always guarded)."""

    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    """Index bit width; tilelang indexes in 32 bits and rejects any other value."""

    # -- accepted for upstream compatibility, without effect here ------------------------
    # (the feature they tune does not exist in tilelang, or tilelang always does the safe
    # thing: sync insertion and bounds guards cannot be turned off)
    TL_SIMPLIFY = "tl.Simplify"
    TL_DISABLE_BUFFER_INIT_CHECK = "tl.disable_buffer_init_check"
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"
    TL_DISABLE_PRELOWER_SEMANTIC_CHECK = "tl.disable_prelower_semantic_check"
    TL_ENABLE_AUTO_WARP_SPECIALIZATION = "tl.enable_auto_warp_specialization"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"
    TL_EMIT_LINE_DIRECTIVES = "tl.emit_line_directives"
    TL_LAYOUT_COST_MODEL = "tl.layout_cost_model"
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"
    TL_ENABLE_LOWER_LDGSTG = "tl.enable_lower_ldgstg"
    TL_ENABLE_LOWER_LDGSTG_PREDICATED = "tl.enable_lower_ldgstg_predicated"
    TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS = "tl.debug_merge_shared_memory_allocations"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_DISABLE_SHARED_MEMORY_REUSE = "tl.disable_shared_memory_reuse"
    TL_DISABLE_SHUFFLE_ELECT = "tl.disable_shuffle_elect"
    TL_DISABLE_LOOP_UNSWITCHING = "tl.disable_loop_unswitching"
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
    TL_DISABLE_DYNAMIC_TAIL_SPLIT = "tl.disable_dynamic_tail_split"
    TL_DYNAMIC_ALIGNMENT = "tl.dynamic_alignment"
    TL_FORCE_LET_INLINE = "tl.force_let_inline"
    TL_DISABLE_OUT_OF_BOUND_WARNING = "tl.disable_out_of_bound_warning"
    TIR_ENABLE_EQUIV_TERMS_IN_CSE = "tir.enable_equiv_terms_in_cse_tir"
    TIR_DISABLE_CSE = "tirx.disable_cse_tir"
    TIR_SIMPLIFY = "tirx.Simplify"
    TIR_DISABLE_STORAGE_REWRITE = "tirx.disable_storage_rewrite"
    TIR_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TIR_USE_ASYNC_COPY = "tirx.use_async_copy"
    TIR_ENABLE_DEBUG = "tirx.enable_debug"
    TIR_MERGE_STATIC_SMEM = "tirx.merge_static_smem"
    TIR_NOALIAS = "tirx.noalias"
    CUDA_KERNELS_OUTPUT_DIR = "cuda.kernels_output_dir"


#: Keys accepted for upstream compatibility that change nothing here (the feature they tune
#: does not exist in tilelang, or tilelang always does the safe thing); every other key is
#: documented in docs/language.md's pass-config table (testing/python/transform/test_pass_configs.py).
COMPAT_ONLY_KEYS = frozenset(
    {
        PassConfigKey.TL_SIMPLIFY.value,
        PassConfigKey.TL_DISABLE_BUFFER_INIT_CHECK.value,
        PassConfigKey.TL_DISABLE_DATA_RACE_CHECK.value,
        PassConfigKey.TL_DISABLE_PRELOWER_SEMANTIC_CHECK.value,
        PassConfigKey.TL_ENABLE_AUTO_WARP_SPECIALIZATION.value,
        PassConfigKey.TL_PTXAS_REGISTER_USAGE_LEVEL.value,
        PassConfigKey.TL_ENABLE_PTXAS_VERBOSE_OUTPUT.value,
        PassConfigKey.TL_EMIT_LINE_DIRECTIVES.value,
        PassConfigKey.TL_LAYOUT_COST_MODEL.value,
        PassConfigKey.TL_DISABLE_VECTORIZE_256.value,
        PassConfigKey.TL_ENABLE_ASYNC_COPY.value,
        PassConfigKey.TL_ENABLE_LOWER_LDGSTG.value,
        PassConfigKey.TL_ENABLE_LOWER_LDGSTG_PREDICATED.value,
        PassConfigKey.TL_DEBUG_MERGE_SHARED_MEMORY_ALLOCATIONS.value,
        PassConfigKey.TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE.value,
        PassConfigKey.TL_DISABLE_SHARED_MEMORY_REUSE.value,
        PassConfigKey.TL_DISABLE_SHUFFLE_ELECT.value,
        PassConfigKey.TL_DISABLE_LOOP_UNSWITCHING.value,
        PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC.value,
        PassConfigKey.TL_DISABLE_DYNAMIC_TAIL_SPLIT.value,
        PassConfigKey.TL_DYNAMIC_ALIGNMENT.value,
        PassConfigKey.TL_FORCE_LET_INLINE.value,
        PassConfigKey.TL_DISABLE_OUT_OF_BOUND_WARNING.value,
        PassConfigKey.TIR_ENABLE_EQUIV_TERMS_IN_CSE.value,
        PassConfigKey.TIR_DISABLE_CSE.value,
        PassConfigKey.TIR_SIMPLIFY.value,
        PassConfigKey.TIR_DISABLE_STORAGE_REWRITE.value,
        PassConfigKey.TIR_DISABLE_VECTORIZE.value,
        PassConfigKey.TIR_USE_ASYNC_COPY.value,
        PassConfigKey.TIR_ENABLE_DEBUG.value,
        PassConfigKey.TIR_MERGE_STATIC_SMEM.value,
        PassConfigKey.TIR_NOALIAS.value,
        PassConfigKey.CUDA_KERNELS_OUTPUT_DIR.value,
    }
)

DUMP_DIR_ALIAS = "tl.dump_ir_dir"

OBSERVATION_KEYS = frozenset(
    {
        PassConfigKey.TL_ENABLE_DUMP_IR.value,
        PassConfigKey.TL_DUMP_IR_DIR.value,
        PassConfigKey.TL_PASS_PROFILE.value,
        PassConfigKey.TL_PASS_PROFILE_THRESHOLD_MS.value,
        DUMP_DIR_ALIAS,
    }
)


def normalize_pass_configs(pass_configs) -> dict:
    """``pass_configs`` with every key as a plain string (``PassConfigKey`` members unwrapped).

    Raises ``TypeError`` naming ``pass_configs`` when it is not a mapping.
    """
    if pass_configs is None:
        return {}
    if not hasattr(pass_configs, "items"):
        raise TypeError(
            f"pass_configs must be a dict {{key: value}}, got {type(pass_configs).__name__}"
        )
    return {
        (k.value if isinstance(k, PassConfigKey) else str(k)): v for k, v in pass_configs.items()
    }


COPY_SCHEDULES = ("auto", "leading", "hoist", "split")
#: values of tl.cluster_multicast_sync (the first is the default)
CLUSTER_SYNC_SCOPES = ("cta", "cluster")


def build_options(pass_configs) -> dict:
    """What the backends take from ``pass_configs`` (the CUDA one): ``fast_math`` (bool or None when
    unset), ``device_flags`` (list), ``disable_wgmma``, ``ldmatrix``, ``gemm_scalar``, ``wgmma_in_flight``,
    ``wgmma_copies_after``, ``mma_split``, ``disable_tma`` (bools) and ``copy_schedule`` (str).

    Every code-generation choice lives here, so it is part of the kernel cache key (the whole
    ``pass_configs`` is); no module-level switch changes generated code.

    Raises ``ValueError`` naming the key for a value tilelang cannot honour.
    """
    import shlex

    configs = normalize_pass_configs(pass_configs)
    fast_math = None
    if PassConfigKey.TL_DISABLE_FAST_MATH.value in configs:
        fast_math = not bool(configs[PassConfigKey.TL_DISABLE_FAST_MATH.value])
    if PassConfigKey.TL_ENABLE_FAST_MATH.value in configs:
        fast_math = bool(configs[PassConfigKey.TL_ENABLE_FAST_MATH.value])
    flags = configs.get(PassConfigKey.TL_DEVICE_COMPILE_FLAGS.value) or []
    if isinstance(flags, str):
        flags = shlex.split(flags)
    elif not isinstance(flags, list | tuple) or not all(isinstance(f, str) for f in flags):
        raise ValueError(
            f"pass_configs[{PassConfigKey.TL_DEVICE_COMPILE_FLAGS.value!r}] must be a string or "
            f"a list of strings, got {flags!r}"
        )
    bits = configs.get(PassConfigKey.TL_CONFIG_INDEX_BITWIDTH.value, 32)
    if bits not in (None, 32):
        raise ValueError(
            f"pass_configs[{PassConfigKey.TL_CONFIG_INDEX_BITWIDTH.value!r}] = {bits!r}: "
            "tilelang indexes in 32 bits only"
        )
    multicast = configs.get(PassConfigKey.TL_CLUSTER_MULTICAST.value) or 0
    if isinstance(multicast, bool) or multicast not in (0, 1, 2, 4, 8):
        raise ValueError(
            f"pass_configs[{PassConfigKey.TL_CLUSTER_MULTICAST.value!r}] = {multicast!r}: "
            "expected 0 (off), 2, 4 or 8 blocks per cluster"
        )
    mc_sync = configs.get(PassConfigKey.TL_CLUSTER_MULTICAST_SYNC.value) or "cta"
    if mc_sync not in CLUSTER_SYNC_SCOPES:
        raise ValueError(
            f"pass_configs[{PassConfigKey.TL_CLUSTER_MULTICAST_SYNC.value!r}] = {mc_sync!r}: "
            f"expected one of {', '.join(CLUSTER_SYNC_SCOPES)}"
        )
    schedule = configs.get(PassConfigKey.TL_PIPELINE_COPY_SCHEDULE.value, "auto")
    if schedule not in COPY_SCHEDULES:
        raise ValueError(
            f"pass_configs[{PassConfigKey.TL_PIPELINE_COPY_SCHEDULE.value!r}] = {schedule!r}: "
            f"expected one of {', '.join(COPY_SCHEDULES)}"
        )

    def flag(key, default):
        return bool(configs.get(key.value, default))

    return {
        "fast_math": fast_math,
        "device_flags": list(flags),
        "disable_wgmma": flag(PassConfigKey.TL_DISABLE_WGMMA, False),
        "ldmatrix": not flag(PassConfigKey.TL_DISABLE_LDMATRIX, False),
        "gemm_scalar": flag(PassConfigKey.TL_GEMM_SCALAR, False),
        "wgmma_in_flight": flag(PassConfigKey.TL_WGMMA_IN_FLIGHT, True),
        "drop_proxy_fences": flag(PassConfigKey.TL_DROP_PROXY_FENCES, True),
        "reduce_merged_exchange": flag(PassConfigKey.TL_REDUCE_MERGED_EXCHANGE, True),
        "wgmma_copies_after": flag(PassConfigKey.TL_WGMMA_COPIES_AFTER, False),
        "mma_split": flag(PassConfigKey.TL_MMA_SPLIT_PIPELINE, True),
        "wgmma_wait_sinking": flag(PassConfigKey.TL_WGMMA_WAIT_SINKING, True),
        "wgmma_issue_hoisting": flag(PassConfigKey.TL_WGMMA_ISSUE_HOISTING, True),
        "wgmma_prefetch_shared_reads": flag(PassConfigKey.TL_WGMMA_PREFETCH_SHARED_READS, True),
        "wgmma_wait_past_barriers": flag(PassConfigKey.TL_WGMMA_WAIT_PAST_BARRIERS, True),
        "wgmma_uniform_warpgroup": flag(PassConfigKey.TL_WGMMA_UNIFORM_WARPGROUP, True),
        "wgmma_wait_paired_barriers": flag(PassConfigKey.TL_WGMMA_WAIT_PAIRED_BARRIERS, False),
        "pipeline_order": flag(PassConfigKey.TL_PIPELINE_ORDER, True),
        "unswitch_uniform_select": flag(PassConfigKey.TL_UNSWITCH_UNIFORM_SELECT, True),
        # None (unset): one score gemm + one value gemm only; True: also MLA's several
        "wgmma_overlap": (
            None
            if configs.get(PassConfigKey.TL_WGMMA_OVERLAP.value) is None
            else flag(PassConfigKey.TL_WGMMA_OVERLAP, False)
        ),
        "copy_schedule": schedule,
        # None (unset): TMA where the loop is also warp-specialized, else cp.async (TMA
        # without a producer warpgroup measured slower, see the key's docstring)
        "disable_tma": (
            None
            if configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER.value) is None
            else flag(PassConfigKey.TL_DISABLE_TMA_LOWER, False)
        ),
        "compact_source": flag(PassConfigKey.TL_COMPACT_SOURCE, True),
        # None (unset): turns in ordered loops only; True: also at the first gemm of others
        "ws_pingpong": (
            None
            if configs.get(PassConfigKey.TL_WS_PINGPONG.value) is None
            else flag(PassConfigKey.TL_WS_PINGPONG, False)
        ),
        "ws_release_per_warp": flag(PassConfigKey.TL_WS_RELEASE_PER_WARP, False),
        "tma_reduce_defer_wait": flag(PassConfigKey.TL_TMA_REDUCE_DEFER_WAIT, False),
        # None (unset): staged for 16-bit outputs only; True / False: always / never
        "tma_store_epilogue": (
            None
            if configs.get(PassConfigKey.TL_TMA_STORE_EPILOGUE.value) is None
            else flag(PassConfigKey.TL_TMA_STORE_EPILOGUE, False)
        ),
        "warp_specialize": not flag(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED, False),
        "bounds_check": flag(PassConfigKey.TL_ENABLE_BOUNDS_CHECK, False),
        "safe_memory_access": not flag(PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS, False),
        "cluster_multicast": int(multicast),
        "cluster_multicast_sync": mc_sync,
        "heavy_blocks_first": flag(PassConfigKey.TL_HEAVY_BLOCKS_FIRST, True),
        "nan_propagating_max": flag(PassConfigKey.TL_NAN_PROPAGATING_MAX, False),
        # None (unset): GEMMs (one gemm in the loop) of 256+ consumer threads
        "persistent_tiles": (
            None
            if configs.get(PassConfigKey.TL_PERSISTENT_TILES.value) is None
            else flag(PassConfigKey.TL_PERSISTENT_TILES, False)
        ),
    }
