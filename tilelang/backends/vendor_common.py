"""What the ROCm and Metal backends share: pipeline scaffolding, printer hooks, artifacts.

Both backends run the CUDA stages (``backends/cuda/pipeline.py``) with an arch of their own
and their ``(op, backend)`` rules; this module holds the pieces that differ between them
only by that name:

* :func:`layout_inference_stage` / :func:`lower_tile_ops_stage`: CUDA's layout inference
  with the lowering context relabelled, and tile-op lowering by the backend's rules;
* :func:`vendor_stages`: the stage list, CUDA's stages with a backend's own in between;
* :func:`lower_with_stages`: each ``T.Kernel`` block of a function through a stage list
  (no ldmatrix: neither target has it);
* :func:`swapped_global_func`: a TIRx global (a printer's compile hook) replaced while the
  printer runs, and put back;
* :func:`save_artifact` / :func:`load_artifact`: a source artifact as files plus
  ``meta.json`` holding the source's sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import replace
from pathlib import Path

from ..engine.instrument import run_stages
from ..engine.pass_config import build_options
from ..lowering.global_layouts import no_vectors_for
from ..lowering.kernels import lower_each_kernel
from ..transform.apply_global_layouts import collect_global_layouts
from ..transform.lower_tile_ops import LowerTileOps
from .cuda import pipeline as cuda_pipeline
from .cuda.pipeline import CudaLowering


def layout_inference_stage(backend: str):
    """A stage running CUDA's layout inference with ``backend``'s rules (the arch picks
    them); afterwards the lowering context says ``backend``."""

    def stage_layout_inference(func, state):
        func = cuda_pipeline.stage_layout_inference(func, state)
        state.ctx = replace(state.ctx, backend=backend)
        return func

    stage_layout_inference.__doc__ = (
        f"CUDA's layout inference with the {backend} rules; the lowering context says "
        f"``{backend}``."
    )
    return stage_layout_inference


def lower_tile_ops_stage(backend: str):
    """A stage replacing each tile op by its ``(op, backend)`` rule's thread-level code."""

    def stage_lower_tile_ops(func, state):
        return func.with_body(LowerTileOps(backend)(func.body, state.ctx))

    stage_lower_tile_ops.__doc__ = (
        f'Each tile op replaced by its ``(op, "{backend}")`` rule\'s thread-level code.'
    )
    return stage_lower_tile_ops


def _portable_ieee_stage(backend: str):
    """CUDA's rounding-mode arithmetic as ordinary operations (``transform/ieee_math.py``)."""
    from ..transform.ieee_math import portable_ieee_calls

    def stage(func, state):
        return func.with_body(portable_ieee_calls(func.body, backend))

    return stage


def vendor_stages(backend: str, check_dtypes, lower_exchanges, pipeline_planning=None,
                  after_shared_memory=None, before_exchanges=None) -> list:  # fmt: skip
    """The stage list of a vendor backend, in order: ``check_dtypes``, CUDA's
    ``heavy_blocks_first``, ``rasterize_blocks`` and ``unswitch_uniform_select``, :func:`layout_inference_stage`, ``pipeline_planning`` (if given),
    CUDA's ``apply_shared_layouts``/``lower_parallel``, :func:`lower_tile_ops_stage`,
    ``portable_ieee_math``, CUDA's
    ``lower_fragments``/``hoist_allocs``/``insert_sync``/``plan_shared_memory``,
    ``after_shared_memory`` (if given), CUDA's ``strip_schedule_hints``/
    ``apply_global_layouts``, ``before_exchanges`` (if given), ``lower_exchanges``.

    ``check_dtypes``, ``lower_exchanges`` and ``pipeline_planning`` are stage functions;
    ``after_shared_memory``/``before_exchanges`` are ``(name, stage)`` pairs.
    """
    cuda = cuda_pipeline
    planning = [] if pipeline_planning is None else [("pipeline_planning", pipeline_planning)]
    after = [] if after_shared_memory is None else [after_shared_memory]
    before = [] if before_exchanges is None else [before_exchanges]
    return [
        ("check_dtypes", check_dtypes),
        ("heavy_blocks_first", cuda.stage_heavy_blocks_first),
        ("rasterize_blocks", cuda.stage_rasterize_blocks),
        ("unswitch_uniform_select", cuda.stage_unswitch_uniform_select),
        ("layout_inference", layout_inference_stage(backend)),
        *planning,
        ("apply_shared_layouts", cuda.stage_apply_shared_layouts),
        ("lower_parallel", cuda.stage_lower_parallel),
        ("lower_tile_ops", lower_tile_ops_stage(backend)),
        ("portable_ieee_math", _portable_ieee_stage(backend)),
        ("lower_fragments", cuda.stage_lower_fragments),
        ("hoist_allocs", cuda.stage_hoist_allocs),
        ("insert_sync", _stage_insert_sync),
        ("plan_shared_memory", cuda.stage_plan_shared_memory),
        *after,
        ("strip_schedule_hints", cuda.stage_strip_schedule_hints),
        ("apply_global_layouts", cuda.stage_apply_global_layouts),
        *before,
        ("lower_exchanges", lower_exchanges),  # warp ops, T.assume (vendor_exchange.py)
    ]


def _stage_insert_sync(func, state):
    """CUDA's ``insert_sync`` (``T.ws`` branches chained first) without barriers of part of
    a block: HIP and MSL have no ``bar.sync id, n``, so tile work re-planned under an ``if``
    on the thread index that needs one is a CompileError naming the ``if``."""
    from .cuda.passes.insert_sync import insert_sync
    from .cuda.passes.warp_specialize import merge_ws_branches

    body = merge_ws_branches(func.body, state.thread_var)
    return func.with_body(insert_sync(body, state.thread_var, partial_barriers=False))


def lower_with_stages(func, arch: str, stages, pass_configs=None):
    """The thread-level function of ``func``: each ``T.Kernel`` block on its own
    (``tilelang.lowering.kernels``) through ``stages`` with a :class:`CudaLowering` state
    for ``arch``."""
    import tilelang.ops  # noqa: F401 - registers the op rules

    options = dict(build_options(pass_configs))
    options["ldmatrix"] = False

    def lower_one(part):
        state = CudaLowering(arch, options, collect_global_layouts(part.body))
        with no_vectors_for(state.global_layouts):
            return run_stages(part, stages, pass_configs, state=state)

    return lower_each_kernel(func, lower_one)


@contextlib.contextmanager
def swapped_global_func(name: str, func, lock):
    """While the block runs (holding ``lock``), the TIRx global ``name`` is ``func``;
    the previous one (or none) is put back afterwards."""
    import tvm_ffi

    with lock:
        previous = tvm_ffi.get_global_func(name, allow_missing=True)
        tvm_ffi.register_global_func(name, func, override=True)
        try:
            yield
        finally:
            if previous is None:
                tvm_ffi.remove_global_func(name)
            else:
                tvm_ffi.register_global_func(name, previous, override=True)


def source_sha256(source: str) -> str:
    """The hex sha256 of ``source`` (UTF-8), as ``meta.json`` records it."""
    return hashlib.sha256(source.encode()).hexdigest()


def save_artifact(directory, files: dict, meta: dict) -> Path:
    """Write ``files`` (name -> text or bytes; None: skipped) and ``meta.json`` into
    ``directory`` (created); returns its path."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if isinstance(data, bytes):
            (path / name).write_bytes(data)
        elif data is not None:
            (path / name).write_text(data)
    (path / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path


def load_artifact(directory, source_name: str, what: str, error, kind=None):
    """(source, meta, path) of an artifact :func:`save_artifact` wrote; ``error`` (an
    exception class) naming ``what`` artifact when a file is missing or unreadable, when the
    source's sha256 is not the recorded one, or when ``kind`` is given and not recorded."""
    path = Path(directory)
    try:
        meta = json.loads((path / "meta.json").read_text())
        source = (path / source_name).read_text()
    except (OSError, ValueError) as err:
        raise error(f"{what} artifact {str(path)!r} is unreadable: {err}") from err
    if (kind is not None and meta.get("kind") != kind) or meta.get("sha256") != source_sha256(
        source
    ):
        raise error(f"{what} artifact {str(path)!r}: {source_name} does not match meta.json")
    return source, meta, path


__all__ = [
    "layout_inference_stage",
    "load_artifact",
    "lower_tile_ops_stage",
    "lower_with_stages",
    "save_artifact",
    "source_sha256",
    "swapped_global_func",
    "vendor_stages",
]
