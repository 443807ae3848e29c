"""Upstream's CUDA intrinsic helpers (``tilelang.cuda.intrinsics``): the hand-written mma path.

``TensorCoreIntrinEmitter`` (warp-level ldmatrix + mma.sync, see ``macro/``), the shared-tile
swizzle ``get_swizzle_layout`` / ``make_mma_swizzle_layout``, ``get_mma_micro_size`` and
``mma_store_index_map``. Upstream's other emitters (wgmma, tcgen05, sparse, sm70/sm120) are
not provided: importing them raises a ModuleNotFoundError that says so.
"""

from .layout import (  # noqa: F401
    get_mma_micro_size,
    get_swizzle_layout,
    make_mma_swizzle_layout,
    mma_store_index_map,
)
from .macro import (  # noqa: F401
    TensorCoreIntrinEmitter,
    TensorCoreIntrinEmitterWithLadderTransform,
)
