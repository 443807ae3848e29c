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


def atomic_add_xn_ret(m, fname, args, mask):
    """``tl::AtomicAddx<N>Ret(&x[i], lane_0, ..., lane_{N-1}, &prev[j])``: x[i + k] += lane k,
    prev[j + k] = the old value (lanes of one thread in order; threads one after another
    in lane order where they hit the same elements, as per-lane atomics may interleave)."""
    from .cuda_emulator import EmulationError  # the emulator imports this module

    n = int(fname[len("tl::AtomicAddx") :].split("Ret")[0])
    addr, prev = args[0], args[-1]
    for a in (addr, prev):
        if not (isinstance(a, ir.Call) and a.op.name == "tirx.address_of"):
            raise EmulationError(f"{fname}: unsupported address {a}")
    load, cell = addr.args[0], prev.args[0]
    b, pb = m.buf(load.source), m.buf(cell.source)
    flat, active = m.flat(b, load.indices, mask, fname)
    pflat, _ = m.flat(pb, cell.indices, mask, fname)
    values = [
        np.broadcast_to(m.eval(arg, mask), (m.lanes,)).astype(b.data.dtype) for arg in args[1:-1]
    ]
    if len(values) != n:
        raise EmulationError(f"{fname}: {len(values)} lanes")
    if not pb.local:  # a shared cell (a thread-independent update done once per block)
        for k in range(n):
            m._track(pb, pflat + k, active, "write", fname)
    for lane in np.flatnonzero(active):
        for k in range(n):
            old = b.data[flat[lane] + k]
            if pb.local:
                pb.data[lane, pflat[lane] + k] = old
            else:
                pb.data[pflat[lane] + k] = old
            b.data[flat[lane] + k] = old + values[k][lane]
    return None


__all__ = ["atomic_add_x2", "atomic_add_xn_ret"]
