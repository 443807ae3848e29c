"""The CPU (LLVM) backend: one linear pipeline from traced kernel to a loaded shared library.

    trace ─► ws_schedule_program_order ─► unswitch_uniform_select ─► lower_threads ─► LegalizeSafeMemoryAccess ─► LowerTileOps("cpu") ─► strip schedule hints
          ─► legalize_half_math ─► legalize_fp8_casts ─► store_fp8_tiles_as_bytes ─► lower_blocks
          ─► TIRx pipeline + LLVM codegen ─► .so ─► tvm_ffi.load_module

Blocks run as a parallel loop over cores (serial when the kernel uses atomics);
a block's threads and fragments become loops and arrays of that block.
"""

from __future__ import annotations

import os
import tempfile

import tvm_ffi
from tvm_tirx import ir
from tvm_tirx import tirx as _tirx

from ...engine.instrument import on_body, run_stages
from ...engine.pass_config import build_options
from ...lowering.atomic_mem import lower_cpu as lower_atomic_mem
from ...lowering.global_layouts import no_vectors_for
from ...lowering.kernels import lower_each_kernel
from ...lowering.stmt import StripScheduleHints, contains
from ...ops import tile_op_of
from ...ops.debug.op import uses_device_assert
from ...transform.apply_global_layouts import apply_global_layouts, collect_global_layouts
from ...transform.ieee_math import portable_ieee_calls
from ...transform.legalize_safe_access import legalize_safe_memory_access
from ...transform.lower_tile_ops import LowerTileOps
from ...transform.unswitch_uniform_select import unswitch_uniform_select
from ...transform.wide_index import widen_indices
from ...transform.ws_schedule import program_order as ws_program_order
from .fp8_convert import legalize_fp8_casts, store_fp8_tiles_as_bytes
from .implicit_sync import insert_implicit_syncs
from .legalize_math import legalize_half_math
from .lower_threads import lower_blocks, lower_threads
from .warp_mma import lower_warp_mma
from .warp_ops import lower_warp_ops

TARGET = {"kind": "llvm"}  # plus "mcpu": see host_target()


def _host_cpu_name() -> str:
    """LLVM's name for this machine's CPU (e.g. ``znver4``), or "" when unknown."""
    get = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUName", allow_missing=True)
    try:
        name = str(get()) if get is not None else ""
    except Exception:  # noqa: BLE001 - no LLVM backend here: baseline code
        return ""
    return "" if name in ("generic", "") else name


def host_cpu() -> str:
    """The CPU the backend compiles for: ``$TILELANG_CPU_MCPU`` (``generic``: the baseline
    instruction set, portable across machines of the architecture), else this machine's.

    Code for the host CPU uses its vector and half-precision conversion instructions (an fp16
    GEMM runs ~100x faster on an AMD EPYC than with baseline x86-64, whose fp16 conversions
    are library calls); the kernel cache's key includes this name.
    """
    name = os.environ.get("TILELANG_CPU_MCPU", "").strip()
    if name:
        return "" if name == "generic" else name
    return _host_cpu_name()


def host_target() -> dict:
    """The LLVM target of :func:`build` (``TARGET`` with the :func:`host_cpu`)."""
    mcpu = host_cpu()
    return {**TARGET, "mcpu": mcpu} if mcpu else dict(TARGET)


def _uses_atomics(body) -> bool:
    def is_atomic(x):
        found = isinstance(x, ir.Evaluate) and tile_op_of(x)
        return bool(found) and found[0].name in ("atomic", "atomic_prev", "atomic_or")

    return contains(body, is_atomic)


def lower(func, pass_configs=None):
    """The kernel as plain TIRx loops over blocks, ready for TIRx's own pipeline.

    Named stages (dumped/timed by ``tilelang.engine.instrument``). Blocks run serially
    when the kernel uses atomics or ``T.device_assert`` (a failed assert must reach the caller).
    ``T.alloc_global`` workspaces become trailing parameters; several ``T.Kernel`` blocks
    are lowered one by one and run in order (``tilelang.lowering.kernels``).
    """
    build_options(pass_configs)  # rejects values tilelang cannot honour (index bit width)
    return lower_each_kernel(func, lambda part: _lower_kernel(part, pass_configs))


def _lower_kernel(func, pass_configs):
    options = build_options(pass_configs)
    checked = options.get("bounds_check", False)
    simt_guards = options["safe_memory_access"] and not checked
    unswitch = options["unswitch_uniform_select"]
    # a failed assertion inside a parallel task would be lost: checked kernels run serially
    parallel = not (_uses_atomics(func.body) or uses_device_assert(func.body) or checked)
    stages = [
        # T.annotate_ws_schedule checked, then run in program order (its meaning)
        ("ws_schedule_program_order", on_body(ws_program_order)),
        # T.Parallel selects on a tile-uniform condition: select-free copies under an `if`
        *([("unswitch_uniform_select", unswitch_uniform_select)] if unswitch else []),
        ("lower_warp_ops", on_body(lower_warp_ops)),
        ("lower_warp_mma", on_body(lower_warp_mma)),  # ldmatrix / mma.sync helpers
        ("lower_atomic_mem", on_body(lower_atomic_mem)),  # T.atomic_load/store: plain
        ("implicit_syncs", on_body(insert_implicit_syncs)),  # CUDA's shared-memory barriers
        ("lower_threads", on_body(lower_threads)),
        # SIMT accesses too, as upstream; with tl.enable_bounds_check they trap instead
        (
            "legalize_safe_memory_access",
            on_body(lambda b: legalize_safe_memory_access(b, "cpu", everywhere=simt_guards)),
        ),
        ("lower_tile_ops", on_body(LowerTileOps("cpu"))),
        ("strip_schedule_hints", on_body(StripScheduleHints("cpu"))),
        ("legalize_half_math", on_body(legalize_half_math)),
        ("portable_ieee_math", on_body(lambda b: portable_ieee_calls(b, "cpu"))),
        ("legalize_fp8_casts", on_body(legalize_fp8_casts)),  # round to nearest even
        ("store_fp8_tiles_as_bytes", on_body(store_fp8_tiles_as_bytes)),
        *([("bounds_check", on_body(_bounds_checks))] if checked else []),
        ("lower_blocks", on_body(lambda b: lower_blocks(b, parallel=parallel))),
        ("apply_global_layouts", on_body(lambda b: apply_global_layouts(b, global_layouts))),
        ("widen_indices", on_body(widen_indices)),
        ("device_context_without_tensors", _device_context_without_tensors),
    ]
    global_layouts = collect_global_layouts(func.body)
    with no_vectors_for(global_layouts):
        return run_stages(func, stages, pass_configs)


def _device_context_without_tensors(func):
    """A kernel without tensor parameters (``T.Kernel(threads=n)`` over shared/fragment
    buffers, scalars only) runs on CPU device 0: TIRx takes the device of allocations from
    the first tensor argument and has none to take here."""
    if any(hasattr(p.ty, "shape") for p in func.params):
        return func
    device = [ir.const(1, "int32"), ir.const(0, "int32")]  # kDLCPU, device 0
    return func.with_body(ir.RegionStmt("tirx.device_context", device, [], None, func.body))


def _bounds_checks(body):
    """``tl.enable_bounds_check``: an assertion before every access not proven in bounds."""
    from ...transform.check_bounds import cpu_check, insert_bounds_checks

    return insert_bounds_checks(body, cpu_check, "cpu")


def build(func, pass_configs=None, out_dir=None):
    """Compile ``func`` for the host CPU; returns (shared-library path, lowered function)."""
    lowered = lower(func, pass_configs)
    exe = _tirx.compile(lowered, target=host_target())
    out_dir = out_dir or tempfile.mkdtemp(prefix="tilelang_cpu_")
    path = os.path.join(out_dir, "kernel.so")
    exe.export_library(path)
    return path, lowered


def load(path: str, name: str):
    """The packed function ``name`` from a built shared library."""
    return tvm_ffi.load_module(path)[name]
