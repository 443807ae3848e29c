"""A compiled kernel as a ``torch.library`` custom op, so ``torch.compile`` can trace it.

``torch_op(kernel)`` (also ``kernel.as_torch_op()``) registers the kernel under the
``tilelang`` namespace:

- the schema lists the kernel's inputs (every parameter not in ``out_idx``) in order;
  tensors the kernel writes are declared mutated (``Tensor(a!)``), found by reading the
  traced IR (stores, and the destination operand of copy / fill / reduce / cumsum / atomic /
  gemm) unless ``mutates_args`` names them;
- the op returns the ``out_idx`` outputs, allocated by the kernel (one tensor, a tuple, or
  nothing);
- its fake (meta) implementation allocates empty outputs of the kernel's output dtypes, with
  symbolic dimensions bound from the inputs' shapes as ``JITKernel`` does it
  (``params.OutputAllocator``), so ``torch.compile(fullgraph=True)`` traces through it.

Ops are defined with ``torch.library.Library`` (see ``_register``). An op's name is
``<name>_<16 hex digits>``: the digits hash the kernel's IR, out_idx, target, options and
mutated arguments, so one kernel always gets the same name (across processes too) and
registering it again returns the op already registered.
"""

from __future__ import annotations

import hashlib
import re
import threading

import tvm_ffi
from tvm_tirx import ir

from .. import errors

NAMESPACE = "tilelang"

_REGISTRY: dict = {}  # op name -> TorchOp
_LOCK = threading.Lock()

# tile ops and the operand each writes
_WRITTEN_OPERAND = {
    "tl.copy": "dst",
    "tl.fill": "dst",
    "tl.reduce": "dst",
    "tl.cumsum": "dst",
    "tl.atomic": "dst",
    "tl.gemm": "C",
}

# calls that take a tensor without writing it (declaring a view, reading its pointer)
_NOT_WRITING = {"tirx.decl_tensor", "tirx.tensor_data_ptr"}


def _tensor_of(value):
    """The tensor variable an operand (region, element, tensor) refers to, or None."""
    if isinstance(value, ir.TensorRegion | ir.TensorLoad):
        return value.source
    if isinstance(value, ir.Var) and hasattr(value.ty, "shape"):
        return value
    return None


def _views(func) -> dict:
    """Tensor views (``T.view`` / ``T.reshape`` / ``T.Tensor(..., data=X.data)``): the handle of
    each view variable -> the handle of the tensor whose memory it declares."""
    views: dict = {}

    def visit(node):
        if not (isinstance(node, ir.Bind) and isinstance(node.value, ir.Call)):
            return
        call = node.value
        if not (isinstance(call.op, ir.Op) and call.op.name == "tirx.decl_tensor"):
            return

        def find(sub):
            if isinstance(sub, ir.Var) and hasattr(sub.ty, "shape"):
                views.setdefault(node.var.__chandle__(), sub.__chandle__())

        tvm_ffi.structural_walk(call, find)

    tvm_ffi.structural_walk(func.body, visit)
    return views


def written_params(func) -> list[str]:
    """Names of the tensor parameters the traced kernel ``func`` writes.

    Counted as writes: ``TensorStore`` into a parameter, a parameter as the written operand
    of a tile op, and a parameter (or its address) passed to any other call (an extern
    function may write through it); a write into a view of a parameter (``T.view``,
    ``T.reshape``) counts for the parameter.
    """
    from ..ops.registry import OPS

    handles = {p.__chandle__(): p.name for p in func.params if hasattr(p.ty, "shape")}
    views = _views(func)
    hit: set = set()

    def mark(value):
        tensor = _tensor_of(value)
        if tensor is None:
            return
        handle, seen = tensor.__chandle__(), set()
        while handle in views and handle not in seen:  # a view of a view of ... a parameter
            seen.add(handle)
            handle = views[handle]
        if handle in handles:
            hit.add(handles[handle])

    def visit(node):
        if isinstance(node, ir.TensorStore):
            mark(node.dest)
        elif isinstance(node, ir.Call) and isinstance(node.op, ir.Op):
            name = node.op.name
            if name in _WRITTEN_OPERAND and name in OPS:
                operands = OPS[name].operands
                mark(node.args[operands.index(_WRITTEN_OPERAND[name])])
            elif name not in OPS and name not in _NOT_WRITING:
                for arg in node.args:
                    if isinstance(arg, ir.Var) or (
                        isinstance(arg, ir.Call)
                        and isinstance(arg.op, ir.Op)
                        and "address_of" in arg.op.name
                    ):
                        mark(arg if isinstance(arg, ir.Var) else arg.args[0])

    tvm_ffi.structural_walk(func.body, visit)
    return [p.name for p in func.params if p.name in hit]


def _schema_type(dtype: str, arg: str) -> str:
    if dtype == "bool":
        return "bool"
    if dtype.startswith(("int", "uint")):
        return "int"
    if dtype.startswith(("float", "bfloat")):
        return "float"
    raise errors.KernelArgumentError(
        f"parameter {arg!r} of dtype {dtype} cannot be passed through a torch op"
    )


def _ident(text: str) -> str:
    """``text`` made a valid op-name prefix (letters, digits, underscores)."""
    text = re.sub(r"\W", "_", str(text)).strip("_") or "kernel"
    return "k_" + text if text[0].isdigit() else text


class TorchOp:
    """A kernel registered as ``torch.ops.tilelang.<name>``; call it like the kernel.

    Attributes: ``name`` (without namespace), ``qualname`` (``tilelang::<name>``),
    ``overload`` (``torch.ops.tilelang.<name>.default``, also ``op``), ``mutated`` (names of
    the inputs declared mutated), ``schema``.
    """

    def __init__(self, name, schema, mutated, n_outputs):
        import torch

        self.name = name
        self.qualname = f"{NAMESPACE}::{name}"
        self.schema = schema
        self.mutated = mutated
        self.n_outputs = n_outputs
        self.overload = self.op = getattr(getattr(torch.ops, NAMESPACE), name).default

    def __call__(self, *args):
        """Run the op (traceable by ``torch.compile``): the kernel's outputs, or None."""
        return self.overload(*args)

    def __repr__(self):
        return f"<tilelang torch op {self.qualname}: {self.schema}>"


def _fingerprint(kernel, mutated) -> str:
    parts = [
        str(tvm_ffi.structural_hash(kernel.prim_func)),
        repr(kernel.out_idx),
        repr(
            sorted(kernel.target.items(), key=str)
            if isinstance(kernel.target, dict)
            else kernel.target
        ),
        repr(sorted(kernel.pass_configs.items(), key=str)),
        repr(kernel.compile_flags),
        repr(sorted(mutated)),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _resolve_mutated(kernel, mutates_args, inputs) -> list[str]:
    tensor_inputs = [p.name for p in inputs if p.is_tensor]
    if mutates_args is None or mutates_args == "auto":
        written = set(written_params(kernel.prim_func))
        return [n for n in tensor_inputs if n in written]
    if isinstance(mutates_args, str):
        raise errors.KernelArgumentError(
            f"mutates_args must be 'auto' or a list of parameter names, got {mutates_args!r}"
        )
    names = list(mutates_args)
    for n in names:
        if n not in tensor_inputs:
            raise errors.KernelArgumentError(
                f"mutates_args names {n!r}, which is not a tensor input of the kernel "
                f"(tensor inputs: {', '.join(tensor_inputs) or 'none'})"
            )
    return [n for n in tensor_inputs if n in names]


def _make_schema(inputs, mutated, n_outputs) -> str:
    args = []
    for k, p in enumerate(inputs):
        if p.is_tensor:
            ty = f"Tensor(a{k}!)" if p.name in mutated else "Tensor"
        else:
            ty = _schema_type(p.dtype, p.name)
        args.append(f"{ty} {_ident(p.name)}")
    ret = (
        "()"
        if n_outputs == 0
        else "Tensor"
        if n_outputs == 1
        else f"({', '.join(['Tensor'] * n_outputs)})"
    )
    return f"({', '.join(args)}) -> {ret}"


def _make_impl(kernel, inputs, mutated):
    """The op's real implementation: contiguous inputs, the kernel call, outputs as a tuple."""
    mutated_pos = {k for k, p in enumerate(inputs) if p.name in mutated}
    tensor_pos = [k for k, p in enumerate(inputs) if p.is_tensor]
    n_out = len(kernel.out_idx)

    def dense_call(args):
        args = list(args)
        write_back = []
        for k in tensor_pos:
            a = args[k]
            if not a.is_contiguous():
                args[k] = a.contiguous()
                if k in mutated_pos:
                    write_back.append((a, args[k]))
        result = kernel(*args)
        for original, dense in write_back:
            original.copy_(dense)
        return result

    def impl(*args):
        for k in tensor_pos:
            if not args[k].is_contiguous():
                result = dense_call(args)
                break
        else:
            result = kernel(*args)
        if n_out > 1:
            return tuple(result)
        return result

    return impl


def _make_fake(kernel, inputs):
    """The op's fake implementation: outputs of the right shapes and dtypes, checked inputs."""
    from .params import torch_dtype

    out = kernel._outputs
    n_out = len(kernel.out_idx)
    dtypes = [torch_dtype(kernel.params[i].dtype) for i in kernel.out_idx]

    def fake(*args):
        import torch

        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        for p, a in zip(inputs, args):
            if not p.is_tensor:
                continue
            if not isinstance(a, torch.Tensor):
                raise errors.KernelArgumentError(
                    f"argument {p.name!r}: expected a tensor, got {a!r}"
                )
            if a.dim() != len(p.shape):
                raise errors.KernelArgumentError(
                    f"argument {p.name!r}: expected {len(p.shape)} dimensions, got shape {tuple(a.shape)}"
                )
            if a.dtype != torch_dtype(p.dtype):
                raise errors.KernelArgumentError(
                    f"argument {p.name!r}: expected dtype {p.dtype}, got {a.dtype}"
                )
            for d, (want, got) in enumerate(zip(p.shape, a.shape)):
                if isinstance(want, int) and got != want:
                    raise errors.KernelArgumentError(
                        f"argument {p.name!r}: dimension {d} must be {want}, got {got}"
                    )
        outs = []
        sizes_of = _sizes(out)
        if device is None:  # no tensor input: where the kernel's target runs
            device = out.default_device
        for sizes, dt in zip(sizes_of, dtypes):
            outs.append(torch.empty([size(args) for size in sizes], dtype=dt, device=device))
        if n_out == 0:
            return None
        return outs[0] if n_out == 1 else tuple(outs)

    return fake


def _sizes(out):
    """Per output, a size function per dimension (``OutputAllocator.sizes``)."""
    if not out.ready:
        out.prepare()
    return out.sizes


_LIBRARY = None  # the torch.library.Library fragment every op is defined in


def _register(op_name, schema, kernel, inputs, mutated) -> None:
    """Define ``tilelang::<op_name>`` with the kernel as its implementation on every backend.

    The low-level ``torch.library.Library`` API, not ``custom_op``: a call then costs the
    dispatcher and two Python hops (11-16 us on a loaded 2-core CPU, against 21-35 us through
    ``custom_op``'s Python autograd and aliasing wrappers). The ``Autograd`` kernel (``_make_autograd``)
    gives outputs computed from inputs that require grad a backward that raises
    (``tilelang.autograd_function`` supplies real ones); an op with mutated inputs gets an
    ``ADInplaceOrView`` kernel that bumps their version counters.
    """
    import torch

    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
    lib = _LIBRARY
    lib.define(op_name + schema)
    lib.impl(op_name, _make_impl(kernel, inputs, mutated), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{op_name}", _make_fake(kernel, inputs), lib=lib)
    overload = getattr(getattr(torch.ops, NAMESPACE), op_name).default
    mutated_pos = [k for k, p in enumerate(inputs) if p.name in mutated]
    lib.impl(op_name, _make_autograd(overload, mutated_pos), "Autograd")
    if not mutated_pos:
        return
    below = torch._C._AutoDispatchBelowADInplaceOrView
    bump = torch.autograd.graph.increment_version

    def inplace_or_view(*args):
        with below():
            result = overload(*args)
        bump([args[k] for k in mutated_pos])
        return result

    lib.impl(op_name, inplace_or_view, "ADInplaceOrView")


def _make_autograd(overload, mutated_pos):
    """The op's ``Autograd`` kernel: straight to the implementation when no gradient is wanted
    (bumping the mutated inputs' versions itself, skipping the ``ADInplaceOrView`` hop); else
    outputs whose backward raises a clear error (the op has no derivative of its own)."""
    import torch

    below = torch._C._AutoDispatchBelowAutograd
    below_view = torch._C._AutoDispatchBelowADInplaceOrView
    bump = torch.autograd.graph.increment_version
    grad_enabled = torch.is_grad_enabled
    tensor = torch.Tensor

    class NoDerivative(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            with below():
                return overload(*args)

        @staticmethod
        def backward(ctx, *grads):
            raise errors.KernelArgumentError(
                f"{overload._schema.name} has no derivative: wrap the kernel and its backward "
                f"kernel with tilelang.autograd_function(forward=..., backward=...)"
            )

    def autograd_kernel(*args):
        if grad_enabled():
            for a in args:
                if isinstance(a, tensor) and a.requires_grad:
                    return NoDerivative.apply(*args)
        if not mutated_pos:
            with below():
                return overload(*args)
        with below_view():
            result = overload(*args)
        bump([args[k] for k in mutated_pos])
        return result

    return autograd_kernel


def torch_op(kernel, name: str | None = None, mutates_args="auto") -> TorchOp:
    """Register ``kernel`` (a ``JITKernel``) as the torch custom op ``tilelang::<name>_<hash>``.

    ``name``: the op name's prefix (default: the kernel's function name); ``mutates_args``:
    ``"auto"`` (the tensor inputs the kernel writes, read from its IR) or a list of input
    parameter names. Registering the same kernel again returns the same ``TorchOp``.
    """
    import torch

    from .kernel import JITKernel

    if not isinstance(kernel, JITKernel):
        raise errors.KernelArgumentError(
            f"torch_op: argument 'kernel' must be a JITKernel (from tilelang.compile or a "
            f"@tilelang.jit factory called with its arguments), got {type(kernel).__name__}"
        )
    if name is not None and (not isinstance(name, str) or not name):
        raise errors.KernelArgumentError(
            f"torch_op: argument 'name' must be a non-empty string, got {name!r}"
        )
    for i in kernel.out_idx:
        if not kernel.params[i].is_tensor:
            raise errors.KernelArgumentError(
                f"out_idx names parameter {kernel.params[i].name!r}, which is a scalar"
            )
    inputs = [kernel.params[i] for i in kernel._outputs.in_idx]
    mutated = _resolve_mutated(kernel, mutates_args, inputs)
    op_name = f"{_ident(name or kernel._name)}_{_fingerprint(kernel, mutated)}"
    with _LOCK:
        hit = _REGISTRY.get(op_name)
        if hit is not None:
            return hit
        n_out = len(kernel.out_idx)
        schema = _make_schema(inputs, mutated, n_out)
        if hasattr(getattr(torch.ops, NAMESPACE), op_name):
            raise errors.KernelArgumentError(
                f"torch_op: an op named {NAMESPACE}::{op_name} exists already and was not "
                f"registered by tilelang.jit.torch_op; pass another 'name'"
            )
        _register(op_name, schema, kernel, inputs, mutated)
        result = TorchOp(op_name, schema, mutated, n_out)
        _REGISTRY[op_name] = result
        return result
