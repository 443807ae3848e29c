"""``tilelang.language.fp8``: the FP8 element type of the current platform (upstream's helpers).

CUDA (and the CPU) use OCP ``float8_e4m3fn`` / ``float8_e5m2``; ROCm GPUs before gfx950 use
the FNUZ variants (``float8_e4m3fnuz`` / ``float8_e5m2fnuz``).
"""

from __future__ import annotations

from .. import dtypes

_FORMATS = ("e4m3", "e5m2")


def _rocm_arch() -> str | None:
    import torch

    if torch.version.hip is None or not torch.cuda.is_available():
        return None
    return str(getattr(torch.cuda.get_device_properties(0), "gcnArchName", ""))


def determine_fp8_type(fp8_format: str = "e4m3") -> dtypes.dtype:
    """The FP8 dtype (``T.float8_*``) for ``fp8_format`` ("e4m3" or "e5m2") on this machine."""
    if fp8_format not in _FORMATS:
        raise ValueError(
            f"determine_fp8_type: fp8_format must be 'e4m3' or 'e5m2', got {fp8_format!r}"
        )
    arch = _rocm_arch()
    fnuz = arch is not None and not arch.startswith("gfx950")
    name = f"float8_{fp8_format}{'fn' if fp8_format == 'e4m3' else ''}{'uz' if fnuz else ''}"
    if fnuz and fp8_format == "e5m2":
        name = "float8_e5m2fnuz"
    return getattr(dtypes, name)


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    """The ``torch.dtype`` of :func:`determine_fp8_type`."""
    import torch

    name = str(determine_fp8_type(fp8_format))
    dtype = getattr(torch, name, None)
    if dtype is None:
        raise RuntimeError(f"this PyTorch has no dtype torch.{name}")
    return dtype
