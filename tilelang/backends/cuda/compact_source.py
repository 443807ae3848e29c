"""Compact CUDA source: how ``build_cuda`` keeps TIRx from inflating the generated code.

Two TIRx defaults made the CUDA source of a large kernel grow to hundreds of kilobytes
and cost seconds of compile time (README GEMM 128x256x64 with ``T.use_swizzle``: 1.5 s in
one pass, 0.8 s in the next, 280 KB of source):

* **Unrolled loops.** TIRx's ``UnrollLoop`` pass expands every ``T.unroll`` loop into
  copies of its body before the simplifier and CSE run over each copy. With the pass
  config ``tirx.UnrollLoop: {"explicit_unroll": False}`` the loop stays a loop and the
  code generator prints it as ``#pragma unroll`` + ``for``; nvcc / NVRTC unroll it fully
  (the trip counts are constants), so the SASS is the same (checked with ``cuobjdump
  -sass``: same HGMMA count, no local-memory traffic). :func:`unroll_in_device_compiler`
  sets that config for the duration of a build unless the caller's ``PassContext``
  already has one.
* **The device-side StmtSimplify.** TIRx finishes each device function with
  ``StmtSimplify`` + ``LowerIntrin``. Coming after CSE, that ``StmtSimplify`` substitutes
  every ``cse_v`` binding back into its uses, so each address expression is spelled out
  in full again (with ``T.use_swizzle`` they are long) and ``LowerIntrin`` then walks the
  grown trees. The lowering pipeline has already simplified before CSE, so the
  pipelines named by :func:`compact_pipeline` keep TIRx's lowering (after ``ConvertSSA``,
  see ``_compact_factory``) and host finalization and finish device functions with
  ``LowerIntrin`` alone.

Both change only the text of the source, not what it computes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["compact_pipeline", "unroll_in_device_compiler"]

#: Appended to a TIRx pipeline's name for its compact variant.
COMPACT_SUFFIX = "+tilelang_compact"
_UNROLL_KEY = "tirx.UnrollLoop"
_FACTORIES: dict[str, object] = {}


def _device_finalize():
    """Device finalization without StmtSimplify (see the module docstring)."""
    import tvm_tirx
    from tvm_tirx import tirx

    return tvm_tirx.ir.transform.Sequential([tirx.transform.LowerIntrin()])


def _compact_factory(base: str):
    import tvm_tirx
    from tvm_tirx import tirx

    def factory(*, target=None):
        lower, finalize_host, _finalize_device = tirx.get_tir_pipeline(base, target=target)

        @tvm_tirx.ir.transform.module_pass(opt_level=0, name="tilelang.CompactLowering")
        def compact_lower(mod, _ctx):
            # A variable bound in two places (e.g. in the vectorized and in the scalar
            # copy of one loop body) was harmless while UnrollLoop copied each body with
            # fresh variables; kept as loops, the host/device split then took it for a free
            # variable of the kernel ("variables (code,) are used, but are not passed in
            # as API arguments"). ConvertSSA gives every definition its own variable.
            return lower(tirx.transform.ConvertSSA()(mod))

        return compact_lower, finalize_host, _device_finalize

    return factory


def compact_pipeline(base: str = "default") -> str:
    """Register (idempotently) and return the name of the compact variant of TIRx pipeline
    ``base``: the same lowering and host finalization, device finalization without
    StmtSimplify."""
    from tvm_tirx import tirx
    from tvm_tirx.tirx import compilation_pipeline as cp

    if base not in cp.PIPELINE_MAP:
        raise ValueError(f"unknown TIRx pipeline {base!r}; registered: {sorted(cp.PIPELINE_MAP)}")
    name = base + COMPACT_SUFFIX
    factory = _FACTORIES.get(base)
    if factory is None:
        factory = _FACTORIES[base] = _compact_factory(base)
    if cp.PIPELINE_MAP.get(name) is not factory:
        tirx.register_tir_pipeline(name, factory)
    return name


@contextlib.contextmanager
def unroll_in_device_compiler() -> Iterator[None]:
    """Within the block, TIRx keeps ``T.unroll`` loops as ``#pragma unroll`` loops.

    Enters a ``PassContext`` equal to the current one (same instruments, so pass timing
    and IR dumps still see every pass) plus ``tirx.UnrollLoop: {"explicit_unroll":
    False}``; a ``tirx.UnrollLoop`` config the caller already set is left alone.
    """
    from tvm_tirx.ir.transform import PassContext

    current = PassContext.current()
    config = dict(current.config.items()) if current.config is not None else {}
    if _UNROLL_KEY in config:
        yield
        return
    config[_UNROLL_KEY] = {"explicit_unroll": False}
    context = PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=list(current.instruments),
        config=config,
    )
    with context:
        yield
