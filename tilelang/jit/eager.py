"""Calling an eager-form ``@tilelang.jit`` function: bind, specialise, cache, launch.

A call splits the arguments into compile-time ones (parameters without a run-time
annotation: tile sizes, dtypes, flags) and run-time ones (tensors and scalars annotated
in the body or the signature). Per distinct compile-time arguments the body is traced
once up to its first ``T.Kernel`` (phase 1, ``language/eager.py``) to learn each
parameter's annotation; the ``T.const`` values are then read from the arguments' shapes
and strides, and per distinct binding the body is traced whole and compiled (phase 2).

The cached path is one generated function per positional-argument count: it builds a
key from the compile-time arguments and the shapes of the tensors that bind constants,
looks the launcher up in a dict and calls the kernel. Arguments are checked by the
compiled kernel itself; only a first call with new shapes, or a call the kernel refuses,
runs the Python checks below (which name the argument, the constant and the annotation's
source line).
"""

from __future__ import annotations

import ast
import inspect
import numbers
import textwrap
import threading
from dataclasses import dataclass

from tvm_tirx import ir

from .. import errors
from ..language import eager as _eager
from ..language.proxy import TensorAnnotation
from ..utils import pyast

_FAST_TABLE_LIMIT = 4096
_TORCH_DEVICE = {
    "cpu": "cpu",
    "cuda": "cuda",
    "rocm": "cuda",
}  # target kind -> torch device type  # entries of the shape-keyed launcher table before it is reset


# ---------------------------------------------------------------------------
# Static analysis of the decorated function's source
# ---------------------------------------------------------------------------
@dataclass
class SourceInfo:
    """What the decorated function's source says about its form."""

    has_prim_func: bool  # defines a nested @T.prim_func: the factory (lazy) form
    annotated: list  # parameters annotated in the body (``A: T.Tensor(...)``)
    eager_markers: bool  # T.const / T.empty calls or a ``with T.Kernel`` in the outer body


def _outer_nodes(fn_node):
    """Nodes of ``fn_node``'s body, not descending into nested functions, lambdas or classes."""
    stack = list(fn_node.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _is_prim_func_decorator(dec) -> bool:
    if isinstance(dec, ast.Call):
        dec = dec.func
    return (isinstance(dec, ast.Attribute) and dec.attr == "prim_func") or (
        isinstance(dec, ast.Name) and dec.id == "prim_func"
    )


def analyze(fn) -> SourceInfo:
    """Read ``fn``'s source once (a function without source is taken as a factory)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = pyast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return SourceInfo(False, [], False)
    fn_node = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
        None,
    )
    if fn_node is None:
        return SourceInfo(False, [], False)
    has_prim_func = any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_is_prim_func_decorator(d) for d in n.decorator_list)
        for n in ast.walk(fn_node)
        if n is not fn_node
    )
    params = set(inspect.signature(fn).parameters)
    annotated, markers = [], False
    for node in _outer_nodes(fn_node):
        if (
            isinstance(node, ast.AnnAssign)
            and node.value is None
            and isinstance(node.target, ast.Name)
            and node.target.id in params
            and node.target.id not in annotated
        ):
            annotated.append(node.target.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "const" or (
                node.func.attr == "empty" and _is_tilelang_language(node.func.value, fn)
            ):
                markers = True
        elif isinstance(node, ast.With):
            for item in node.items:
                ctx = item.context_expr
                if isinstance(ctx, ast.Call) and isinstance(ctx.func, ast.Attribute):
                    markers |= ctx.func.attr == "Kernel"
    return SourceInfo(has_prim_func, annotated, markers)


def _is_tilelang_language(node, fn) -> bool:
    import tilelang.language as tl_language

    return isinstance(node, ast.Name) and fn.__globals__.get(node.id) is tl_language


# ---------------------------------------------------------------------------
# Argument checks (first call per shapes, or a call the kernel refused)
# ---------------------------------------------------------------------------
def _tensor_like(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _dtype_name(x) -> str:
    text = str(x.dtype)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _strides(x):
    if isinstance(x, TensorAnnotation):
        return x.strides if x.strides is not None else _contiguous(x.shape)
    stride = getattr(x, "stride", None)
    if callable(stride):
        return tuple(stride())
    itemsize = getattr(x, "itemsize", None)
    if itemsize and hasattr(x, "strides"):  # numpy: strides in bytes
        return tuple(s // itemsize for s in x.strides)
    return _contiguous(x.shape)


def _contiguous(shape) -> tuple:
    out, acc = [], 1
    for extent in reversed(tuple(shape)):
        out.append(acc)
        acc *= extent if isinstance(extent, int) else 1
    return tuple(reversed(out))


def _describe(annotation) -> str:
    if isinstance(annotation, TensorAnnotation):
        shape = ", ".join(str(s) for s in annotation.shape)
        shape = f"({shape},)" if len(annotation.shape) == 1 else f"({shape})"
        if annotation.strides is not None:
            strides = ", ".join(str(s) for s in annotation.strides)
            return f"T.StridedTensor({shape}, ({strides}), {annotation.dtype})"
        return f"T.Tensor({shape}, {annotation.dtype})"
    return f"T.{annotation}"


class _Binding:
    """Values of the constants (and dynamic dims) seen so far, with where each came from."""

    def __init__(self, const_names):
        self.const_names = set(const_names)
        self.values: dict = {}  # key -> (value, source text)
        self.problems: list[str] = []

    def check(self, var, got, source: str, label: str, where: str) -> None:
        key = var.name if var.name in self.const_names else ("dyn", var.__chandle__())
        if key in self.values:
            want, first = self.values[key]
            if want != got:
                self.problems.append(
                    f"{label}: {source} is {var.name}={got}{where}, but {first} gives "
                    f"{var.name}={want}"
                )
            return
        self.values[key] = (got, f"{label} {source}")


def check_arguments(template, runtime: dict, const_kwargs: dict, device_kind: str):
    """The constants' values for a call, or KernelArgumentError naming each bad argument."""
    bind = _Binding(template.const_names)
    name = template.func_name
    for key, value in const_kwargs.items():
        if key not in bind.const_names:
            raise TypeError(
                f"{name}() got an unexpected keyword argument {key!r} "
                f"(neither a parameter nor a T.const of {name})"
            )
        if not isinstance(value, int) or isinstance(value, bool):
            bind.problems.append(f"T.const {key}: expected an int, got {value!r}")
        else:
            bind.values[key] = (value, f"keyword {key}={value}")
    for rec in template.params:
        if rec.name not in runtime:
            continue
        _check_one(rec, runtime[rec.name], bind, device_kind)
    values = {}
    for const in template.const_names:
        if const in bind.values:
            values[const] = bind.values[const][0]
        elif not bind.problems:
            bind.problems.append(
                f"cannot bind T.const {const!r}: it is not a dimension of a tensor "
                f"argument given here; pass {const}=<int>"
            )
    if bind.problems:
        raise errors.KernelArgumentError(f"{name}: " + "; ".join(bind.problems))
    return values


def _check_one(rec, value, bind: _Binding, device_kind: str) -> None:
    where = f" ({_describe(rec.annotation)}{' at ' + rec.where if rec.where else ''})"
    label = f"argument {rec.name!r}"
    problems = bind.problems
    if not rec.is_tensor:
        if isinstance(value, numbers.Number):  # numpy scalars look like tensors
            return
        if _tensor_like(value) and not isinstance(value, TensorAnnotation):
            problems.append(f"{label}: expected a scalar {rec.annotation}, got a tensor{where}")
        elif not isinstance(value, numbers.Number | ir.Expr):
            problems.append(
                f"{label}: expected a scalar {rec.annotation}, got {type(value).__name__}"
            )
        return
    ann = rec.annotation
    if not _tensor_like(value) and not isinstance(value, TensorAnnotation):
        problems.append(f"{label}: expected a tensor{where}, got {type(value).__name__}")
        return
    shape = tuple(value.shape)
    if len(shape) != len(ann.shape):
        problems.append(
            f"{label}: expected {len(ann.shape)} dimensions{where}, got shape {list(shape)}"
        )
        return
    got_dtype = value.dtype if isinstance(value, TensorAnnotation) else _dtype_name(value)
    if str(got_dtype) != ann.dtype:
        problems.append(f"{label}: expected dtype {ann.dtype}{where}, got {got_dtype}")
    device = getattr(value, "device", None)
    dev_type = getattr(device, "type", None)
    want = _TORCH_DEVICE.get(device_kind)  # torch names ROCm GPUs 'cuda'
    if dev_type is not None and want is not None and dev_type != want:
        problems.append(f"{label}: expected a {device_kind.upper()} tensor, got one on {device}")
    for d, (want, got) in enumerate(zip(ann.shape, shape)):
        _check_extent(want, got, f"dim {d}", label, where, bind)
    strides = _strides(value)
    if ann.strides is not None:
        for d, (want, got) in enumerate(zip(ann.strides, strides)):
            _check_extent(want, got, f"stride {d}", label, where, bind)
    elif any(e != 1 and st != want for e, st, want in zip(shape, strides, _contiguous(shape))):
        problems.append(
            f"{label}: expected a contiguous tensor{where}, got strides {tuple(strides)} "
            "(annotate it T.StridedTensor(shape, strides, dtype) to accept views)"
        )


def _check_extent(want, got, source, label, where, bind: _Binding) -> None:
    static = want.value if isinstance(want, ir.IntImm) else want
    if isinstance(static, int):
        if static != got:
            bind.problems.append(f"{label}: {source} must be {static}{where}, got {got}")
    elif isinstance(want, ir.Var):
        bind.check(want, got, source, label, where)


# ---------------------------------------------------------------------------
# Templates (phase 1) and the eager dispatcher
# ---------------------------------------------------------------------------
@dataclass
class Template:
    """Phase 1 of one set of compile-time arguments: the parameters' annotations."""

    func_name: str
    params: list  # ParamRecord per run-time parameter, signature order
    const_names: list  # T.const names, declaration order
    shape_params: list  # run-time parameter names whose shape binds a constant
    stride_params: list  # ... whose strides bind a constant


def _template(body, trace) -> Template:
    consts = {v.__chandle__() for v in trace.consts.values()}
    missing = [n for n in body.runtime_names if n not in trace.params]
    if missing:
        raise errors.TraceError(
            f"{body.where}: {body.name}: parameter(s) {', '.join(map(repr, missing))} must be annotated "
            "before the first T.Kernel"
        )
    params = [trace.params[n] for n in body.runtime_names]
    shape_params, stride_params = [], []
    for rec in params:
        if not rec.is_tensor:
            continue
        if any(isinstance(e, ir.Var) and e.__chandle__() in consts for e in rec.annotation.shape):
            shape_params.append(rec.name)
        if any(
            isinstance(e, ir.Var) and e.__chandle__() in consts
            for e in (rec.annotation.strides or ())
        ):
            stride_params.append(rec.name)
    return Template(body.name, params, list(trace.consts), shape_params, stride_params)


def _freeze(value):
    if isinstance(value, dict):
        return (dict, tuple(sorted(((k, _freeze(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list | tuple):
        return (type(value), tuple(_freeze(v) for v in value))
    if isinstance(value, set):
        return (set, tuple(sorted(map(_freeze, value), key=repr)))
    hash(value)  # TypeError for an unhashable compile-time argument
    return value


class EagerJIT:
    """The eager form of one ``@tilelang.jit`` function (see the module docstring)."""

    def __init__(self, fn, info: SourceInfo, compile_fn, options: dict):
        self.fn = fn
        self.name = fn.__name__
        self.signature = inspect.signature(fn)
        self.compile_fn = compile_fn  # tilelang.compile
        self.options = options
        sig_ann = _eager.signature_annotations(fn)
        self.runtime_names = [
            n for n in self.signature.parameters if n in sig_ann or n in info.annotated
        ]
        self.body = _eager.EagerBody(fn, self.runtime_names, sig_ann)
        self._templates: dict = {}
        self._kernel_cache: dict = {}  # (compile-time key, const values) -> JITKernel
        self._plans: dict = {}  # call form (see __call__) -> generated cached path, or None
        self._lock = threading.RLock()  # tracing is not reentrant across threads
        self._device_kind = None
        params = list(self.signature.parameters.values())
        self._simple = all(p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params)

    # -- binding -------------------------------------------------------------
    def bind(self, args, kwargs, require_runtime: bool = True):
        """(compile-time args, run-time args, T.const keywords) of one call."""
        params = self.signature.parameters
        has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
        known = {k: v for k, v in kwargs.items() if has_var_kw or k in params}
        extra = {k: v for k, v in kwargs.items() if k not in known}
        try:
            bound = self.signature.bind_partial(*args, **known)
        except TypeError as err:
            raise TypeError(f"{self.name}(): {err}") from None
        bound.apply_defaults()
        compile_args, runtime = {}, {}
        for name in params:
            if name in self.runtime_names:
                if name in bound.arguments:
                    runtime[name] = bound.arguments[name]
                elif require_runtime:
                    raise TypeError(f"{self.name}() missing a required argument: {name!r}")
            elif name in bound.arguments:
                value = compile_args[name] = bound.arguments[name]
                if _tensor_like(value) and not isinstance(value, numbers.Number | TensorAnnotation):
                    raise TypeError(
                        f"{self.name}(): argument {name!r} is a tensor, but parameter {name!r} "
                        f"is not annotated in the body ({name}: T.Tensor(shape, dtype)), so it "
                        "is a compile-time argument"
                    )
            else:
                raise TypeError(f"{self.name}() missing a required argument: {name!r}")
        return compile_args, runtime, extra

    def template(self, compile_args: dict):
        """Phase 1 for these compile-time arguments (cached)."""
        key = _freeze(compile_args)
        tpl = self._templates.get(key)
        if tpl is None:
            with self._lock:
                tpl = self._templates.get(key)
                if tpl is None:
                    trace = self.body.trace(1, compile_args)
                    tpl = self._templates[key] = _template(self.body, trace)
        return key, tpl

    @property
    def device_kind(self) -> str:
        """The kind of device the kernels run on ("cpu" or "cuda"), from the target."""
        if self._device_kind is None:
            from ..backends.registry import resolve_target

            self._device_kind = resolve_target(self.options.get("target", "auto"))["kind"]
        return self._device_kind

    # -- compiling -------------------------------------------------------------
    def resolve(self, args, kwargs, require_runtime: bool = True):
        """(cache key, compile-time args, run-time args, const values) of a call."""
        compile_args, runtime, extra = self.bind(args, kwargs, require_runtime)
        key1, tpl = self.template(compile_args)
        values = check_arguments(tpl, runtime, extra, self.device_kind)
        key2 = tuple(values[n] for n in tpl.const_names)
        return (key1, key2), compile_args, runtime, values, tpl

    def get_tir(self, *args, **kwargs):
        """The phase-2 TIRx function for these arguments (tensors optional with const keywords)."""
        key, compile_args, _, values, _ = self.resolve(args, kwargs, require_runtime=False)
        kernel = self._kernel_cache.get(key)
        if kernel is not None:
            return kernel.prim_func
        with self._lock:
            return self.body.trace(2, compile_args, values)[0]

    def kernel_for(self, key, compile_args, values):
        """The compiled kernel of one (compile-time args, constants) key (cached)."""
        kernel = self._kernel_cache.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernel_cache.get(key)
                if kernel is None:
                    func, out_idx, _ = self.body.trace(2, compile_args, values)
                    kernel = self.compile_fn(func, out_idx=out_idx or None, **self.options)
                    self._kernel_cache[key] = kernel
        return kernel

    def compile(self, *args, **kwargs):
        """The JITKernel for these arguments: tensors, or ``T.const`` values as keywords."""
        key, compile_args, _, values, _ = self.resolve(args, kwargs, require_runtime=False)
        return self.kernel_for(key, compile_args, values)

    # -- calling ---------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Run the kernel for these arguments (compiling it on first use); return the outputs."""
        plan = self._plans.get((len(args), tuple(kwargs)) if kwargs else len(args))
        if plan is not None:
            try:
                return plan(args, kwargs)
            except errors.KernelArgumentError as err:
                self._explain(args, kwargs, err)
                raise
        return self._call_slow(args, kwargs)

    def _call_slow(self, args, kwargs):
        key, compile_args, runtime, values, tpl = self.resolve(args, kwargs)
        kernel = self.kernel_for(key, compile_args, values)
        launch = _launcher(kernel)
        self._remember(args, kwargs, tpl, launch)
        try:
            return launch(*[runtime[n] for n in self.runtime_names])
        except errors.KernelArgumentError as err:
            self._explain(args, kwargs, err)
            raise

    def _explain(self, args, kwargs, err) -> None:
        """Raise the eager-level explanation of a refused call, if the checks find one."""
        try:
            self.resolve(args, kwargs)
        except errors.KernelArgumentError as better:
            raise better from err
        except TypeError:
            pass

    def _remember(self, args, kwargs, tpl: Template, launch) -> None:
        """Enter a launcher in the shape-keyed table of this call form (building the form's
        cached path on its first call)."""
        form = (len(args), tuple(kwargs)) if kwargs else len(args)
        plan = self._plans.get(form, False)
        if plan is False:
            plan = self._plans[form] = self._make_plan(len(args), tuple(kwargs), tpl)
        if plan is None or plan.tensor_names != _tensor_names(tpl):
            return
        try:
            key = plan.key(args, kwargs)
            hash(key)
        except Exception:  # noqa: BLE001 - unhashable: this call stays on the slow path
            return
        if len(plan.table) >= _FAST_TABLE_LIMIT:
            plan.table.clear()
        plan.table[key] = launch

    def _make_plan(self, n: int, kwnames: tuple, tpl: Template):
        """Generate the cached path of one call form: ``n`` positional arguments and the
        keywords ``kwnames`` (in that order). None when the form needs Python's binding."""
        if not self._simple:
            return None
        params = self.signature.parameters
        positional = [
            nm for nm in params if params[nm].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        if n > len(positional):
            return None
        source = {nm: f"a[{i}]" for i, nm in enumerate(positional[:n])}
        for nm in kwnames:
            if nm in source or (nm not in params and nm not in tpl.const_names):
                return None  # a duplicate or unknown keyword: the slow path raises
            source[nm] = f"kw[{nm!r}]"
        if any(nm not in source for nm in self.runtime_names):
            return None  # a run-time argument given by default: slow path
        parts = [expr for nm, expr in source.items() if nm not in self.runtime_names]
        parts += [f"{source[nm]}.shape" for nm in tpl.shape_params]
        parts += [f"{source[nm]}.stride()" for nm in tpl.stride_params]
        key_src = "(" + "".join(p + ", " for p in parts) + ")"
        call_args = [source[nm] for nm in self.runtime_names]
        call = "*a" if call_args == [f"a[{i}]" for i in range(n)] else ", ".join(call_args)
        code = (
            "def key(a, kw):\n"
            f"    return {key_src}\n"
            "def fast(a, kw):\n"
            "    try:\n"
            f"        launch = table[{key_src}]\n"
            "    except Exception:\n"
            "        return slow(a, kw)\n"
            f"    return launch({call})\n"
        )
        table: dict = {}  # fast key -> launcher
        namespace = {"table": table, "slow": self._call_slow}
        exec(compile(code, f"<tilelang eager call of {self.name}>", "exec"), namespace)  # noqa: S102
        fast = namespace["fast"]
        fast.key = namespace["key"]
        fast.tensor_names = _tensor_names(tpl)
        fast.table = table
        return fast


def _tensor_names(tpl: Template) -> list:
    return tpl.shape_params + [p for p in tpl.stride_params if p not in tpl.shape_params]


def _launcher(kernel):
    """What the cached path calls: the kernel, or a wrapper returning several outputs as a tuple."""
    if len(kernel.out_idx) > 1:
        call = kernel.__call__

        def launch(*args):
            return tuple(call(*args))

        return launch
    return kernel
