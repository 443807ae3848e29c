"""Device models for tuning (upstream's ``tilelang.carver.arch``).

``CUDA(target)`` reads the GPU's limits (SM count, shared memory, registers, L2); ``CPU``
describes the host; :func:`get_arch` / :func:`auto_infer_current_arch` pick one. ``driver``
answers single property queries. Without a GPU, ``CUDA(...)`` and the ``driver`` queries raise
RuntimeError, as upstream; ROCm / Metal devices are not modelled (tilelang has no backend).
"""

from __future__ import annotations

import re

from ...utils.target import determine_target  # noqa: F401
from . import driver  # noqa: F401

__all__ = [
    "CDNA",
    "CPU",
    "CUDA",
    "METAL",
    "RDNA",
    "determine_target",
    "is_cdna_arch",
    "is_metal_arch",
    "is_rdna_arch",
    "TileDevice",
    "auto_infer_current_arch",
    "check_sm_version",
    "driver",
    "get_arch",
    "has_mma_support",
    "is_ada_arch",
    "is_ampere_arch",
    "is_cpu_arch",
    "is_cuda_arch",
    "is_hopper_arch",
    "is_tensorcore_supported_precision",
    "is_volta_arch",
]


class TileDevice:
    """A device's limits as the tuner sees them (fields default to 0 / "unknown")."""

    def __init__(self) -> None:
        self.reg_cap = 0
        self.smem_cap = 0
        self.compute_max_core = 0
        self.warp_size = 0
        self.sm_partition = 0
        self.transaction_size = [0, 0]
        self.max_smem_usage = 0
        self.bandwidth = [0, 0]
        self.platform = "unknown"
        self.compute_capability = "unknown"
        self.l2_cache_size_bytes = 0

    def get_avaliable_tensorintrin_shapes(self):  # upstream's spelling
        """The (M, N) shapes of the device's tensor-core instructions."""
        raise NotImplementedError(f"{type(self).__name__} has no tensor-core instructions")


def check_sm_version(arch: str) -> int:
    """``"sm_90a"`` -> 90, ``"sm_80"`` -> 80; -1 for anything that is not an SM arch."""
    match = re.fullmatch(r"(?:sm_)?(\d+)[a-zA-Z]*", str(arch))
    return int(match.group(1)) if match else -1


def _resolve(target) -> dict:
    from ...backends.registry import resolve_target

    return resolve_target(target)


class CUDA(TileDevice):
    """The GPU behind a CUDA target (``CUDA("cuda")``, ``CUDA({"kind": "cuda", "arch": ...})``)."""

    def __init__(self, target="cuda"):
        super().__init__()
        self.target = _resolve(target)
        if self.target["kind"] != "cuda":
            raise ValueError(f"CUDA: target must be a CUDA target, got {target!r}")
        self.sm_version = check_sm_version(self.target["arch"])
        prop = driver.get_cuda_device_properties(0)
        if prop is None:
            raise RuntimeError("Cannot find cuda device 0 (torch sees no GPU)")
        self.name = prop.name
        self.platform = "CUDA"
        self.smem_cap = int(prop.shared_memory_per_block)
        self.compute_max_core = int(prop.multi_processor_count)
        self.warp_size = int(getattr(prop, "warp_size", 32))
        self.compute_capability = f"{prop.major}{prop.minor}"
        self.reg_cap = 65536
        self.max_smem_usage = 2 * self.smem_cap
        self.sm_partition = 4
        self.l2_cache_size_bytes = int(getattr(prop, "L2_cache_size", 0))
        self.transaction_size = [32, 128]
        self.bandwidth = [750, 12080]
        self.available_tensor_instructions = None

    def get_avaliable_tensorintrin_shapes(self):
        """``[[16, 16], [16, 16]]``: the mma and wmma (M, N) shapes, as upstream."""
        self.available_tensor_instructions = (("mma", [16, 16]), ("wmma", [16, 16]))
        return [shape for _, shape in self.available_tensor_instructions]

    def __repr__(self) -> str:
        return f"CUDA({self.target})"


class CPU(TileDevice):
    """The host CPU (the tuner needs nothing more than its presence)."""

    def __init__(self, target="cpu"):
        super().__init__()
        self.target = _resolve(target)
        self.platform = "CPU"

    def __repr__(self) -> str:
        return f"CPU({self.target})"


class _Unsupported(TileDevice):
    """A device tilelang cannot compile for: constructing one raises RuntimeError."""

    backend = "?"

    def __init__(self, target=None):
        raise RuntimeError(
            f"{type(self).__name__}({target!r}): tilelang has no {self.backend} backend "
            "(it compiles for CUDA and the CPU); use CUDA(...) or CPU(...)"
        )


class CDNA(_Unsupported):
    """AMD CDNA GPUs (not supported here)."""

    backend = "ROCm"


class RDNA(_Unsupported):
    """AMD RDNA GPUs (not supported here)."""

    backend = "ROCm"


class METAL(_Unsupported):
    """Apple GPUs (not supported here)."""

    backend = "Metal"


def is_cdna_arch(arch) -> bool:
    """Always False: no CDNA device can be constructed here."""
    return isinstance(arch, CDNA)


def is_rdna_arch(arch) -> bool:
    """Always False: no RDNA device can be constructed here."""
    return isinstance(arch, RDNA)


def is_metal_arch(arch) -> bool:
    """Always False: no Metal device can be constructed here."""
    return isinstance(arch, METAL)


def get_arch(target="cuda") -> TileDevice:
    """The device model for a target: ``CUDA`` for CUDA targets, ``CPU`` for llvm / cpu."""
    spec = _resolve(target)
    return CUDA(spec) if spec["kind"] == "cuda" else CPU(spec)


def auto_infer_current_arch() -> TileDevice:
    """``CUDA`` when torch sees a GPU, else ``CPU``."""
    import torch

    return get_arch("cuda" if torch.cuda.is_available() else "cpu")


def is_cpu_arch(arch) -> bool:
    """Whether ``arch`` is a :class:`CPU`."""
    return isinstance(arch, CPU)


def is_cuda_arch(arch) -> bool:
    """Whether ``arch`` is a :class:`CUDA` device."""
    return isinstance(arch, CUDA)


def is_volta_arch(arch) -> bool:
    """sm_70 .. sm_7x."""
    return is_cuda_arch(arch) and 70 <= arch.sm_version < 80


def is_ampere_arch(arch) -> bool:
    """sm_80 .. sm_88."""
    return is_cuda_arch(arch) and 80 <= arch.sm_version < 89


def is_ada_arch(arch) -> bool:
    """sm_89."""
    return is_cuda_arch(arch) and arch.sm_version == 89


def is_hopper_arch(arch) -> bool:
    """sm_90."""
    return is_cuda_arch(arch) and arch.sm_version == 90


def has_mma_support(arch) -> bool:
    """mma.sync tensor cores (sm_80 and later)."""
    return is_cuda_arch(arch) and arch.sm_version >= 80


_VOLTA = {("float16", "float32"), ("float16", "float16")}
_AMPERE = _VOLTA | {
    ("bfloat16", "float32"),
    ("int8", "int32"),
    ("int4", "int32"),
    ("int2", "int32"),
    ("int1", "int32"),
}
_ADA = _VOLTA | {
    ("bfloat16", "float32"),
    ("int8", "int32"),
    ("float8_e5m2", "float32"),
    ("float8_e4m3", "float32"),
}


def is_tensorcore_supported_precision(in_dtype: str, accum_dtype: str, arch) -> bool:
    """Whether ``arch``'s tensor cores take ``in_dtype`` inputs into ``accum_dtype``."""
    pair = (str(in_dtype), str(accum_dtype))
    if is_volta_arch(arch):
        return pair in _VOLTA
    if is_ampere_arch(arch):
        return pair in _AMPERE
    if is_ada_arch(arch) or is_hopper_arch(arch):
        return pair in _ADA
    raise ValueError(f"Unsupported architecture: {arch!r}")
