"""What the shared (CUDA-derived) passes and op rules need to know about a GPU target.

The CUDA passes (layout inference, ``T.Parallel`` partitioning, reductions) are reused by
the ROCm and Metal pipelines. They receive the target's ``arch`` string through their
state/context; these helpers turn it into the facts that differ between vendors, so the
passes are parametrized instead of forked:

* :func:`backend_of` -- which backend's op rules apply (``"cuda"``, ``"rocm"``, ``"metal"``);
* :func:`warp_size` -- lanes per warp / wavefront / SIMD-group (32 on NVIDIA and Apple,
  64 on AMD CDNA: gfx90a, gfx940/941/942);
* :func:`cuda_arch_number` -- ``sm_90a`` -> ``(90, True)``.
"""

from __future__ import annotations

import re

#: AMD architectures the ROCm backend generates code for, and their wavefront size.
ROCM_WAVE64 = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942")


def backend_of(arch) -> str:
    """``"rocm"`` for ``gfx*`` arches, ``"metal"`` for ``metal``/``apple*``, else ``"cuda"``."""
    text = str(arch or "")
    if text.startswith("gfx"):
        return "rocm"
    if text.startswith(("metal", "apple")):
        return "metal"
    return "cuda"


def warp_size(arch) -> int:
    """Lanes that execute in lockstep and can exchange registers (shuffles) on ``arch``."""
    text = str(arch or "")
    if text.startswith("gfx"):
        # RDNA (gfx10xx/gfx11xx) runs wave32 by default; CDNA is wave64 only.
        return 32 if text.startswith(("gfx10", "gfx11", "gfx12")) else 64
    return 32


def cuda_arch_number(arch) -> tuple[int, bool]:
    """(compute capability number, arch-specific ``a`` suffix) of a CUDA ``sm_*`` arch;
    ``(0, False)`` for anything else."""
    m = re.match(r"sm_(\d+)(a?)", str(arch or ""))
    return (int(m.group(1)), bool(m.group(2))) if m else (0, False)
