"""Load a CudaArtifact and return the raw tvm-ffi function that launches it.

The host library of an artifact is an ordinary tvm-ffi library module: C host code that
checks its arguments (DLPack tensors: shape, dtype, device, strides, alignment), binds
the symbolic dims, and launches the kernel(s) through the CUDA device module embedded in
the same file. Loading it needs:

* ``tvm_ffi.load_module`` for the host code, and
* TIRx's CUDA runtime (``libtvm_runtime_cuda.so``, loaded by ``import tvm_tirx``), which
  registers the loader for the embedded device module. It launches on the stream that
  tvm-ffi reports for the device; when the arguments are torch tensors tvm-ffi uses
  torch's current stream. It also raises a kernel's dynamic shared-memory limit
  (``cuFuncSetAttribute``) when a launch asks for more than the default 48 KB.

Artifacts built with ``DIRECT_LAUNCH`` (``direct_launch.py``; ``meta["direct_launch_kernels"]``)
launch those kernels from the host library itself: on first call per device it
``dlopen``s ``libcuda.so.1``, loads its own raw copy of the cubin in the current context
and then calls ``cuLaunchKernel`` on tvm-ffi's stream, falling back to the packed call
into TIRx's CUDA module when anything fails at init or another context is current.

If the artifact was built where no device compiler could run (``meta["host_embeds"] ==
"source"``), the CUDA runtime compiles the embedded source when it is loaded, through
TIRx's ``tvm_callback_cuda_compile`` (registered by ``tvm_tirx.support.nvcc``).

Nothing here touches TIRx's LLVM backend or orcjit.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from .build import CudaArtifact

__all__ = ["CudaRuntimeError", "load_kernel", "load_module"]


class CudaRuntimeError(RuntimeError):
    """Raised when an artifact cannot be loaded for execution on this machine."""


def _require_cuda_runtime(needs_compiler: bool) -> None:
    import tvm_ffi
    import tvm_tirx  # noqa: F401  (loads libtvm_runtime_cuda.so and registers its loader)

    loader = tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True)
    if loader is None:
        raise CudaRuntimeError(
            "TIRx's CUDA runtime is not available: libtvm_runtime_cuda.so did not load "
            "(it needs the NVIDIA driver library libcuda.so.1), so the CUDA device module "
            "embedded in the host library cannot be loaded on this machine"
        )
    if needs_compiler:
        import tvm_tirx.support.nvcc  # noqa: F401  (registers tvm_callback_cuda_compile)


def load_module(artifact: CudaArtifact | str | os.PathLike) -> Any:
    """Load an artifact's host library (with its CUDA device module) as a tvm-ffi Module.

    ``artifact`` is a :class:`CudaArtifact` or a directory written by
    :meth:`CudaArtifact.save` (verified with :meth:`CudaArtifact.load`).

    The library is copied to a fresh temporary file before ``dlopen``: the dynamic
    loader returns an already-open library for a path it has seen, so loading straight
    from an artifact directory that was later rewritten could run stale code.
    """
    import tvm_ffi

    artifact = _as_artifact(artifact)
    _require_cuda_runtime(artifact.meta.get("host_embeds") == "source")
    fd, path = tempfile.mkstemp(prefix="tilelang_cuda_", suffix=".so")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(artifact.host_library)
        return tvm_ffi.load_module(path)
    finally:
        Path(path).unlink(missing_ok=True)


def _as_artifact(artifact) -> CudaArtifact:
    """``artifact`` itself, or the artifact saved in that directory (TypeError otherwise)."""
    if isinstance(artifact, CudaArtifact):
        return artifact
    if not isinstance(artifact, str | os.PathLike):
        raise TypeError(
            f"artifact must be a CudaArtifact or an artifact directory, got {type(artifact).__name__}"
        )
    return CudaArtifact.load(artifact)


def load_kernel(artifact: CudaArtifact | str | os.PathLike, entry_name: str | None = None) -> Any:
    """Return the tvm-ffi function that runs the artifact's entry on CUDA tensors.

    Call it with torch CUDA tensors (or any DLPack tensors) and Python ints/floats in
    the order of the kernel's parameters; outputs are written in place. It launches on
    the current torch stream and returns without synchronising. There is no Python
    wrapper in the call path: the returned object is the raw ``tvm_ffi.Function``
    (which keeps its module alive).

    Args:
        artifact: a :class:`CudaArtifact` or a saved artifact directory.
        entry_name: host function to return; defaults to ``artifact.entry_name``.

    Raises:
        CudaRuntimeError: TIRx's CUDA runtime cannot run on this machine.
        CorruptArtifactError: a saved artifact directory is damaged.
    """
    artifact = _as_artifact(artifact)
    name = artifact.entry_name if entry_name is None else entry_name
    module = load_module(artifact)
    try:
        function = module.get_function(name)
    except AttributeError as err:
        raise CudaRuntimeError(
            f"entry_name {name!r} is not in the artifact's host library"
        ) from err
    function.tilelang_module = module  # for direct_launch_counts (the function keeps it alive)
    return function


def direct_launch_counts(loaded: Any) -> tuple[int, int]:
    """(direct launches, packed-call fallbacks) of the kernels of a loaded host library.

    ``loaded`` is what :func:`load_module` or :func:`load_kernel` returned (each load is a
    separate library with its own counts; ``JITKernel.torch_function`` is the latter). A
    library built without direct launch has no counter: (0, 0).
    """
    module = getattr(loaded, "tilelang_module", loaded)
    try:
        counts = module.get_function("__tilelang_direct_launch_counts")
    except AttributeError:
        return (0, 0)
    return (int(counts(0)), int(counts(1)))
