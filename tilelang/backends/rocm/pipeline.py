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

from ...engine.pass_config import build_options
from ..vendor_common import lower_with_stages, vendor_stages
from ..vendor_exchange import stage_rocm_exchanges
from . import rules  # noqa: F401 - registers the ROCm op rules
from .checks import fold_fnuz_constants, refuse_fnuz_arithmetic, refuse_ocp_small_floats
from .pipelining import plan_register_pipelines

#: architectures with code generation (MFMA on all of them)
ARCHES = ("gfx90a", "gfx940", "gfx941", "gfx942")
DEFAULT_ARCH = "gfx90a"


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


def stage_float_min_max(func, state):
    """float32/float64 max/min as HIP's ``fmaxf``/``fmax`` (one instruction; the C printer's
    NaN-propagating select is four: ``tilelang/transform/float_min_max.py``);
    ``tl.nan_propagating_max`` keeps the select."""
    if state.options.get("nan_propagating_max", False):
        return func
    from ...transform.float_min_max import float_min_max_calls

    return func.with_body(float_min_max_calls(func.body, dtypes={"float32", "float64"}))


#: The ROCm pipeline, in order (``vendor_common.vendor_stages``: CUDA's stages and these).
STAGES = vendor_stages(
    "rocm",
    check_dtypes=stage_check_dtypes,
    lower_exchanges=stage_rocm_exchanges,  # warp ops, T.assume (vendor_exchange.py)
    pipeline_planning=stage_pipeline_planning,
    before_exchanges=("check_fp8_arithmetic", stage_check_fp8_arithmetic),
)
STAGES.insert(len(STAGES) - 1, ("float_min_max", stage_float_min_max))  # before the exchanges


def check_arch(arch) -> str:
    """``arch`` if the ROCm backend generates code for it, else a ValueError naming it."""
    if arch not in ARCHES:
        raise ValueError(f"ROCm arch must be one of {list(ARCHES)}, got {arch!r}")
    return arch


def lower(func, target=None, pass_configs=None):
    """The thread-level TIRx function for ``func`` on ROCm (:data:`STAGES` in order)."""
    arch = check_arch((target or {}).get("arch", DEFAULT_ARCH))
    return lower_with_stages(func, arch, STAGES, pass_configs)


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
