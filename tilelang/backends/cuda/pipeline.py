"""The CUDA backend pipeline: traced tilelang kernel -> thread-level TIRx -> CudaArtifact.

    trace
      ─► rasterize_blocks      T.use_swizzle: blocks renumbered in panels (L2 reuse)
      ─► layout_inference      every fragment and T.Parallel nest gets a Fragment
      ─► pipeline_planning     (if present: cp.async software pipelining of T.Pipelined)
      ─► apply_shared_layouts  element accesses of laid-out shared tiles go through the layout
      ─► lower_parallel        T.Parallel nests partitioned over threads by their layout
      ─► lower tile ops        tl.copy/fill/reduce/gemm/... by their ("op", "cuda") rules
      ─► lower_fragments       fragments -> per-thread register arrays
      ─► insert_sync           __syncthreads where shared memory is handed between threads
      ─► plan_shared_memory    all shared tiles in one shared.dyn buffer (offsets, reuse)
      ─► strip schedule hints  ─► build_cuda (TIRx codegen + nvcc/nvrtc)

``lower(func, target)`` returns the thread-level function (what tests inspect);
``build(func, target, ...)`` compiles it.
"""

from __future__ import annotations

import importlib
import importlib.util

from tvm_tirx import ir

from ... import errors
from ...layout import _expr as E
from ...ops import lowering_for, tile_op_of
from ...ops.registry import _LOWERINGS
from ...transform.apply_global_layouts import (
    apply_global_layouts,
    collect_global_layouts,
    no_vectors_for,
)
from ...transform.apply_shared_layouts import apply_shared_layouts
from ...transform.insert_sync import insert_sync
from ...transform.instrument import on_body, run_stages
from ...transform.layout_inference import infer_layouts, strip_layout_annotations
from ...transform.lower_fragments import lower_fragments
from ...transform.lower_parallel import lower_parallel
from ...transform.pass_config import build_options
from ...transform.plan_shared_memory import plan_shared_memory
from ...transform.rasterize_blocks import rasterize_blocks
from ...transform.stmt import StmtMutator, StripScheduleHints, launch_of, launches_of
from ...transform.thread_utils import is_fragment, new_tensor
from .context import CudaLowerContext


class _LowerTileOpsCuda(StmtMutator):
    """Replace tile ops by their CUDA rules; gemm falls back to the scalar rule if needed."""

    def visit_Evaluate(self, stmt, ctx):
        found = tile_op_of(stmt)
        if found is None:
            return stmt
        op, call = found
        if op.name == "gemm" and ("gemm", "cuda") not in _LOWERINGS:
            rule = lowering_for(op, "cuda_fallback", call)
        else:
            rule = lowering_for(op, "cuda", call)
        return rule(op.view(call), ctx)


def _rebuild(body, new_inner):
    """``body`` with its innermost launch's body replaced."""
    while isinstance(body, ir.SeqStmt) and len(body.seq) == 1:
        body = body.seq[0]
    if launch_of(body) is None:
        return new_inner
    return ir.RegionStmt(
        body.op,
        body.args,
        body.body_params,
        body.attrs,
        _rebuild(body.body, new_inner),
        body.result_vars,
        body.loc,
    )


def _thread_info(func):
    launches, _ = launches_of(func.body)
    threads = [x for x in launches if x[0].startswith("threadIdx")]
    if not threads:
        raise errors.compile_error("a CUDA kernel needs a T.Kernel(..., threads=N) launch")
    if len(threads) > 1:
        raise errors.compile_error("the CUDA backend supports one thread dimension (threads=N)")
    tag, extent, var = threads[0]
    n = E.as_const_int(extent)
    if n is None:
        raise errors.compile_error("the CUDA block size must be static")
    return var, n


def _layout_annotations(func):
    ann = func.attrs["tl.layout_map"] if func.attrs and "tl.layout_map" in func.attrs else None
    return dict(ann.items()) if ann is not None else {}


def lower(func, target=None, pass_configs=None):
    """The thread-level TIRx function for ``func`` (see the module docstring).

    The passes run as named stages (``tilelang.transform.instrument.run_stages``), so
    ``TILELANG_DUMP_IR``/``tl.enable_dump_ir``, pass timing and ``tilelang.lower`` see each.
    """
    import tilelang.ops  # noqa: F401 - registers the op rules

    from ...ops import atomic_cuda, cumsum_cuda, debug_cuda  # noqa: F401 - CUDA-only rules

    arch = (target or {}).get("arch", "sm_90a")
    if build_options(pass_configs)["disable_wgmma"] and arch.endswith("a"):
        arch = arch[:-1]  # instruction selection without wgmma; the build keeps the real arch
    state = {}

    def layout_inference(f):
        tvar, threads = _thread_info(f)
        info = infer_layouts(f, threads, arch, _layout_annotations(f))
        locals_ = {}
        for var, frag in info.layouts.items():
            if is_fragment(var):
                locals_[var] = new_tensor(
                    f"{var.name}_local", [frag.get_local_size()], str(var.ty.dtype), "local"
                )
        ctx = CudaLowerContext(
            "cuda",
            {},
            threads,
            None,
            tvar,
            arch,
            info.layouts,
            locals_,
            [],
            {tag: var for tag, _, var in launches_of(f.body)[0]},
        )
        state.update(tvar=tvar, threads=threads, info=info, locals=locals_, ctx=ctx)
        # layouts live in the context; the consumed T.annotate_layout statements go
        return f.with_body(strip_layout_annotations(f.body))

    def pipeline_planning(f):
        if importlib.util.find_spec("tilelang.transform.pipeline_planning") is None:
            return f
        planning = importlib.import_module("tilelang.transform.pipeline_planning")
        return planning.plan_pipelines(f, state["ctx"])  # tile level, after layout inference

    def hoist_allocs(body):
        ctx = state["ctx"]
        if not ctx.extra_allocs:
            return body
        _, inner = launches_of(body)
        inner_seq = list(inner.seq) if isinstance(inner, ir.SeqStmt) else [inner]
        return _rebuild(body, ir.SeqStmt(list(ctx.extra_allocs) + inner_seq))

    stages = [
        ("rasterize_blocks", rasterize_blocks),
        ("layout_inference", layout_inference),
        ("pipeline_planning", pipeline_planning),
        ("apply_shared_layouts", on_body(lambda b: apply_shared_layouts(b, state["ctx"]))),
        (
            "lower_parallel",
            on_body(
                lambda b: lower_parallel(
                    b, state["info"].loops, state["tvar"], state["threads"], state["ctx"]
                )
            ),
        ),
        ("lower_tile_ops", on_body(lambda b: _LowerTileOpsCuda("cuda")(b, state["ctx"]))),
        (
            "lower_fragments",
            on_body(
                lambda b: lower_fragments(b, state["info"].layouts, state["locals"], state["ctx"])
            ),
        ),
        ("hoist_allocs", on_body(hoist_allocs)),
        ("insert_sync", on_body(lambda b: insert_sync(b, state["tvar"]))),
        (
            "plan_shared_memory",
            on_body(lambda b: plan_shared_memory(b, arch, state["ctx"].layout_map)),
        ),
        ("strip_schedule_hints", on_body(lambda b: StripScheduleHints("cuda")(b, state["ctx"]))),
        ("apply_global_layouts", on_body(lambda b: apply_global_layouts(b, global_layouts))),
    ]
    global_layouts = collect_global_layouts(func.body)
    with no_vectors_for(global_layouts):
        return run_stages(func, stages, pass_configs)


def build(func, target=None, pass_configs=None, compile_flags=None, compiler=None):
    """Compile ``func`` for CUDA; returns a CudaArtifact."""
    from .build import _nvrtc_available, build_cuda

    target = dict(target or {"kind": "cuda", "arch": "sm_90a"})
    options = build_options(pass_configs)
    lowered = lower(func, target, pass_configs)
    compiler = compiler or ("nvrtc" if _nvrtc_available() else "nvcc")
    return build_cuda(
        lowered,
        arch=target.get("arch", "sm_90a"),
        compiler=compiler,
        compile_flags=[*(compile_flags or ()), *options["device_flags"]],
        fast_math=True if options["fast_math"] is None else options["fast_math"],
    )
