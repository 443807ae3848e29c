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
_MODULES = {"cpu": "tilelang.backends.cpu", "cuda": "tilelang.backends.cuda"}


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


def _cuda_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def resolve_target(target="auto") -> dict:
    """A normalised target dict: ``{"kind": "cpu"}`` or ``{"kind": "cuda", "arch": "sm_90a"}``."""
    if isinstance(target, dict):
        spec = dict(target)
        kind = spec.get("kind", "auto")
    else:
        text = str(target or "auto").strip()
        parts = text.split()
        kind, spec = (parts[0] if parts else "auto"), {}
        for part in parts[1:]:
            if part.startswith("-arch="):
                spec["arch"] = part[len("-arch=") :]
    kind = {"llvm": "cpu", "c": "cpu", "host": "cpu", "nvidia": "cuda"}.get(kind, kind)
    if kind == "auto":
        kind = "cuda" if _cuda_available() else "cpu"
    if kind not in ("cpu", "cuda"):
        raise errors.CompileError(
            f"unsupported target {target!r}: expected 'auto', 'cuda', 'llvm' or 'cpu'"
        )
    spec["kind"] = kind
    if kind == "cuda" and "arch" not in spec:
        spec["arch"] = _cuda_arch() if _cuda_available() else "sm_90a"
    return spec
