"""Independent transcriptions of the PTX ISA fragment tables used by the layout tests.

Each function returns ``(row, col)`` of the element held by ``lane`` in register element
``r`` (groupID = lane >> 2, threadID_in_group = lane % 4), exactly as written in the PTX
ISA sections "Matrix Fragments for mma.m16n8k16 with floating point type",
"Matrix Fragments for mma.m16n8k32" (integer types) and the wgmma ``m64nNk16``
accumulator figure.
"""


def _group(lane):
    return lane >> 2, lane % 4


def mma_a_f16(lane, r):
    """m16n8k16 .f16/.bf16 multiplicand A (16 x 16), a0..a7."""
    gid, tig = _group(lane)
    row = gid if (0 <= r < 2 or 4 <= r < 6) else gid + 8
    col = tig * 2 + (r & 0x1) if r < 4 else tig * 2 + (r & 0x1) + 8
    return row, col


def mma_b_f16(lane, r):
    """m16n8k16 .f16/.bf16 multiplicand B (16 x 8, k x n), b0..b3."""
    gid, tig = _group(lane)
    row = tig * 2 + (r & 0x1) if r < 2 else tig * 2 + (r & 0x1) + 8
    return row, gid


def mma_c(lane, r):
    """m16n8k16 / m16n8k32 accumulator C/D (16 x 8), c0..c3."""
    gid, tig = _group(lane)
    row = gid if r < 2 else gid + 8
    return row, tig * 2 + (r & 0x1)


def mma_a_s8(lane, r):
    """m16n8k32 .s8/.u8 multiplicand A (16 x 32), a0..a15."""
    gid, tig = _group(lane)
    row = gid if (0 <= r < 4 or 8 <= r < 12) else gid + 8
    col = tig * 4 + (r & 0x3) if r < 8 else tig * 4 + (r & 0x3) + 16
    return row, col


def mma_b_s8(lane, r):
    """m16n8k32 .s8/.u8 multiplicand B (32 x 8, k x n), b0..b7."""
    gid, tig = _group(lane)
    row = tig * 4 + (r & 0x3) if r < 4 else tig * 4 + (r & 0x3) + 16
    return row, gid


def wgmma_d(thread, r):
    """wgmma m64nNk16 accumulator D of a warpgroup (64 x N), d0..d(N/2-1)."""
    warp, lane = thread // 32, thread % 32
    gid, tig = _group(lane)
    row = 16 * warp + gid + 8 * ((r >> 1) & 1)
    col = 8 * (r >> 2) + tig * 2 + (r & 0x1)
    return row, col


def swizzle(addr, bits, base=4, shift=3):
    """CUTLASS ``Swizzle<bits, base, shift>`` on a byte address."""
    mask = (1 << bits) - 1
    return addr ^ (((addr >> (base + shift)) & mask) << base)
