"""The Metal backend pipeline: traced tilelang kernel -> thread-level TIRx -> MSL source.

The stages are the ROCm/CUDA ones (``tilelang/backends/rocm/pipeline.py``) run with the
``metal`` arch (32-lane SIMD-groups, the ``(op, "metal")`` rules of ``rules.py``), plus:

* ``check_dtypes`` first: element types MSL lacks (``float64``, ``bfloat16``, fp8) fail
  with "<dtype> is not supported on the metal target" naming the tensor and the user's
  line, before anything is lowered;
* ``static_threadgroup_memory`` after shared-memory planning: the single ``shared.dyn``
  buffer becomes a fixed-size ``threadgroup`` array (TIRx's Metal printer has no dynamic
  threadgroup memory; 32 KiB is the per-threadgroup limit checked here).

``lower(func, target)`` returns the thread-level function; ``build`` prints MSL (``codegen.py``).
"""

from __future__ import annotations

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx.ir.prim.expr import Cast

from ... import errors
from ...ops import tile_op_of
from ..vendor_common import lower_with_stages, vendor_stages
from ..vendor_exchange import stage_metal_exchanges
from . import rules  # noqa: F401 - registers the Metal op rules
from .passes import static_threadgroup_memory

ARCH = "metal"
THREADGROUP_MEMORY = 32 * 1024
UNSUPPORTED_DTYPES = ("float64", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                      "float8_e4m3fnuz", "float8_e5m2fnuz")  # fmt: skip


def _dtype_error(dtype, what, loc):
    return errors.compile_error(f"{dtype} ({what}) is not supported on the metal target", loc)


def stage_check_dtypes(func, state):
    """Parameters, tiles and casts of element types MSL has no type for are refused."""
    for param in func.params:
        dtype = str(getattr(param.ty, "dtype", ""))
        if dtype in UNSUPPORTED_DTYPES:
            raise _dtype_error(dtype, f"tensor {param.name}", getattr(func, "loc", None))
    found = []

    def bind(node):
        ty = node.var.ty
        if hasattr(ty, "dtype") and str(ty.dtype) in UNSUPPORTED_DTYPES and not found:
            found.append((str(ty.dtype), f"tile {node.var.name}", node.loc))
        return node

    def tile_op(node):
        hit = tile_op_of(node)
        if hit is not None and not found:
            for arg in hit[1].args:
                dtype = str(getattr(arg, "ty", ""))
                for bad in UNSUPPORTED_DTYPES:
                    if bad in dtype:
                        found.append((bad, f"T.{hit[0].name} operand", hit[1].loc))
        return node

    def cast(node):
        dtype = str(getattr(node, "ty", ""))
        if dtype in UNSUPPORTED_DTYPES and not found:
            found.append((dtype, "a cast", getattr(node, "loc", None)))
        return node

    tvm_ffi.structural_map(func.body, [(ir.Bind, bind), (ir.Evaluate, tile_op), (Cast, cast)])
    if found:
        raise _dtype_error(*found[0])
    return func


def stage_static_threadgroup_memory(func, state):
    """``shared.dyn`` -> ``threadgroup`` arrays of fixed size (see ``passes.py``)."""
    total = max((o + s for o, s in state.shared_memory.values()), default=0)
    if total > THREADGROUP_MEMORY:
        tiles = ", ".join(f"{n} ({s} B)" for n, (_, s) in state.shared_memory.items())
        raise errors.compile_error(
            f"threadgroup memory of {total} bytes is not supported on the metal target "
            f"(at most {THREADGROUP_MEMORY} per threadgroup): {tiles}"
        )
    return func.with_body(static_threadgroup_memory(func.body))


#: The Metal pipeline, in order (``vendor_common.vendor_stages``: CUDA's stages and these).
STAGES = vendor_stages(
    "metal",
    check_dtypes=stage_check_dtypes,
    lower_exchanges=stage_metal_exchanges,  # warp ops, T.assume (vendor_exchange.py)
    after_shared_memory=("static_threadgroup_memory", stage_static_threadgroup_memory),
)


def lower(func, target=None, pass_configs=None):
    """The thread-level TIRx function for ``func`` on Metal (:data:`STAGES` in order)."""
    return lower_with_stages(func, ARCH, STAGES, pass_configs)


def build(func, target=None, pass_configs=None, compile_flags=None):
    """MSL source of ``func``; returns a :class:`~.codegen.MetalArtifact`."""
    from .codegen import build_metal

    return build_metal(lower(func, target, pass_configs), target)
