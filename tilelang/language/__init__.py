"""The ``T`` namespace: ``import tilelang.language as T`` (upstream TileLang's names)."""

from .. import dtypes  # noqa: F401 - T.dtypes, the element-type module
from ..dtypes import (
    bfloat16,
    dtype,
    float8_e4m3,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ..dtypes import bool_ as bool  # noqa: A004 - upstream name
from ..layout import Fragment, Layout  # noqa: F401 - upstream exports T.Layout / T.Fragment
from . import expr_compat  # noqa: F401 - expr.dtype; `x & 0xFFFFFFFF` typed as x
from .allocate import (
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    alloc_var,
)
from .debug import device_assert, print  # noqa: A004 - upstream names
from .eager import const, empty
from .entry import macro, prim_func
from .hopper import (
    alloc_barrier,
    alloc_cluster_barrier,
    barrier_arrive,
    barrier_wait,
    block_rank_in_cluster,
    cluster_arrive,
    cluster_arrive_relaxed,
    cluster_sync,
    cluster_wait,
    dec_max_nreg,
    fence_proxy_async,
    inc_max_nreg,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_expect_tx,
    mbarrier_wait_parity,
    named_barrier_arrive,
    named_barrier_sync,
    set_max_nreg,
    wait_wgmma,
    warpgroup_arrive,
    warpgroup_commit_batch,
    warpgroup_wait,
    wgmma_gemm,
    ws,
)
from .kernel import (
    ClusterKernel,
    Kernel,
    KernelLaunchFrame,
    get_block_binding,
    get_block_bindings,
    get_block_extent,
    get_cluster_dims,
    get_cluster_extent,
    get_cluster_extents,
    get_cluster_id,
    get_cluster_ids,
    get_cluster_size,
    get_thread_binding,
    get_thread_bindings,
    get_thread_extent,
)
from .logical import all_of, any_of
from .loops import Parallel, Persistent, Pipelined, grid, loop_break, serial, unroll, vectorized
from .math import (
    Cast,
    abs,
    address_of,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    cast,
    ceil,
    ceildiv,
    clamp,
    cos,
    erf,
    exp,
    exp2,
    exp10,
    floor,
    floordiv,
    floormod,
    if_then_else,
    infinity,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    log2,
    log10,
    max,
    max_value,
    min,
    min_value,
    pow,
    reinterpret,
    round,
    rsqrt,
    shift_left,
    shift_right,
    sigmoid,
    sin,
    sqrt,
    tan,
    tanh,
    trunc,
    truncdiv,
    truncmod,
)
from .misc import annotate_layout, call_extern, evaluate, sync_threads, use_swizzle
from .proxy import (
    Buffer,
    FragmentBuffer,
    LocalBuffer,
    SharedBuffer,
    StridedTensor,
    Tensor,
    dynamic,
    symbolic,
)
from .tileop import (
    GemmWarpPolicy,
    atomic_add,
    atomic_max,
    atomic_min,
    clear,
    copy,
    cumsum,
    fill,
    gemm,
    reduce,
    reduce_absmax,
    reduce_abssum,
    reduce_bitand,
    reduce_bitor,
    reduce_bitxor,
    reduce_max,
    reduce_min,
    reduce_sum,
)
from .views import reshape, view

# ---- T.* surface (issue 10 item 2): warp exchange, scalar helpers, pointers, random numbers,
# every upstream dtype name. One block, kept apart from the imports above to ease merging.
# isort: split
from ..dtypes import VECTOR_TYPES as _VECTOR_TYPES
from ..dtypes import (
    double,
    float4_e2m1fn,
    float6_e2m3fn,
    float6_e3m2fn,
    float8_e3m4,
    float8_e4m3b11fnuz,
    float8_e4m3fnuz,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    half,
    int4,
    long,
    short,
    uint,
)
from ..dtypes import float_ as float  # noqa: A004 - upstream name
from ..dtypes import int_ as int  # noqa: A004 - upstream name
from .hints import (
    CUDASourceCodeKernel,
    annotate_l2_hit_ratio,
    annotate_min_blocks_per_sm,
    annotate_restrict_buffers,
    disable_warp_group_reg_alloc,
    func_attr,
    no_set_max_nreg,
)
from .hints import ldg as _ldg
from .loops import serial as Serial  # noqa: N812 - upstream alias
from .loops import unroll as Unroll  # noqa: N812 - upstream alias
from .loops import vectorized as Vectorized  # noqa: N812 - upstream alias
from .pointer import make_tensor, ptr
from .random import rng_init, rng_rand, rng_rand_float
from .scalar import (
    Let,
    Select,
    align_up,
    annotate_safe_value,
    assume,
    index_to_coordinates,
    let,
    sync_grid,
    transpose,
)
from .tileop import cummax
from .warp import (
    activemask,
    all_sync,
    any_sync,
    ballot,
    ballot_sync,
    get_lane_idx,
    get_warp_group_idx,
    get_warp_idx,
    get_warp_idx_sync,
    match_all_sync,
    match_any_sync,
    shfl_down,
    shfl_sync,
    shfl_up,
    shfl_xor,
    shuffle_elect,
    sync_warp,
    syncthreads_and,
    syncthreads_count,
    syncthreads_or,
    tvm_warp_shuffle,
    tvm_warp_shuffle_down,
    tvm_warp_shuffle_up,
    warp_reduce_bitand,
    warp_reduce_bitor,
    warp_reduce_max,
    warp_reduce_min,
    warp_reduce_sum,
)

globals().update(_VECTOR_TYPES)  # T.float32x4, T.float16x2, T.float8_e4m3fnx2, ...
globals()["__ldg"] = _ldg  # T.__ldg(A[i]): a read-only-cache load
# ---- end T.* surface block ----

# ---- T.* surface, part 2 (issue 10 item 2): vectorized / memory-ordered atomics,
# alloc_buffer, access_ptr, dp4a, reducers.
# isort: split
from .atomic_ext import atomic_addx2, atomic_addx4, atomic_load, atomic_store  # noqa: E402
from .builtin_ext import (  # noqa: E402
    access_ptr,
    alloc_buffer,
    dp4a,
    tfloat32,
    thread_binding,
    tvm_storage_sync,
)
from .reducer import alloc_reducer, finalize_reducer, reducer_init, reducer_update  # noqa: E402

# ---- end T.* surface part 2 ----

# ---- upstream names used by its examples and language tests (issue 10) ----
# isort: split
from . import fp8  # noqa: E402, F401 - T.fp8.determine_fp8_type
from .cluster_copy import copy_cluster  # noqa: E402
from .cp_async import (  # noqa: E402
    async_copy,
    cp_async_barrier_noinc,
    ptx_commit_group,
    ptx_cp_async,
    ptx_wait_group,
)
from .im2col import im2col  # noqa: E402
from .im2col import im2col as c2d_im2col  # noqa: E402 - upstream's deprecated alias
from .math_ext import (  # noqa: E402
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_not,
    cdiv,
    clz,
    copysign,
    cosh,
    fabs,
    fast_rcp,
    fma,
    fmod,
    fmul,
    hypot,
    ieee_add,
    ieee_fdiv,
    ieee_fmaf,
    ieee_frcp,
    ieee_frsqrt,
    ieee_fsqrt,
    ieee_mul,
    ieee_sub,
    ldexp,
    likely,
    nearbyint,
    nextafter,
    popcount,
    sinh,
)
from .not_lowered import refusal as _refusal  # noqa: E402
from .tile_scheduler import BaseTileScheduler, PersistentTileScheduler  # noqa: E402
from .tma_explicit import tma_copy, tma_store_arrive, tma_store_wait  # noqa: E402
from .upstream_names import FAST_MATH as _FAST_MATH  # noqa: E402
from .upstream_names import (  # noqa: E402
    PrimExpr,
    Var,
    annotate_consumer_reg_alloc,
    annotate_producer_reg_dealloc,
    atomic_or,
    parallel,
    pdl_sync,
    pdl_trigger,
)
from .upstream_names import ffs as _ffs  # noqa: E402
from .upstream_names import fns as _fns  # noqa: E402
from .wide_access import (  # noqa: E402
    ldg32,
    ldg64,
    ldg128,
    ldg256,
    lds32,
    lds64,
    lds128,
    stg32,
    stg64,
    stg128,
    stg256,
    sts32,
    sts64,
    sts128,
)
from .ws_schedule import (  # noqa: E402 - upstream's warp-specialization schedule API
    WSID,
    WSInstr,
    WSOpRef,
    WSPipeline,
    WSRole,
    WSSchedule,
    WSScope,
    WSSync,
    WSSyncKind,
    annotate_ws_pipeline_depth,
    annotate_ws_schedule,
    ws_op,
)

globals().update(_FAST_MATH)  # T.__exp, T.__log2, T.__sin, ... (precise here)
globals()["__ffs"] = _ffs
globals()["__fns"] = _fns
# upstream's import path of the dtype module: `from tilelang.language.dtypes import dtype`
__import__("sys").modules.setdefault(f"{__name__}.dtypes", dtypes)


def __getattr__(name: str):
    """``T.<name>`` of an upstream op that no tilelang target lowers: a clear error."""
    message = _refusal(name)
    if message is None:
        from ..utils.upstream_modules import attribute_error

        raise attribute_error(__name__, name)  # T.tir: why; other names: the usual message
    raise AttributeError(message)


# ---- end upstream names block ----
