"""Host side of the ROCm backend: load a code object and launch it on torch's HIP stream.

``load_kernel(artifact)`` returns a :class:`HipKernel`. Calling it with torch tensors (a
ROCm build of torch: its ``torch.cuda`` API is HIP) checks each argument against the
kernel's parameters (count, dtype, rank, static dims, device; symbolic dims bound
consistently), evaluates the grid from the bound dims, packs the kernel arguments in
the order of the kernel's HIP signature (tensor data pointers, then ``int`` dims) and calls
``hipModuleLaunchKernel`` on ``torch.cuda.current_stream().cuda_stream`` (the current
``hipStream_t``), with the artifact's dynamic LDS size.

The HIP runtime (``libamdhip64``) is reached through ``ctypes`` (:class:`HipDriver`): the
module is loaded once per device with ``hipModuleLoadData`` and the kernel looked up with
``hipModuleGetFunction``. Tests substitute a fake driver to check the packing and the
launch configuration on machines without an AMD GPU.
"""

from __future__ import annotations

import ast
import ctypes
import os
import re

from ... import errors
from ...utils import pyast

_SIG_RE = re.compile(
    r'extern "C" __global__ void(?: __launch_bounds__\(\d+\))? (\w+)\(([^)]*)\)\s*\{', re.M
)
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
                "int16": 2, "int32": 4, "int64": 8, "bool": 1}  # fmt: skip


class HipRuntimeError(errors.TileLangError, RuntimeError):
    """The HIP runtime is missing or refused a call (the message names the call and code)."""


def kernel_signature(source: str, name: str) -> list[tuple[str, str]]:
    """``[(c_type, param_name), ...]`` of kernel ``name`` as defined in the HIP ``source``."""
    for match in _SIG_RE.finditer(source):
        if match.group(1) != name:
            continue
        params = []
        for item in filter(None, (p.strip() for p in match.group(2).split(","))):
            ctype, pname = item.rsplit(" ", 1)
            params.append((ctype.replace("__restrict__", "").strip(), pname.strip()))
        return params
    raise HipRuntimeError(f"kernel {name!r} is not defined in the HIP source")


_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}  # fmt: skip


def eval_extent(text: str, dims: dict) -> int:
    """Value of a launch extent (``"(n + 127) // 128"``) with the symbolic dims in ``dims``."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise HipRuntimeError(f"launch extent {text!r}: dimension {node.id!r} is unbound")
            return int(dims[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("min", "max") and len(node.args) == 2:
                args = [ev(a) for a in node.args]
                return min(args) if node.func.id == "min" else max(args)
        raise HipRuntimeError(f"launch extent {text!r}: cannot evaluate {ast.dump(node)}")

    return int(ev(pyast.parse(text, mode="eval")))


def _library_candidates():
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    yield os.path.join(rocm, "lib", "libamdhip64.so")
    yield from ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")


class HipDriver:
    """The few HIP runtime calls the launcher needs, through ctypes."""

    def __init__(self, path: str | None = None):
        last = None
        for candidate in [path] if path else _library_candidates():
            try:
                self.lib = ctypes.CDLL(candidate)
                break
            except OSError as err:
                last = err
        else:
            raise HipRuntimeError(f"the HIP runtime (libamdhip64.so) is not available: {last}")
        self.lib.hipGetErrorString.restype = ctypes.c_char_p

    def check(self, code: int, call: str) -> None:
        """Raise HipRuntimeError when ``code`` is not hipSuccess."""
        if code != 0:
            text = self.lib.hipGetErrorString(code)
            raise HipRuntimeError(f"{call} failed: {text.decode() if text else ''} (code {code})")

    def set_device(self, index: int) -> None:
        """``hipSetDevice(index)``."""
        self.check(self.lib.hipSetDevice(ctypes.c_int(index)), "hipSetDevice")

    def load_module(self, image: bytes):
        """``hipModuleLoadData``: a module handle for a code object."""
        module = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image))
        self.check(self.lib.hipModuleLoadData(ctypes.byref(module), buf), "hipModuleLoadData")
        return module

    def get_function(self, module, name: str):
        """``hipModuleGetFunction``: the kernel handle of ``name``."""
        fn = ctypes.c_void_p()
        code = self.lib.hipModuleGetFunction(ctypes.byref(fn), module, name.encode())
        self.check(code, f"hipModuleGetFunction({name!r})")
        return fn

    def launch(self, fn, grid, block, shared: int, stream: int, args) -> None:
        """``hipModuleLaunchKernel`` with ``args`` (ctypes values) as kernel parameters."""
        ptrs = (ctypes.c_void_p * len(args))(
            *[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args]
        )
        code = self.lib.hipModuleLaunchKernel(
            fn, *[ctypes.c_uint(x) for x in grid], *[ctypes.c_uint(x) for x in block],
            ctypes.c_uint(shared), ctypes.c_void_p(stream), ptrs, None,
        )  # fmt: skip
        self.check(code, "hipModuleLaunchKernel")


class HipKernel:
    """A loaded ROCm kernel: ``kernel(*tensors)`` launches it on torch's current HIP stream."""

    def __init__(self, artifact, driver=None, device_type: str = "cuda"):
        if artifact.code_object is None:
            raise HipRuntimeError(
                "this ROCm artifact holds no code object (hipcc was not found when it was "
                "built); rebuild it where hipcc is installed"
            )
        self.artifact, self.meta = artifact, artifact.meta
        if len(self.meta.get("kernel_names", [])) != 1:
            raise HipRuntimeError(
                f"the ROCm launcher runs programs of one T.Kernel block; this one has "
                f"{len(self.meta.get('kernel_names', []))} ({self.meta.get('kernel_names')})"
            )
        self.name = self.meta["entry_name"]
        self.signature = kernel_signature(artifact.kernel_source, self.name)
        self.params = self.meta["params"]
        self._driver = driver
        self.device_type = device_type  # what torch calls a ROCm GPU ("cuda"); tests use "cpu"
        self._functions: dict[int, object] = {}

    @property
    def driver(self):
        """The :class:`HipDriver` (opened on first use)."""
        if self._driver is None:
            self._driver = HipDriver()
        return self._driver

    def bind(self, args) -> tuple[dict, dict]:
        """Check ``args`` against the parameters; returns (tensors by name, dims by name)."""
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: expected {len(self.params)} arguments, got {len(args)}")
        tensors, dims = {}, {}
        for param, arg in zip(self.params, args):
            name, shape = param["name"], param["shape"]
            got = str(getattr(arg, "dtype", type(arg).__name__)).replace("torch.", "")
            if got != param["dtype"]:
                raise TypeError(f"{self.name}: argument {name} must be {param['dtype']}, got {got}")
            if shape is None:
                continue
            if len(arg.shape) != len(shape):
                raise ValueError(
                    f"{self.name}: argument {name} must have rank {len(shape)}, got {len(arg.shape)}"
                )
            for axis, (want, have) in enumerate(zip(shape, arg.shape)):
                if want.isdigit():
                    if int(want) != int(have):
                        raise ValueError(
                            f"{self.name}: {name}.shape[{axis}] must be {want}, got {have}"
                        )
                elif dims.setdefault(want, int(have)) != int(have):
                    raise ValueError(
                        f"{self.name}: {name}.shape[{axis}] = {have} but {want} = {dims[want]}"
                    )
            device = getattr(getattr(arg, "device", None), "type", None)
            if device != self.device_type:
                raise ValueError(
                    f"{self.name}: argument {name} must be on the GPU, got one on {device}"
                )
            if hasattr(arg, "is_contiguous") and not arg.is_contiguous():
                raise ValueError(f"{self.name}: argument {name} must be contiguous")
            tensors[name] = arg
        return tensors, dims

    def pack(self, tensors: dict, dims: dict) -> list:
        """ctypes values of the kernel parameters, in the HIP signature's order."""
        values = []
        for ctype, pname in self.signature:
            if ctype.endswith("*"):
                base = pname[:-4] if pname.endswith("_ptr") else pname
                if base not in tensors:
                    raise HipRuntimeError(f"kernel parameter {pname} matches no tensor argument")
                values.append(ctypes.c_void_p(int(tensors[base].data_ptr())))
            elif pname in dims:
                values.append(
                    ctypes.c_int64(dims[pname]) if "int64" in ctype else ctypes.c_int(dims[pname])
                )
            else:
                raise HipRuntimeError(
                    f"kernel parameter {ctype} {pname} is neither a tensor nor a dim"
                )
        return values

    def launch_config(self, dims: dict) -> tuple[tuple, tuple, int]:
        """(grid, block, dynamic LDS bytes) for the bound dims."""
        launch = self.meta["launch"]

        def extent(tag):
            return eval_extent(launch[tag], dims) if tag in launch else 1

        grid = tuple(extent(f"blockIdx.{a}") for a in "xyz")
        block = tuple(extent(f"threadIdx.{a}") for a in "xyz")
        return grid, block, int(self.meta.get("dynamic_shared_bytes", 0))

    def _function(self, device: int):
        if device not in self._functions:
            self.driver.set_device(device)
            module = self.driver.load_module(self.artifact.code_object)
            self._functions[device] = self.driver.get_function(module, self.name)
        return self._functions[device]

    def __call__(self, *args):
        tensors, dims = self.bind(args)
        values = self.pack(tensors, dims)
        grid, block, shared = self.launch_config(dims)
        if 0 in grid:
            return None
        import torch

        first = next(iter(tensors.values()), None)
        device = first.device.index if first is not None and first.device.index is not None else 0
        stream = torch.cuda.current_stream(device).cuda_stream
        self.driver.launch(self._function(device), grid, block, shared, stream, values)
        return None


def load_kernel(artifact, driver=None, device_type: str = "cuda") -> HipKernel:
    """A :class:`HipKernel` for a :class:`~.build.HipArtifact`."""
    return HipKernel(artifact, driver, device_type)
