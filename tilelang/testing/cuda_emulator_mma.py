"""mma.sync / wgmma fragment tables and tf32 rounding for the CUDA emulator
(``cuda_emulator``): which element of which lane's registers is which tile element."""

from __future__ import annotations

import ml_dtypes
import numpy as np


def tf32_round(x):
    """``cvt.rna.tf32.f32``: nearest, ties away from zero, low 13 mantissa bits cleared."""
    arr = np.asarray(x, np.float32)
    bits = arr.view(np.uint32).astype(np.uint64)
    finite = np.isfinite(arr)
    rounded = ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32)
    return np.where(finite, rounded.view(np.float32), arr)


def _is_tf32(x):
    f = np.asarray(x, np.float32)
    return ~np.isfinite(f) | ((f.view(np.uint32) & 0x1FFF) == 0)


# mma wrapper of mma.h -> (K, operand dtype, accumulator dtype, A table, B table, A regs,
# B regs). Tables (PTX ISA "Matrix Fragments for mma.m16n8k*"): element i of a lane's
# A (B) registers -> (row, col) of the 16 x K A (K x 8 B) tile, g = lane // 4, t = lane % 4.
MMA_SHAPES = {
    "tl::mma_m16n8k32_s8s8s32": (
        32,
        np.int8,
        np.int32,
        lambda g, t, i: (g + 8 * ((i // 4) % 2), 4 * t + i % 4 + 16 * (i // 8)),
        lambda g, t, i: (4 * t + i % 4 + 16 * (i // 4), g),
        16,
        8,
    ),
    "tl::mma_m16n8k8_tf32tf32f32": (
        8,
        np.float32,
        np.float32,
        lambda g, t, i: (g + 8 * (i % 2), t + 4 * (i // 2)),
        lambda g, t, i: (t + 4 * i, g),
        4,
        2,
    ),
    "tl::mma_m16n8k16_f16f16f32": (
        16,
        np.float16,
        np.float32,
        lambda g, t, i: (g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)),
        lambda g, t, i: (2 * t + i % 2 + 8 * (i // 2), g),
        8,
        4,
    ),
}
# bf16 x bf16 -> f32: the fragment tables of f16
MMA_SHAPES["tl::mma_m16n8k16_bf16bf16f32"] = (
    MMA_SHAPES["tl::mma_m16n8k16_f16f16f32"][:1]
    + (ml_dtypes.bfloat16,)
    + MMA_SHAPES["tl::mma_m16n8k16_f16f16f32"][2:]
)


def wgmma_a_coords(warp, lane, i):
    """(row, col) in the 64 x 16 A tile of element ``a_i`` (i < 8) of a register A of
    ``wgmma.mma_async.m64nNk16`` (16-bit A) held by ``lane`` of warp ``warp`` (0-3) of a
    warpgroup: PTX ISA "Matrix Fragments for wgmma.m64nNk16", multiplicand A in registers
    (row ``16 warp + lane / 4 (+ 8)``, column ``2 (lane % 4) + i % 2 (+ 8)``)."""
    g, t = lane // 4, lane % 4
    return 16 * warp + g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)


def wgmma_a_tiles(raw, off, dtype):
    """The ``(warpgroups, 64, 16)`` float64 A tiles of an RS-form wgmma, from the bytes
    ``raw[t, off[t] : off[t] + 16]`` (elements ``a0..a7``) of every thread ``t``."""
    lanes = raw.shape[0]
    t = np.arange(lanes)[:, None]
    vals = np.ascontiguousarray(raw[t, np.asarray(off)[:, None] + np.arange(16)[None, :]])
    vals = vals.view(dtype).astype(np.float64)  # (lanes, 8)
    rows, cols = wgmma_a_coords((t % 128) // 32, t % 32, np.arange(8)[None, :])
    out = np.full((lanes // 128, 64, 16), np.nan)
    out[np.broadcast_to(t // 128, rows.shape), rows, cols] = vals
    return out
