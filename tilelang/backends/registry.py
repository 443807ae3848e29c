"""Targets and the backends that compile for them.

A backend is an object with ``name``, ``build(func, *, target, pass_configs,
compile_flags) -> Artifact`` and ``load(artifact) -> callable``. Each backend
folder registers itself here; ``resolve_target`` turns what users write
(``"auto"``, ``"cuda"``, ``"cuda -arch=sm_90a"``, ``"llvm"``, ``"cpu"``, a dict)
into a normalised target dict whose ``kind`` names the backend.
"""

from __future__ import annotations

import importlib

from .. import errors

_BACKENDS: dict[str, object] = {}
_MODULES = {
    "cpu": "tilelang.backends.cpu",
    "cuda": "tilelang.backends.cuda",
    "rocm": "tilelang.backends.rocm",
    "metal": "tilelang.backends.metal",
}
#: user spellings of target kinds (upstream's: "hip" and "rocm" name the same backend)
_ALIASES = {
    "llvm": "cpu",
    "c": "cpu",
    "host": "cpu",
    "nvidia": "cuda",
    "hip": "rocm",
    "amd": "rocm",
}
_DEFAULT_ARCH = {"cuda": "sm_90a", "rocm": "gfx90a", "metal": "apple7"}


def register_backend(name: str, backend) -> None:
    """Make ``backend`` the compiler for targets of kind ``name``."""
    _BACKENDS[name] = backend


def get_backend(kind: str):
    """The backend for a target kind (importing its folder on first use)."""
    if kind not in _BACKENDS and kind in _MODULES:
        importlib.import_module(_MODULES[kind])
    if kind not in _BACKENDS:
        raise errors.CompileError(
            f"no backend for target kind {kind!r} (known: {sorted(_MODULES)})"
        )
    return _BACKENDS[kind]


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch or no driver: no GPU
        return False


def _rocm_torch() -> bool:
    """Whether torch is a ROCm build with a visible GPU (``torch.version.hip``)."""
    try:
        import torch

        return bool(getattr(torch.version, "hip", None)) and torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch or no driver: no GPU
        return False


def _rocm_arch() -> str:
    import torch

    name = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or ""
    return name.split(":")[0] or _DEFAULT_ARCH["rocm"]


def _cuda_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def resolve_target(target="auto") -> dict:
    """A normalised target dict whose ``kind`` names the backend.

    ``"auto"`` (ROCm when torch is a ROCm build with a GPU, CUDA with an NVIDIA GPU, else
    the CPU), ``"cuda"``/``"cuda -arch=sm_80"``, ``"hip"``/``"rocm"`` (optionally
    ``-arch=gfx942`` or ``-mcpu=gfx942``), ``"metal"``, ``"llvm"``/``"cpu"``, or a dict.
    """
    if isinstance(target, dict):
        spec = dict(target)
        kind = spec.get("kind", "auto")
    else:
        text = str(target or "auto").strip()
        parts = text.split()
        kind, spec = (parts[0] if parts else "auto"), {}
        for part in parts[1:]:
            for flag in ("-arch=", "-mcpu="):
                if part.startswith(flag):
                    spec["arch"] = part[len(flag) :]
    kind = _ALIASES.get(kind, kind)
    if kind == "auto":
        kind = "rocm" if _rocm_torch() else "cuda" if _cuda_available() else "cpu"
    if kind not in ("cpu", "cuda", "rocm", "metal"):
        raise errors.CompileError(
            f"unsupported target {target!r}: expected 'auto', 'cuda', 'hip'/'rocm', 'metal', "
            "'llvm' or 'cpu'"
        )
    spec["kind"] = kind
    if kind == "cuda" and "arch" not in spec:
        spec["arch"] = _cuda_arch() if _cuda_available() else _DEFAULT_ARCH["cuda"]
    if kind == "rocm" and "arch" not in spec:
        spec["arch"] = _rocm_arch() if _rocm_torch() else _DEFAULT_ARCH["rocm"]
    if kind == "metal" and "arch" not in spec:
        spec["arch"] = _DEFAULT_ARCH["metal"]
    return spec
