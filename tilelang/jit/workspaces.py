"""``T.alloc_global`` workspaces at call time: fresh torch tensors appended to each call."""

from __future__ import annotations

from ..lowering.kernels import WorkspaceSpec
from .params import torch_dtype


def workspace_launcher(fn, specs: list[WorkspaceSpec], target_kind: str):
    """A callable running ``fn(*args, *workspaces)`` with fresh workspaces per call: torch
    tensors on the device of the first tensor argument (the CPU for CPU kernels)."""
    import torch

    plan = [(s.shape, torch_dtype(s.dtype)) for s in specs]
    cpu = torch.device("cpu")

    def launch(*args):
        device = cpu
        if target_kind != "cpu":
            for a in args:
                dev = getattr(a, "device", None)
                if dev is not None:
                    device = dev
                    break
        return fn(*args, *[torch.empty(shape, dtype=dt, device=device) for shape, dt in plan])

    launch.__wrapped__ = fn
    return launch
