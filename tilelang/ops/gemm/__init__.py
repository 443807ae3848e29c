"""T.gemm: C += A @ B on tiles (CPU rule; CUDA: mma.sync, int8/tf32 mma, wgmma, scalar fallback; its pipelining rule).

``op.py`` holds the IR form, its checks and the CPU rule; ``*cuda.py`` the CUDA layout and
lowering rules. Importing the package registers every rule.
"""

from . import (  # noqa: F401 - registers the rules
    int8_tf32_cuda,
    mma_cuda,
    op,
    pipelining_cuda,
    scalar_cuda,
    wgmma_cuda,
)
