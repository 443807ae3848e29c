"""JITKernel: a compiled kernel you call on torch tensors (or numpy arrays)."""

from __future__ import annotations

import numpy as np

from .. import errors
from ..backends.registry import get_backend, resolve_target
from ..lowering.kernels import workspace_specs
from . import checks
from .params import OutputAllocator, read_params
from .workspaces import workspace_launcher

_NDARRAY = np.ndarray

try:  # True while torch.compile traces a call (dynamo folds it; 0.25 us eagerly)
    from torch.compiler import is_compiling as _is_compiling
except ImportError:  # pragma: no cover - torch is a dependency

    def _is_compiling():
        return False


def _normalize_out_idx(out_idx, n):
    if out_idx is None:
        return []
    if isinstance(out_idx, int):
        out_idx = [out_idx]
    result = []
    for i in out_idx:
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise errors.KernelArgumentError(f"out_idx {i} is out of range for {n} parameters")
        result.append(j)
    return result


def _register_traced_op(ctx):
    """(Run by dynamo at trace time.) Sets ``_traced_op`` of the traced call's kernel."""
    kernel = ctx.get_local("self")._i_will_not_complain_if_bc_breaks_VariableTracker().value
    if kernel._traced_op is None:
        try:
            kernel._traced_op = kernel.as_torch_op()
        except errors.TileLangError as err:
            raise errors.KernelArgumentError(
                f"{kernel._name} cannot run inside torch.compile: {err}"
            ) from err


class JITKernel:
    """A compiled kernel: ``kernel(*inputs)`` allocates the ``out_idx`` outputs and returns them."""

    def __init__(
        self,
        func,
        out_idx=None,
        target="auto",
        execution_backend="auto",
        pass_configs=None,
        compile_flags=None,
        artifact=None,
    ):
        self.prim_func = func
        self.target = resolve_target(target)
        self.execution_backend = execution_backend
        self.pass_configs = dict(pass_configs or {})
        self.compile_flags = list(compile_flags or [])
        self.params = read_params(func)
        self.out_idx = _normalize_out_idx(out_idx, len(self.params))
        self.backend = get_backend(self.target["kind"])
        self.artifact = artifact or self._build(func)
        self._fn = None  # loaded on first call: compiling needs no GPU, running does
        self._fast = None  # bound on the first call with out_idx (see __call__)
        self._direct = None  # the loaded function, once called, when there is no out_idx
        self._traced_op = None  # the torch op that torch.compile traces (see _traced_call)
        self._outputs = OutputAllocator(self.params, self.out_idx, self.target["kind"])
        self._n_inputs = len(self.params) - len(self.out_idx)
        # integer scalars are range-checked on every call (the FFI call would wrap them)
        # and symbolic extents against their variable's dtype
        in_idx = self._outputs.in_idx
        self._scalar_ranges = checks.scalar_ranges(self.params, in_idx)
        self._scalar_ranges += checks.dim_ranges(self.params, in_idx)
        self._name = (
            str(func.attrs["global_symbol"])
            if func.attrs and "global_symbol" in func.attrs
            else "kernel"
        )

    def _build(self, func):
        """The backend's build; a foundation error becomes a CompileError naming the kernel."""
        from ..engine.pass_config import build_options

        build_options(self.pass_configs)  # a bad option: ValueError naming the key
        try:
            return self.backend.build(
                func,
                target=self.target,
                pass_configs=self.pass_configs,
                compile_flags=self.compile_flags,
            )
        except errors.TileLangError:
            raise
        except Exception as err:  # noqa: BLE001 - TIRx/LLVM/nvcc internals
            from ..language.diagnostics import compile_error

            raise compile_error(err, func, self.target) from err

    # -- calling ------------------------------------------------------------
    @property
    def torch_function(self):
        """The loaded packed function (loads the artifact on first use)."""
        if self._fn is None:
            fn = self.backend.load(self.artifact)
            workspaces = workspace_specs(self.prim_func)
            if workspaces:  # T.alloc_global: fresh tensors appended per call
                fn = workspace_launcher(fn, workspaces, self.target["kind"])
            self._fn = fn
        return self._fn

    def __call__(self, *args):
        """Run the kernel; with ``out_idx``, allocate the outputs and return them.

        The common call (the right count, a torch tensor as the first tensor input, one
        output of static shape as the last parameter) costs one allocation plus the raw
        tvm-ffi call: everything static is bound once in ``self._fast`` (see
        :meth:`_fast_plan`); a CUDA call reads the device of the first tensor input (no
        scan over the arguments). Other calls take :meth:`_call`.
        """
        if _is_compiling():  # traced by torch.compile: through the kernel's custom op
            return self._traced_call(args)
        if self._scalar_ranges:
            checks.check_scalars(self._scalar_ranges, args)
        direct = self._direct
        if direct is not None:  # no out_idx: the raw call
            try:
                direct(*args)
            except Exception as err:  # noqa: BLE001 - explained argument by argument
                self._rejected(args, err, direct)
            return None
        fast = self._fast
        if fast is not None:
            fn, n, pos, like, empty, shape, dtype = fast
            if len(args) == n:
                first = args[pos]  # numpy here: numpy in, numpy out (_call)
                if type(first) is not _NDARRAY:
                    if like is not None:  # CPU: shape, dtype and device of a stored template
                        result = empty(like)
                    else:  # CUDA: on the first tensor input's GPU
                        try:
                            device = first.device
                        except AttributeError:  # not a tensor: _call explains what is wrong
                            return self._call(args)
                        result = empty(*shape, dtype=dtype, device=device)
                    try:
                        fn(*args, result)
                    except Exception as err:  # noqa: BLE001 - explained argument by argument
                        self._rejected((*args, result), err, fn)
                    return result
        return self._call(args)

    def _traced_call(self, args):
        """A call that ``torch.compile`` traces (``fullgraph=True`` included): the kernel
        runs as its ``torch.library`` op (:meth:`as_torch_op`), registered at trace time."""
        from torch._dynamo.comptime import comptime

        comptime(_register_traced_op)  # dynamo runs it now, at trace time (eagerly: no-op)
        op = self._traced_op
        if op is None:  # traced without dynamo (torch.export non-strict): register now
            op = self._traced_op = self.as_torch_op()
        return op(*args)

    def _call(self, args):
        """Every call: outputs allocated per ``OutputAllocator``, numpy in and out."""
        fn = self._fn
        if fn is None:
            fn = self.torch_function
        if not self.out_idx:
            self._direct = fn
            try:
                fn(*args)
            except Exception as err:  # noqa: BLE001 - explained argument by argument
                self._rejected(args, err, fn)
            return None
        out = self._outputs
        if not out.ready:
            out.prepare()
            if out.static and out.single and out.tail and out.device_pos is not None:
                self._fast = self._fast_plan(fn, out)
        return self._call_general(fn, args)

    def _fast_plan(self, fn, out):
        """What ``__call__``'s fast path binds: (fn, inputs, device position, template, ...).

        A CPU kernel only runs CPU tensors, so its output comes from ``torch.empty_like``
        of a one-element template expanded to the output shape (not dense, so the copy is
        contiguous; 0.2 us cheaper than ``torch.empty`` with a shape and keywords).
        """
        import torch

        if self.target["kind"] == "cpu":
            template = torch.empty((), dtype=out.dtype0, device=out.default_device)
            template = template.expand(out.shape0)
            return (fn, self._n_inputs, out.device_pos, template, torch.empty_like, None, None)
        return (fn, self._n_inputs, out.device_pos, None, out.empty, out.shape0, out.dtype0)

    def _call_general(self, fn, args):
        """``__call__`` for numpy inputs, a wrong count, or no tensor to take the device from."""
        if len(args) != self._n_inputs:
            raise errors.KernelArgumentError(
                f"{self._name} takes {self._n_inputs} inputs "
                f"({', '.join(self.params[i].name for i in self._outputs.in_idx)}), got {len(args)}"
            )
        as_numpy = _NDARRAY in map(type, args)  # numpy in (any argument), numpy out
        inputs = [self._from_numpy(a) for a in args] if as_numpy else list(args)
        device = self._device_of(inputs)
        try:
            outs = self._outputs.allocate(inputs, device)
        except errors.TileLangError:
            raise
        except Exception as err:  # noqa: BLE001 - inputs not tensors of the declared rank
            in_params = [self.params[i] for i in self._outputs.in_idx]
            checks.raise_for(in_params, inputs, self._name, self.target["kind"], cause=err)
        full = self._outputs.assemble(inputs, outs)
        try:
            fn(*full)
        except Exception as err:  # noqa: BLE001
            self._rejected(full, err, fn)
        if as_numpy:
            outs = [o.numpy() for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def _rejected(self, args, err, fn=None):
        """Explain a call the compiled function refused (called inside ``except``); a call
        with zero-size tensors is retried with the compact strides TIRx expects."""
        if isinstance(err, errors.TileLangError):
            raise err
        retry = checks.compact_empty(args) if fn is not None else None
        if retry is not None:
            try:
                fn(*retry)
                return
            except Exception as again:  # noqa: BLE001 - explained below
                err = again
        checks.raise_for(self.params, list(args), self._name, self.target["kind"], cause=err)

    def _device_of(self, inputs):
        for a in inputs:
            dev = getattr(a, "device", None)
            if dev is not None:
                return dev
        return self._outputs.default_device

    @staticmethod
    def _from_numpy(a):
        if type(a) is _NDARRAY:
            import torch

            return torch.from_numpy(a)
        return a

    def as_torch_op(self, name=None, mutates_args="auto"):
        """This kernel as a ``torch.library`` custom op (see ``tilelang.jit.torch_op``)."""
        from .torch_op import torch_op

        return torch_op(self, name=name, mutates_args=mutates_args)

    # -- inspection -----------------------------------------------------------
    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The generated device source (CUDA C for GPU targets; lowered TIRx for the CPU)."""
        return self.artifact.kernel_source

    def get_host_source(self) -> str:
        return getattr(self.artifact, "host_source", "")

    def get_profiler(self, tensor_supply_type=None):
        """A Profiler that feeds this kernel random inputs (see ``tilelang.profiler``)."""
        from ..profiler import Profiler, TensorSupplyType

        return Profiler(self, tensor_supply_type or TensorSupplyType.Auto)

    @property
    def kernel_source(self) -> str:
        return self.get_kernel_source()

    def export_library(self, path: str) -> None:
        import shutil

        data = getattr(self.artifact, "library_bytes", None)
        if data is not None:
            with open(path, "wb") as handle:
                handle.write(data())
            return
        lib = getattr(self.artifact, "lib_path", None)
        if lib is None:
            raise errors.CompileError("this artifact has no shared library to export")
        shutil.copyfile(lib, path)
