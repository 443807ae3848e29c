"""Which tile-op rules the ROCm backend uses.

ROCm-specific rules: ``gemm`` (MFMA, ``ops/gemm/mfma_rocm.py``) and ``reduce`` (64-lane
``__shfl_xor``, ``ops/reduce/rocm.py``). The CUDA rules listed in :data:`SHARED_WITH_CUDA`
emit only code HIP compiles as well (element loops, 16-byte vector copies through
``tl::copy_vec``, ``__syncthreads``, ``printf``, ``tl::Atomic*``) and are registered for
``"rocm"`` as they are; ``tilelang/backends/rocm/include/tl_hip.h`` implements the ``tl::``
helpers they call. Any op not listed has no ROCm rule, so it fails at lowering with
"T.<op> is not supported on the rocm target" at the user's line.
"""

from __future__ import annotations

from ...ops import registry
from ...ops.gemm import mfma_rocm  # noqa: F401 - registers ("gemm", "rocm")
from ...ops.reduce import rocm as _reduce_rocm  # noqa: F401 - registers ("reduce", "rocm")

#: ops whose CUDA lowering (and layout) rules are target-neutral given the warp size
SHARED_WITH_CUDA = (
    "annotate_layout",
    "atomic",
    "atomic_prev",  # return_prev=True: tl::Atomic* return the old value (HIP and MSL too)
    "copy",
    "cumsum",
    "device_assert",
    "fill",
    "print",
    "sync_threads",
    "use_swizzle",
)


def register(backend: str = "rocm", shared=SHARED_WITH_CUDA) -> None:
    """Register the CUDA rules of ``shared`` ops for ``backend`` (idempotent)."""
    import tilelang.ops  # noqa: F401 - the CUDA rules

    for name in shared:
        rule = registry._LOWERINGS.get((name, "cuda"))
        if rule is not None:
            registry._LOWERINGS.setdefault((name, backend), rule)
        layout = registry._LAYOUT_RULES.get((name, "cuda"))
        if layout is not None:
            registry._LAYOUT_RULES.setdefault((name, backend), layout)


register()
