"""Upstream ``T.*`` names that no tilelang target lowers (or that are not provided), each with
the reason.

Reading one of these names (``T.alloc_tmem``, ``from tilelang.language import tcgen05_gemm``)
raises an AttributeError that names the op, the targets it is not supported on and why, so a
program written for upstream stops at its own line with that message instead of at a bare
"has no attribute". ``tilelang.language.__getattr__`` consults :data:`NOT_LOWERED`.
"""

from __future__ import annotations

TARGETS = "cpu, cuda (sm_80 to sm_90a), rocm or metal"

_BLACKWELL = (
    "it is a Blackwell (sm_100) instruction (tcgen05 / tensor memory / cluster launch "
    "control); tilelang lowers CUDA up to sm_90a"
)
_SM120 = "it is an sm_120 block-scaled MMA; tilelang lowers CUDA up to sm_90a"
_TMA_EXPLICIT = (
    "tilelang has no user-managed TMA API; T.copy between global and shared memory lowers to "
    "TMA (with its mbarrier) on sm_90 by itself"
)
_TMA_GATHER = "it is a Blackwell (sm_100) TMA gather/scatter; tilelang lowers CUDA up to sm_90a"
_TIR_SCRIPT = (
    "it is a TVMScript (TIR block/buffer-binding) construct of upstream's TVM fork; tilelang "
    "traces Python kernels (T.Kernel, T.Tensor annotations) and has no TIR blocks"
)

_JIT_OPTIONS = (
    "kernel-carried compile options are not provided yet; pass compile_flags= / pass_configs= "
    "to tilelang.compile or tilelang.jit"
)
_VECTOR_EXPR = (
    "tilelang's traced kernels have no vector-valued scalar expressions to build or take lanes "
    "from (vector dtypes name tensor element types); index the tensor instead"
)

#: name -> why no target lowers it
NOT_LOWERED: dict[str, str] = {
    "alloc_tmem": _BLACKWELL,
    "tcgen05_gemm": _BLACKWELL,
    "tcgen05_gemm_blockscaled": _BLACKWELL,
    "tcgen05_mma": _BLACKWELL,
    "tcgen05_mma_blockscaled": _BLACKWELL,
    "tcgen05_mma_arrive": _BLACKWELL,
    "tcgen05_cp_warpx4": _BLACKWELL,
    "tcgen05_sf_warp_transpose": _BLACKWELL,
    "tcgen05_after_thread_sync": _BLACKWELL,
    "tcgen05_before_thread_sync": _BLACKWELL,
    "alloc_tcgen05_smem_desc": _BLACKWELL,
    "deallocate_tmem": _BLACKWELL,
    "clc_get_first_ctaid_x": _BLACKWELL,
    "clc_is_canceled": _BLACKWELL,
    "clc_try_cancel_multicast": _BLACKWELL,
    "mma_gemm_blockscaled": _SM120,
    "tma_load": _TMA_EXPLICIT,
    "create_tma_descriptor": _TMA_EXPLICIT,
    "tma_gather4": _TMA_GATHER,
    "tma_gather4_bytes": _TMA_GATHER,
    "tma_scatter4": _TMA_GATHER,
    "alloc_wgmma_desc": (
        "tilelang has no user-built wgmma descriptors; T.gemm and T.wgmma_gemm build them"
    ),
    "gemm_sp": "sparse tensor-core GEMM (2:4 metadata) is not lowered",
    "sblock": _TIR_SCRIPT,
    "reads": _TIR_SCRIPT,
    "writes": _TIR_SCRIPT,
    "match_buffer": _TIR_SCRIPT,
    "launch_thread": _TIR_SCRIPT,
    "attr": _TIR_SCRIPT,
    "handle": _TIR_SCRIPT,
    "comm_reducer": _TIR_SCRIPT + " (use T.reduce_* or T.warp_reduce_*)",
    "tvm_thread_allreduce": _TIR_SCRIPT + " (use T.reduce_* or T.warp_reduce_*)",
    "import_source": (
        "tilelang does not splice user C/CUDA source into a traced kernel; write the whole "
        "kernel with T.CUDASourceCodeKernel, or call a library function with T.call_extern"
    ),
    "annotate_compile_flags": _JIT_OPTIONS,
    "annotate_pass_configs": _JIT_OPTIONS,
    "extract_lane": _VECTOR_EXPR,
    "Shuffle": _VECTOR_EXPR,
    "Ramp": _VECTOR_EXPR,
    "Ref": (
        "upstream's by-reference macro argument of its eager builder is not provided; return "
        "the new value from the T.macro instead"
    ),
    "float4_e2m1_unpacked": (
        "upstream's one-fp4-per-byte shared-memory storage hint for sm_100 TMA loads; use "
        "T.float4_e2m1fn"
    ),
}


def refusal(name: str) -> str | None:
    """The AttributeError message for ``T.<name>``, or None when ``name`` is not listed."""
    why = NOT_LOWERED.get(name)
    if why is None:
        return None
    return f"T.{name} is not supported on any tilelang target ({TARGETS}): {why}"
