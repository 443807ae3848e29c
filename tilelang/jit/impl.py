"""``JITImpl``: what ``@tilelang.jit`` returns, for both of upstream's forms.

- lazy (the factory form): the function returns a ``@T.prim_func``; calling the
  ``JITImpl`` compiles it (once per distinct arguments) and returns the ``JITKernel``.
- eager: the function body is the kernel (tensors annotated in the body, ``T.const``,
  ``T.empty``); calling the ``JITImpl`` compiles per distinct compile-time arguments and
  shapes, launches, and returns the outputs (``jit/eager.py``).

``mode="auto"`` (the default) decides on the first call, as upstream does: a nested
``@T.prim_func`` means lazy; parameters annotated in the body, ``T.const``/``T.empty``
or a ``with T.Kernel`` in the outer body mean eager; otherwise the function is called
once and is lazy when it returns a prim_func.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os

from .. import errors
from .eager import EagerJIT, SourceInfo, _freeze, analyze

logger = logging.getLogger(__name__)

_MODES = ("auto", "lazy", "eager")


def _is_prim_func(value) -> bool:
    from tvm_tirx.tirx.function import Function

    return isinstance(value, Function)


class JITImpl:
    """A ``@tilelang.jit`` function (see the module docstring)."""

    def __init__(self, fn, options: dict, mode: str = "auto", debug_root_path=None):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        self.fn = fn
        self.func = fn  # upstream's attribute name
        self.options = options  # compile options (the autotuner reads them)
        self.mode = mode
        self.debug_root_path = debug_root_path
        self.signature = inspect.signature(fn)
        self._info: SourceInfo | None = None
        self._eager: EagerJIT | None = None
        self._eager_plans: dict | None = None  # the eager form's cached call paths
        self._kernels: dict = {}  # lazy: frozen call -> JITKernel
        self._probe = None  # lazy: (frozen call, prim_func) from the auto-mode probe
        functools.update_wrapper(self, fn)

    # upstream spellings of the compile options
    out_idx = property(lambda self: self.options.get("out_idx"))
    target = property(lambda self: self.options.get("target"))
    execution_backend = property(lambda self: self.options.get("execution_backend"))
    pass_configs = property(lambda self: self.options.get("pass_configs"))
    compile_flags = property(lambda self: self.options.get("compile_flags"))

    @property
    def func_source(self) -> str:
        """The decorated function's source (upstream's attribute)."""
        return inspect.getsource(self.fn)

    @property
    def _kernel_cache(self) -> dict:
        """The kernels compiled so far (upstream's attribute): per call key."""
        return self._eager._kernel_cache if self._eager is not None else self._kernels

    def __repr__(self):
        return f"<tilelang.jit {self.fn.__qualname__} mode={self.mode}>"

    # -- mode ---------------------------------------------------------------
    @property
    def info(self) -> SourceInfo:
        """What the function's source says about its form (read once)."""
        if self._info is None:
            self._info = analyze(self.fn)
        return self._info

    def _resolve_mode(self, args, kwargs) -> str:
        """Fix ``self.mode`` on first use (see the module docstring)."""
        if self.mode == "auto":
            self.mode = self._infer_mode(args, kwargs)
        if self.mode == "eager" and self._eager is None:
            if self.options.get("out_idx") is not None:
                raise ValueError(
                    "out_idx is only supported in lazy mode; an eager kernel declares its "
                    "outputs with T.empty() and returns them"
                )
            options = {k: v for k, v in self.options.items() if k != "out_idx"}
            from . import compile as compile_one

            self._eager = EagerJIT(self.fn, self.info, compile_one, options)
            self._eager_plans = self._eager._plans
        return self.mode

    def _infer_mode(self, args, kwargs) -> str:
        info = self.info
        if info.has_prim_func:
            return "lazy"
        if info.annotated or info.eager_markers:
            return "eager"
        from ..language import eager as _eager

        if _eager.signature_annotations(self.fn):
            return "eager"
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError:
            return "eager"
        try:
            result = self.fn(*args, **kwargs)
        except errors.TraceError:  # T.* used outside a prim_func: the body is the kernel
            return "eager"
        if _is_prim_func(result):
            try:
                self._probe = ((_freeze(args), _freeze(kwargs)), result)
            except TypeError:
                pass
            return "lazy"
        return "eager"

    # -- the two forms -----------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Lazy: the compiled kernel for these arguments. Eager: run it, return the outputs."""
        plans = self._eager_plans
        if plans is not None:  # EagerJIT.__call__, inlined: one Python frame less per call
            plan = plans.get((len(args), tuple(kwargs)) if kwargs else len(args))
            if plan is not None:
                try:
                    return plan(args, kwargs)
                except errors.KernelArgumentError as err:
                    self._eager._explain(args, kwargs, err)
                    raise
            return self._eager._call_slow(args, kwargs)
        if self._resolve_mode(args, kwargs) == "eager":
            return self._eager(*args, **kwargs)
        key = (_freeze(args), _freeze(kwargs))
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = self._compile_lazy(self._lazy_tir(args, kwargs, key))
        return kernel

    def _lazy_tir(self, args, kwargs, key=None):
        probe = self._probe
        if probe is not None and key is not None and probe[0] == key:
            self._probe = None
            return probe[1]
        func = self.fn(*args, **kwargs)
        if not _is_prim_func(func):
            raise TypeError(
                f"{self.fn.__qualname__} returned {type(func).__name__}, not a T.prim_func "
                "(lazy mode: the function must return the @T.prim_func it defines)"
            )
        return func

    def _compile_lazy(self, func):
        from . import compile as compile_one

        kernel = compile_one(func, **self.options)
        self._dump(kernel, func)
        return kernel

    def _dump(self, kernel, func) -> None:
        """Write the kernel source and the traced program under ``debug_root_path``."""
        if not self.debug_root_path:
            return
        os.makedirs(self.debug_root_path, exist_ok=True)
        name = getattr(self.fn, "__name__", "jit_kernel")
        with open(os.path.join(self.debug_root_path, f"tilelang_jit_kernel_{name}.c"), "w") as f:
            f.write(kernel.get_kernel_source())
        with open(os.path.join(self.debug_root_path, f"tilelang_jit_program_{name}.py"), "w") as f:
            f.write(func.script())

    # -- upstream's inspection and ahead-of-time API --------------------------------
    def get_tir(self, *args, **kwargs):
        """The traced TIRx function for these arguments, without compiling it.

        Eager form: tensors (or ``T.Tensor(shape, dtype)`` annotations) for the run-time
        parameters, or the ``T.const`` values as keywords (``get_tir(M=1024, ...)``).
        """
        if self._resolve_mode(args, kwargs) == "eager":
            return self._eager.get_tir(*args, **kwargs)
        return self._lazy_tir(args, kwargs)

    def compile(self, *args, **kwargs):
        """The compiled ``JITKernel`` for these arguments, as :meth:`get_tir` takes them."""
        if self._resolve_mode(args, kwargs) == "eager":
            kernel = self._eager.compile(*args, **kwargs)
            self._dump(kernel, kernel.prim_func)
            return kernel
        try:
            key = (_freeze(args), _freeze(kwargs))
        except TypeError:
            return self._compile_lazy(self._lazy_tir(args, kwargs))
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = self._compile_lazy(self._lazy_tir(args, kwargs, key))
        return kernel

    def as_torch_op(self, *args, name=None, mutates_args="auto", **kwargs):
        """The kernel :meth:`compile` returns for these arguments as a torch custom op
        (``tilelang.torch_op``); ``name`` defaults to the function's name."""
        from .torch_op import torch_op

        return torch_op(
            self.compile(*args, **kwargs),
            name=name or getattr(self.fn, "__name__", None),
            mutates_args=mutates_args,
        )

    def parse_cache_key(self, *args, **kwargs):
        """Upstream's call-cache key of these arguments: ``(args, sorted keyword items,
        sorted tuning parameters)`` (``__tune_params``, a dict, keyed apart)."""
        kwargs = dict(kwargs)
        tune_params = kwargs.pop("__tune_params", {}) or {}
        return (args, tuple(sorted(kwargs.items())), tuple(sorted(tune_params.items())))

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The generated source of the kernel :meth:`compile` returns for these arguments."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def par_compile(self, configs, num_workers=None, ignore_error=False):
        """Compile one kernel per config (a dict of keyword or a tuple of positional
        arguments) on a thread pool; tracing runs first, one config after another.
        Returns the kernels in the order of ``configs`` (None for a failure with
        ``ignore_error``); later calls with the same arguments reuse them."""
        configs = list(configs)
        calls = []
        for cfg in configs:
            if isinstance(cfg, dict):
                calls.append(((), dict(cfg)))
            elif isinstance(cfg, tuple):
                calls.append((cfg, {}))
            else:
                raise ValueError(
                    f"invalid config type {type(cfg).__name__}: expected tuple or dict"
                )
        if not calls:
            return []
        if self._resolve_mode(*calls[0]) == "eager":
            return self._par_compile_eager(calls, num_workers, ignore_error)
        funcs, keys = [], []
        for args, kwargs in calls:
            funcs.append(
                self._traced_or_none(lambda a=args, k=kwargs: self._lazy_tir(a, k), ignore_error)
            )
            keys.append((_freeze(args), _freeze(kwargs)))
        kernels = self._par(funcs, dict(self.options), num_workers, ignore_error)
        for key, kernel in zip(keys, kernels):
            if kernel is not None:
                self._kernels[key] = kernel
        return kernels

    def _par_compile_eager(self, calls, num_workers, ignore_error):
        eager = self._eager
        resolved, funcs, out_idx = [], [], []
        for args, kwargs in calls:

            def trace(a=args, k=kwargs):
                key, compile_args, _, values, _ = eager.resolve(a, k, require_runtime=False)
                func, idx, _ = eager.body.trace(2, compile_args, values)
                return key, func, idx

            traced = self._traced_or_none(trace, ignore_error)
            resolved.append(None if traced is None else traced[0])
            funcs.append(None if traced is None else traced[1])
            out_idx.append(None if traced is None else traced[2])
        # each eager function carries its outputs in the tilelang_out_idx attribute
        kernels = self._par(funcs, dict(eager.options), num_workers, ignore_error)
        for key, kernel in zip(resolved, kernels):
            if kernel is not None:
                eager._kernel_cache.setdefault(key, kernel)
        return kernels

    @staticmethod
    def _traced_or_none(trace, ignore_error):
        try:
            return trace()
        except Exception as err:
            if not ignore_error:
                raise
            logger.warning("par_compile: a config failed to trace: %s", err)
            return None

    @staticmethod
    def _par(funcs, options, num_workers, ignore_error):
        live = [(i, f) for i, f in enumerate(funcs) if f is not None]
        options.setdefault("out_idx", None)
        from .par_compile import par_compile

        built = par_compile(
            [f for _, f in live], num_workers=num_workers, ignore_error=ignore_error, **options
        )
        kernels = [None] * len(funcs)
        for (i, _), kernel in zip(live, built):
            kernels[i] = kernel
        return kernels
