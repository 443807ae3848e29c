"""``determine_target``: what ``target="auto"`` (or a target string) means on this machine."""

from __future__ import annotations

__all__ = ["determine_target", "target_is_cuda"]


def determine_target(target="auto", return_object: bool = False):
    """The target a kernel compiles for: ``"cuda"`` / ``"cpu"``, or with ``return_object`` the
    full target dict (e.g. ``{"kind": "cuda", "arch": "sm_90a"}``).

    ``"auto"`` picks CUDA when torch sees a GPU, else the CPU backend. Upstream returns TVM
    ``Target`` objects for ``return_object``; tilelang's targets are plain dicts.
    """
    from ..backends.registry import resolve_target

    spec = resolve_target(target)
    return spec if return_object else spec["kind"]


def target_is_cuda(target) -> bool:
    """Whether a target (string, dict) is a CUDA target."""
    from ..backends.registry import resolve_target

    try:
        return resolve_target(target)["kind"] == "cuda"
    except Exception:  # noqa: BLE001 - an unknown target is not CUDA
        return False
