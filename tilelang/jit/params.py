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


class OutputAllocator:
    """Allocates the ``out_idx`` tensors of a call, binding symbolic dims from the inputs."""

    def __init__(self, params: list[ParamInfo], out_idx: list[int]):
        self.params = params
        self.out_idx = out_idx
        self.in_idx = [i for i in range(len(params)) if i not in out_idx]
        self.sources = {}  # var handle -> (input position, dim)
        for pos, i in enumerate(self.in_idx):
            for d, extent in enumerate(params[i].shape):
                if isinstance(extent, ir.Var):
                    self.sources.setdefault(extent.__chandle__(), (pos, d))
        self.static = all(all(isinstance(e, int) for e in params[i].shape) for i in out_idx)
        self.dtypes = {i: torch_dtype(params[i].dtype) for i in out_idx if params[i].is_tensor}

    def allocate(self, inputs, device):
        import torch

        bindings = None
        outs = []
        for i in self.out_idx:
            info = self.params[i]
            if self.static:
                shape = info.shape
            else:
                if bindings is None:
                    bindings = {h: inputs[pos].shape[d] for h, (pos, d) in self.sources.items()}
                shape = [_evaluate(e, bindings) for e in info.shape]
            outs.append(torch.empty(shape, dtype=self.dtypes[i], device=device))
        return outs
