"""Float ``max``/``min`` in generated CUDA source as one min/max instruction each.

TIRx's C printer writes a float ``Max(a, b)`` NaN-propagating, through two temporaries, as
``((a > b) || (a != a)) ? a : b``; ptxas turns that into FSETP, FSETP, PLOP3 and FSEL (four
instructions) where CUDA's ``fmaxf`` is one FMNMX. FlashAttention's row maximum over a
128x128 score tile spends 256 of the 728 instructions of each loop iteration of a consumer
thread on it (sm_90a SASS of ``examples/flash_attention/example_mha_fwd_bshd.py``).

Upstream TileLang prints ``max(a, b)``, CUDA's ``fmaxf``: a NaN operand is dropped and the
other operand returned. This pass gives the same: float32 ``fmaxf``/``fminf``, float64
``fmax``/``fmin``, float16 and bfloat16 ``__hmax``/``__hmin`` (sm_80 and later; older targets
keep the printer's form for them). ``T.reduce_max(..., nan_propagate=True)`` (upstream's
annotation) tests ``isnan`` itself and still propagates NaN. Pass config
``tl.nan_propagating_max = True`` keeps the printer's NaN-propagating form everywhere.
The ROCm backend (the same C printer) applies it to float32/float64 (HIP's ``fmaxf``/``fmax``).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir, tirx

from ..lowering.target_info import cuda_arch_number

#: scalar dtype -> (max, min) device function
FUNCTIONS = {
    "float32": ("fmaxf", "fminf"),
    "float64": ("fmax", "fmin"),
    "float16": ("__hmax", "__hmin"),
    "bfloat16": ("__hmax", "__hmin"),
}


def float_min_max_calls(body, arch: str = "sm_90a", dtypes=None):
    """``body`` with every scalar float ``Max``/``Min`` of ``dtypes`` (default: those of
    :data:`FUNCTIONS`, the 16-bit ones from sm_80 on) a call of its device function."""
    if dtypes is None:
        dtypes = set(FUNCTIONS) if cuda_arch_number(arch)[0] >= 80 else {"float32", "float64"}

    def rewrite(node, which):
        dtype = str(node.ty)
        names = FUNCTIONS.get(dtype)
        if names is None or dtype not in dtypes:
            return node
        return tirx.call_pure_extern(names[which], node.a, node.b, ty=dtype)

    return tvm_ffi.structural_map(
        body,
        [(ir.prim.Max, lambda n: rewrite(n, 0)), (ir.prim.Min, lambda n: rewrite(n, 1))],
    )


__all__ = ["FUNCTIONS", "float_min_max_calls"]
