"""The CUDA emulator's vector atomics (``tl::AtomicAddx2``, see ``ops/atomic/cuda.py``)."""

from __future__ import annotations

import numpy as np
from tvm_tirx import ir


def atomic_add_x2(m, fname, args, mask):
    """``tl::AtomicAddx2(&x[i], a, b)``: x[i] += a, x[i + 1] += b (8-byte aligned pair)."""
    from .cuda_emulator import EmulationError  # the emulator imports this module

    addr = args[0]
    if not (isinstance(addr, ir.Call) and addr.op.name == "tirx.address_of"):
        raise EmulationError(f"{fname}: unsupported address {addr}")
    load = addr.args[0]
    b = m.buf(load.source)
    if b.data.dtype != np.float32:
        raise EmulationError(f"{fname}: float32 pairs only, got {b.data.dtype}")
    flat, active = m.flat(b, load.indices, mask, fname)
    row = int(m.scalar(b.shape[-1]))
    if np.any(flat[active] % 2) or np.any(flat[active] % row == row - 1):
        raise EmulationError(f"{fname}: a pair that is not 8-byte aligned in its row")
    for k, arg in enumerate(args[1:3]):
        value = np.broadcast_to(m.eval(arg, mask), (m.lanes,)).astype(b.data.dtype)
        np.add.at(b.data, flat[active] + k, value[active])
    return None


__all__ = ["atomic_add_x2"]
