"""Which tile-op rules the Metal backend uses.

Metal-specific rules: ``gemm`` (``simdgroup_matrix`` 8x8, ``ops/gemm/simdgroup_metal.py``)
and ``reduce`` (``simd_sum``/``simd_max``/``simd_shuffle_xor``, ``ops/reduce/metal.py``).
The CUDA rules of :data:`SHARED_WITH_CUDA` emit code MSL takes with the helpers of
``include/tl_metal.h``. ``T.print`` and ``T.device_assert`` have no Metal rule (MSL has no
``printf``/trap): they fail with "T.print is not supported on the metal target" at the
user's line, as every op without a rule does.
"""

from __future__ import annotations

from ...ops.gemm import simdgroup_metal  # noqa: F401 - registers ("gemm", "metal")
from ...ops.reduce import metal as _reduce_metal  # noqa: F401 - registers ("reduce", "metal")
from ..rocm.rules import register

SHARED_WITH_CUDA = (
    "annotate_layout",
    "atomic",
    "atomic_prev",  # return_prev=True: tl::Atomic* return the old value (HIP and MSL too)
    "copy",
    "cumsum",
    "fill",
    "sync_threads",
    "use_swizzle",
)

register("metal", SHARED_WITH_CUDA)
