"""A CPU reference run of a kernel for GPU tests: the CPU backend where it exists, else the
CUDA emulator on the kernel's sm_80 lowering.

The GPU machine has no TIRx LLVM backend (the CUDA path must not need it), so a GPU test that
compares against the CPU backend falls back to the emulator there.
"""

from __future__ import annotations

import numpy as np
import torch

import tilelang


def reference_run(func, *tensors):
    """Run ``func`` on copies of the CPU torch ``tensors``; returns the copies (numpy arrays)."""
    arrays = [t.detach().cpu().numpy().copy() for t in tensors]
    try:
        kernel = tilelang.compile(func, target="cpu")
    except ValueError as err:
        if "target.build.llvm" not in str(err):
            raise
        from tilelang.backends.cuda import pipeline
        from tilelang.testing.cuda_emulator import emulate

        lowered = pipeline.lower(func, {"kind": "cuda", "arch": "sm_80"})
        return list(emulate(lowered, *arrays))
    views = [torch.from_numpy(a) for a in arrays]
    kernel(*views)
    return [v.numpy() for v in views]
