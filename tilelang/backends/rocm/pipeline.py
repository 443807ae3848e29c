"""The ROCm backend pipeline: traced tilelang kernel -> thread-level TIRx -> HIP C++.

The stages are the CUDA pipeline's (``tilelang/backends/cuda/pipeline.py``), run with a
``gfx*`` arch: layout inference picks the ROCm op rules (``lowering.target_info.backend_of``)
and the reductions use 64-lane wavefronts (``warp_size``). Differences:

* ``pipeline_planning`` is ROCm's own (``pipelining.py``): CDNA has no cp.async, so a
  ``T.Pipelined(..., num_stages=S >= 2)`` loop gets multi-buffered LDS tiles filled through
  registers, the next tile's global loads issued before the current tile's MFMAs;
* ``lower_tile_ops`` applies the ``(op, "rocm")`` rules (``rules.py``): MFMA gemm,
  wavefront reductions, and the CUDA rules that are target-neutral;
* ldmatrix and wgmma never apply (their rules check for ``sm_*`` arches);
* shared memory is LDS (64 KiB per workgroup on gfx90a/gfx94x).

``lower(func, target)`` returns the thread-level function; ``build`` compiles it (``build.py``).
"""

from __future__ import annotations

from dataclasses import replace

from ...engine.instrument import run_stages
from ...engine.pass_config import build_options
from ...lowering.global_layouts import no_vectors_for
from ...lowering.kernels import lower_each_kernel
from ...transform.apply_global_layouts import collect_global_layouts
from ...transform.lower_tile_ops import LowerTileOps
from ..cuda import pipeline as cuda_pipeline
from ..cuda.pipeline import CudaLowering
from ..vendor_exchange import stage_rocm_exchanges
from . import rules  # noqa: F401 - registers the ROCm op rules
from .checks import fold_fnuz_constants, refuse_fnuz_arithmetic, refuse_ocp_small_floats
from .pipelining import plan_register_pipelines

#: architectures with code generation (MFMA on all of them)
ARCHES = ("gfx90a", "gfx940", "gfx941", "gfx942")
DEFAULT_ARCH = "gfx90a"


def stage_layout_inference(func, state):
    """CUDA's layout inference with the ROCm rules; the lowering context says ``rocm``."""
    func = cuda_pipeline.stage_layout_inference(func, state)
    state.ctx = replace(state.ctx, backend="rocm")
    return func


def stage_lower_tile_ops(func, state):
    """Each tile op replaced by its ``(op, "rocm")`` rule's thread-level code."""
    return func.with_body(LowerTileOps("rocm")(func.body, state.ctx))


def stage_pipeline_planning(func, state):
    """``T.Pipelined`` loops: multi-buffered LDS tiles, register-staged prefetch of the
    next tile (``pipelining.py``)."""
    return plan_register_pipelines(func, state.ctx)


def stage_check_dtypes(func, state):
    """OCP fp8/fp6/fp4 element types are refused (``checks.py``)."""
    refuse_ocp_small_floats(func)
    return func


def stage_check_fp8_arithmetic(func, state):
    """No conversion or arithmetic on FNUZ fp8 bytes survives lowering (``checks.py``);
    fp8 constants (tail zero fills) become byte patterns first."""
    func = func.with_body(fold_fnuz_constants(func.body))
    refuse_fnuz_arithmetic(func)
    return func


#: The ROCm pipeline, in order.
STAGES = [
    ("check_dtypes", stage_check_dtypes),
    ("rasterize_blocks", cuda_pipeline.stage_rasterize_blocks),
    ("layout_inference", stage_layout_inference),
    ("pipeline_planning", stage_pipeline_planning),
    ("apply_shared_layouts", cuda_pipeline.stage_apply_shared_layouts),
    ("lower_parallel", cuda_pipeline.stage_lower_parallel),
    ("lower_tile_ops", stage_lower_tile_ops),
    ("lower_fragments", cuda_pipeline.stage_lower_fragments),
    ("hoist_allocs", cuda_pipeline.stage_hoist_allocs),
    ("insert_sync", cuda_pipeline.stage_insert_sync),
    ("plan_shared_memory", cuda_pipeline.stage_plan_shared_memory),
    ("strip_schedule_hints", cuda_pipeline.stage_strip_schedule_hints),
    ("apply_global_layouts", cuda_pipeline.stage_apply_global_layouts),
    ("check_fp8_arithmetic", stage_check_fp8_arithmetic),
    ("lower_exchanges", stage_rocm_exchanges),  # warp ops, T.assume (vendor_exchange.py)
]


def check_arch(arch) -> str:
    """``arch`` if the ROCm backend generates code for it, else a ValueError naming it."""
    if arch not in ARCHES:
        raise ValueError(f"ROCm arch must be one of {list(ARCHES)}, got {arch!r}")
    return arch


def lower(func, target=None, pass_configs=None):
    """The thread-level TIRx function for ``func`` on ROCm (:data:`STAGES` in order)."""
    import tilelang.ops  # noqa: F401 - registers the op rules

    options = dict(build_options(pass_configs))
    options["ldmatrix"] = False
    arch = check_arch((target or {}).get("arch", DEFAULT_ARCH))

    def lower_one(part):  # each T.Kernel block on its own (tilelang.lowering.kernels)
        state = CudaLowering(arch, options, collect_global_layouts(part.body))
        with no_vectors_for(state.global_layouts):
            return run_stages(part, STAGES, pass_configs, state=state)

    return lower_each_kernel(func, lower_one)


def build(func, target=None, pass_configs=None, compile_flags=None):
    """Compile ``func`` for ROCm; returns a :class:`~.build.HipArtifact`."""
    from .build import build_hip

    target = dict(target or {"kind": "rocm", "arch": DEFAULT_ARCH})
    options = build_options(pass_configs)
    lowered = lower(func, target, pass_configs)
    return build_hip(
        lowered,
        arch=target.get("arch", DEFAULT_ARCH),
        compile_flags=[*(compile_flags or ()), *options["device_flags"]],
        fast_math=True if options["fast_math"] is None else options["fast_math"],
    )
