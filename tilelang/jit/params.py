"""What a kernel's parameters expect, read once from the traced function.

Used to allocate ``out_idx`` outputs (shapes may depend on symbolic dimensions
bound by the inputs) and to explain a rejected call argument by argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_tirx import ir

from .. import errors

_TORCH_DTYPES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}


def torch_dtype(name: str):
    import torch

    return getattr(torch, _TORCH_DTYPES[name])


@dataclass
class ParamInfo:
    """One parameter: its name, whether it is a tensor, dtype and shape (ints or IR exprs)."""

    name: str
    is_tensor: bool
    dtype: str
    shape: list
    strides: list | None = None

    def torch_dtype(self):
        """The torch dtype of this parameter's elements."""
        return torch_dtype(self.dtype)


def read_params(func) -> list[ParamInfo]:
    """ParamInfo for each parameter of a traced TIRx function."""
    out = []
    for p in func.params:
        ty = p.ty
        if hasattr(ty, "shape"):
            shape = [s.value if isinstance(s, ir.IntImm) else s for s in ty.shape]
            out.append(ParamInfo(p.name, True, str(ty.dtype), shape))
        else:
            out.append(ParamInfo(p.name, False, str(ty), []))
    return out


def _evaluate(expr, bindings: dict):
    """Value of an integer expression given values for its symbolic variables."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, ir.IntImm):
        return expr.value
    import tvm_ffi
    from tvm_tirx import sym

    def repl(v):
        key = v.__chandle__()
        return ir.const(bindings[key], v.ty) if key in bindings else v

    value = sym.Analyzer().simplify(tvm_ffi.structural_map(expr, [(ir.Var, repl)]))
    if not isinstance(value, ir.IntImm):
        raise errors.KernelArgumentError(f"cannot determine the size {expr} from the inputs")
    return value.value


def _size_getter(expr, sources: dict):
    """A function ``inputs -> int`` computing the extent ``expr`` from the inputs' shapes.

    Constants, symbolic dims bound by an input (``sources``: var handle -> (input
    position, dim)) and ``+ - * // % min max`` of those compile to closures; anything
    else falls back to the analyzer (slow, but exact).
    """
    from tvm_tirx.ir import prim as P

    if isinstance(expr, int):
        return lambda inputs: expr
    if isinstance(expr, ir.IntImm):
        value = expr.value
        return lambda inputs: value
    if isinstance(expr, ir.Var) and expr.__chandle__() in sources:
        pos, dim = sources[expr.__chandle__()]
        return lambda inputs: inputs[pos].shape[dim]
    ops = {
        P.Add: lambda a, b: a + b,
        P.Sub: lambda a, b: a - b,
        P.Mul: lambda a, b: a * b,
        P.FloorDiv: lambda a, b: a // b,
        P.FloorMod: lambda a, b: a % b,
        P.Min: min,
        P.Max: max,
    }
    op = ops.get(type(expr))
    if op is not None:
        fa, fb = _size_getter(expr.a, sources), _size_getter(expr.b, sources)
        return lambda inputs: op(fa(inputs), fb(inputs))

    def slow(inputs):
        bindings = {h: inputs[pos].shape[d] for h, (pos, d) in sources.items()}
        return _evaluate(expr, bindings)

    return slow


class OutputAllocator:
    """Allocates the ``out_idx`` tensors of a call, binding symbolic dims from the inputs.

    Everything that does not depend on the call is computed once: by ``__init__`` what
    the parameters say (input positions, where each symbolic dim comes from, whether the
    outputs are the trailing parameters), by :meth:`prepare` (first call; it imports
    torch) the torch dtypes, the static shapes as tuples of ints, a size function per
    symbolic extent and the default device. ``allocate`` then only calls ``torch.empty``.
    """

    def __init__(self, params: list[ParamInfo], out_idx: list[int], device_kind: str = "cpu"):
        self.params = params
        self.out_idx = out_idx
        self.in_idx = [i for i in range(len(params)) if i not in out_idx]
        self.sources = {}  # var handle -> (input position, dim)
        for pos, i in enumerate(self.in_idx):
            for d, extent in enumerate(params[i].shape):
                if isinstance(extent, ir.Var):
                    self.sources.setdefault(extent.__chandle__(), (pos, d))
        self.static = all(all(isinstance(e, int) for e in params[i].shape) for i in out_idx)
        n = len(params)
        self.tail = out_idx == list(range(n - len(out_idx), n))  # outputs are the last params
        # the device of a call: the first tensor input's (no scan over the arguments)
        self.device_pos = next(
            (pos for pos, i in enumerate(self.in_idx) if params[i].is_tensor), None
        )
        self.device_kind = device_kind
        self.ready = False

    def prepare(self) -> None:
        """Compute the torch-side constants (see the class docstring); idempotent."""
        if self.ready:
            return
        import torch

        for i in self.out_idx:
            if not self.params[i].is_tensor:
                raise errors.KernelArgumentError(
                    f"out_idx names parameter {self.params[i].name!r}, which is a scalar"
                )
        self.empty = torch.empty
        self.dtypes = [torch_dtype(self.params[i].dtype) for i in self.out_idx]
        # ROCm builds of torch name their GPUs "cuda" too
        self.default_device = torch.device(
            "cuda" if self.device_kind in ("cuda", "rocm") else "cpu"
        )
        shapes = [self.params[i].shape for i in self.out_idx]
        self.shapes = [tuple(shape) for shape in shapes] if self.static else None
        self.sizes = [[_size_getter(e, self.sources) for e in shape] for shape in shapes]
        self.single = len(self.out_idx) == 1
        if self.static and self.single:
            self.shape0, self.dtype0 = self.shapes[0], self.dtypes[0]
        self.ready = True

    def allocate(self, inputs, device):
        """Fresh output tensors for a call with ``inputs`` on ``device``."""
        if not self.ready:
            self.prepare()
        empty = self.empty
        if self.static:
            return [
                empty(*shape, dtype=dt, device=device)
                for shape, dt in zip(self.shapes, self.dtypes)
            ]
        return [
            empty(*[size(inputs) for size in sizes], dtype=dt, device=device)
            for sizes, dt in zip(self.sizes, self.dtypes)
        ]

    def assemble(self, inputs, outs) -> list:
        """The full argument list: inputs and outputs at their parameter positions."""
        if self.tail:
            return [*inputs, *outs]
        full = [None] * len(self.params)
        for i, x in zip(self.in_idx, inputs):
            full[i] = x
        for i, x in zip(self.out_idx, outs):
            full[i] = x
        return full
