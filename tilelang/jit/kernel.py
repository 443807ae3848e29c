"""JITKernel: a compiled kernel you call on torch tensors (or numpy arrays)."""

from __future__ import annotations

from .. import errors
from ..backends.registry import get_backend, resolve_target
from . import checks
from .params import OutputAllocator, read_params


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
        self.artifact = artifact or self.backend.build(
            func,
            target=self.target,
            pass_configs=self.pass_configs,
            compile_flags=self.compile_flags,
        )
        self._fn = None  # loaded on first call: compiling needs no GPU, running does
        self._outputs = OutputAllocator(self.params, self.out_idx)
        self._n_inputs = len(self.params) - len(self.out_idx)
        self._name = (
            str(func.attrs["global_symbol"])
            if func.attrs and "global_symbol" in func.attrs
            else "kernel"
        )

    # -- calling ------------------------------------------------------------
    @property
    def torch_function(self):
        """The loaded packed function (loads the artifact on first use)."""
        if self._fn is None:
            self._fn = self.backend.load(self.artifact)
        return self._fn

    def __call__(self, *args):
        fn = self._fn
        if fn is None:
            fn = self.torch_function
        if not self.out_idx:
            self._launch(fn, args, args)
            return None
        if len(args) != self._n_inputs:
            raise errors.KernelArgumentError(
                f"{self._name} takes {self._n_inputs} inputs "
                f"({', '.join(self.params[i].name for i in self._outputs.in_idx)}), got {len(args)}"
            )
        as_numpy = any(type(a).__module__ == "numpy" for a in args)
        inputs = [self._from_numpy(a) for a in args] if as_numpy else list(args)
        device = self._device_of(inputs)
        outs = self._outputs.allocate(inputs, device)
        full = []
        it_in, it_out = iter(inputs), iter(outs)
        for i in range(len(self.params)):
            full.append(next(it_out) if i in self.out_idx else next(it_in))
        self._launch(fn, full, full)
        if as_numpy:
            outs = [o.numpy() for o in outs]
        return outs[0] if len(outs) == 1 else outs

    def _launch(self, fn, args, shown):
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - turn into an argument-by-argument report
            if isinstance(err, errors.TileLangError):
                raise
            checks.raise_for(self.params, list(shown), self._name, self.target["kind"], cause=err)

    def _device_of(self, inputs):
        for a in inputs:
            dev = getattr(a, "device", None)
            if dev is not None:
                return dev
        return "cuda" if self.target["kind"] == "cuda" else "cpu"

    @staticmethod
    def _from_numpy(a):
        if type(a).__module__ == "numpy":
            import torch

            return torch.from_numpy(a)
        return a

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

        lib = getattr(self.artifact, "lib_path", None)
        if lib is None:
            raise errors.CompileError("this artifact has no shared library to export")
        shutil.copyfile(lib, path)
