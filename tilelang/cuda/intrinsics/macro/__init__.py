"""Upstream's intrinsic emitters (``tilelang.cuda.intrinsics.macro``): the mma.sync one."""

from .mma_macro_generator import (  # noqa: F401
    TensorCoreIntrinEmitter,
    TensorCoreIntrinEmitterWithLadderTransform,
)
