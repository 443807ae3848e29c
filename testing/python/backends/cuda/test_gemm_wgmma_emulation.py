"""CPU checks of the sm_90a wgmma GEMM path against an independent numpy model of wgmma.

The model (below) is written from the PTX ISA ("Matrix Descriptor Format", "Shared Memory
Matrix Layout", "Matrix Fragments for wgmma.m64nNk16") and CUTLASS's canonical GMMA
layouts, independently of ``tilelang/ops/gemm_wgmma.py``:

* descriptor bits: 0-13 start address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base
  offset, 62-63 layout type (1: 128B, 2: 64B, 3: 32B swizzle);
* the byte address of operand element (mn, k) of a 16-bit k16 operand, before swizzling,
  with ``W`` the swizzle width in bytes:

  - K-major:  ``start + (mn // 8) * SBO + (mn % 8) * W + 2 k``
  - MN-major: ``start + (mn // (W/2)) * LBO + 2 (mn % (W/2)) + (k // 8) * SBO + (k % 8) * W``

  and the swizzle XORs address bits [4, 4+b) with bits [7, 7+b) (b = 3/2/1);
* accumulator ``d[i]`` of lane ``l`` of warp ``w`` of the warpgroup: row
  ``16 w + l/4 + 8 ((i/2) % 2)``, column ``8 (i/4) + 2 (l%4) + i % 2``.

Tests:

* the address walk: for every instruction of a gemm, the byte each operand element (mn, k)
  was stored at through the tile's layout is the byte the descriptor makes wgmma read;
* the lowered statements of one gemm, interpreted (all transposes, warpgroup splits,
  clear_accum), give ``A @ B`` through C's fragment;
* whole kernels through ``pipeline.lower`` (cp.async pipeline, stage indexing, fences,
  tile offsets from ``plan_shared_memory``) on :class:`WgmmaMachine`, the CUDA emulator plus
  wgmma and *asynchronous* completion: in ``"late_reads"`` mode a wgmma reads shared memory
  only when a ``wgmma.wait_group`` retires it (cp.async lands at issue); in ``"late_writes"``
  mode cp.async copies land only when ``cp.async.wait_group`` retires them (wgmma reads at
  issue). A schedule that refills a stage before the wgmma reading it completed, or reads a
  stage before its copy landed, computes wrong values (checked by hand: prefetching S-1 ahead
  with a group in flight, one cp.async wait too few, a wrong LBO and 16-byte tile alignment
  each fail here).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm_tirx import ir

from tilelang.testing import cuda_emulator as _emu

sys.path.insert(0, str(Path(__file__).resolve().parent))

# ------------------------------------------------------------------------- the wgmma model
ROW_BYTES = {1: 128, 2: 64, 3: 32}
XOR_BITS = {1: 7, 2: 3, 3: 1}


def encode_desc(addr: int, layout_type: int, lbo: int, sbo: int) -> int:
    """What ``tl::wgmma_desc<layout_type, lbo, sbo>(addr)`` computes (wgmma.h)."""
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (layout_type << 62)


def decode_desc(desc: int):
    desc = int(desc)
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    base = (desc >> 49) & 0x7
    layout = (desc >> 62) & 0x3
    return start, lbo, sbo, base, layout


def swizzle(addr, layout_type: int):
    return addr ^ (((addr >> 7) & XOR_BITS[layout_type]) << 4)


def operand_addresses(desc: int, mn_extent: int, k_major: bool) -> np.ndarray:
    """Byte address of every element (mn, k) of a 16-bit ``mn_extent x 16`` operand."""
    start, lbo, sbo, base, layout = decode_desc(desc)
    assert base == 0, "the tiles are aligned to their swizzle period"
    assert layout in ROW_BYTES, f"layout type {layout}: only swizzled layouts are modelled"
    w = ROW_BYTES[layout]
    mn = np.arange(mn_extent)[:, None]
    k = np.arange(16)[None, :]
    if k_major:
        addr = start + (mn // 8) * sbo + (mn % 8) * w + 2 * k
        assert (start % w) + 32 <= w, "a K-major k16 row must stay inside one swizzle row"
    else:
        e = w // 2
        addr = start + (mn // e) * lbo + 2 * (mn % e) + (k // 8) * sbo + (k % 8) * w
    return swizzle(addr, layout)


def accumulator_coords(n: int):
    """(row, col) of ``d[i]`` for every thread of a warpgroup: arrays (128, n/2)."""
    lane = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    warp, l32 = lane // 32, lane % 32
    row = 16 * warp + l32 // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (l32 % 4) + i % 2
    return row, col


_INSTR = re.compile(r"tl::wgmma_m64n(\d+)k16_ss<(true|false), ([01]), ([01])>")


class _SharedRoot:
    """The block's shared memory as the race checker names a buffer."""

    def __init__(self, data):
        self.data, self.name, self.shared = data, "shared memory", True


class WgmmaMachine(_emu._Machine):
    """The CUDA emulator plus wgmma / cp.async groups (see the module docstring)."""

    def __init__(self, func, arrays, mode="late_reads", race=None):
        if race is None:
            race = os.environ.get("TILELANG_EMULATOR_RACE_CHECK") == "1"
        super().__init__(func, arrays, race=race)
        assert mode in ("late_reads", "late_writes")
        self.mode = mode
        self.wg_open, self.wg_groups = [], []
        self.cp_open, self.cp_groups = [], []
        self.instructions = 0

    # ---------------------------------------------------------------- shared addresses
    @staticmethod
    def _root(arr):
        while isinstance(arr.base, np.ndarray):
            arr = arr.base
        return arr

    def _smem_address(self, ptr, mask):
        b, flat = self._pointer(ptr, mask)
        root = self._root(b.data)
        offset = b.data.ctypes.data - root.ctypes.data
        return root, offset + flat * b.data.dtype.itemsize

    # ---------------------------------------------------------------- externs
    def _extern(self, fname, args, e, mask):
        if fname == "tl::wgmma_arrive":
            return None
        if fname.startswith("tl::wgmma_fence_operand<"):
            return None
        if fname.startswith("tl::wgmma_desc<"):
            lt, lbo, sbo = (int(x) for x in fname[fname.index("<") + 1 : -1].split(","))
            root, addr = self._smem_address(args[0], mask)
            self.smem_root = root
            return np.array([encode_desc(int(a), lt, lbo, sbo) for a in addr], dtype=object)
        if fname.startswith("tl::wgmma_m64n"):
            op = self._wgmma_op(fname, args, mask)
            if self.mode == "late_reads":
                self.wg_open.append(op)
            else:
                self._execute_wgmma(op)
            return None
        if fname == "tl::wgmma_commit":
            self.wg_groups.append(self.wg_open)
            self.wg_open = []
            return None
        if fname.startswith("tl::wgmma_wait<"):
            n = int(fname[fname.index("<") + 1 : -1])
            while len(self.wg_groups) > n:
                for op in self.wg_groups.pop(0):
                    self._execute_wgmma(op)
            return None
        if fname.startswith("tl::cp_async_gs"):
            if self.mode == "late_writes":
                self.cp_open.append(self._bind_copy(fname, args, mask))
                return None
            return super()._extern(fname, args, e, mask)
        if fname == "tl::cp_async_commit":
            self.cp_groups.append(self.cp_open)
            self.cp_open = []
            return None
        if fname.startswith("tl::cp_async_wait<"):
            n = int(fname[fname.index("<") + 1 : -1])
            while len(self.cp_groups) > n:
                for copy in self.cp_groups.pop(0):
                    self._land_copy(*copy)
            return None
        return super()._extern(fname, args, e, mask)

    def _bind_copy(self, fname, args, mask):
        """Evaluate a cp.async's operands at issue (the hardware reads them then)."""
        nbytes = int(fname[fname.index("<") + 1 : fname.index(">")])
        sb, sflat = self._pointer(args[0], mask)
        active = np.broadcast_to(mask, (self.lanes,)).copy()
        pred = active
        if "conditional" in fname:
            pred = active & np.broadcast_to(self.eval(args[2], mask), (self.lanes,))
        gb, gflat = self._pointer(args[1], pred)
        n = nbytes // sb.data.dtype.itemsize
        return sb, sflat.copy(), gb, gflat.copy(), active, pred.copy(), n

    @staticmethod
    def _land_copy(sb, sflat, gb, gflat, active, pred, n):
        for t in np.nonzero(active)[0]:
            dst = slice(int(sflat[t]), int(sflat[t]) + n)
            if pred[t]:
                sb.data[dst] = gb.data[int(gflat[t]) : int(gflat[t]) + n]
            else:
                sb.data[dst] = 0

    def _wgmma_op(self, fname, args, mask):
        m = _INSTR.fullmatch(fname)
        assert m, fname
        n, ta, tb = int(m.group(1)), int(m.group(3)), int(m.group(4))
        desc_a = np.broadcast_to(self.eval(args[0], mask), (self.lanes,)).copy()
        desc_b = np.broadcast_to(self.eval(args[1], mask), (self.lanes,)).copy()
        acc_buf, acc_flat = self._pointer(args[2], mask)
        scale = int(self.scalar(args[3]))
        self.instructions += 1
        return dict(
            n=n,
            ta=ta,
            tb=tb,
            desc_a=desc_a,
            desc_b=desc_b,
            acc=(acc_buf, acc_flat.copy()),
            scale=scale,
            mask=np.broadcast_to(mask, (self.lanes,)).copy(),
        )

    def _execute_wgmma(self, op):
        assert self.lanes % 128 == 0, "wgmma needs whole warpgroups"
        smem = self.smem_root.view(np.float16)
        rows, cols = accumulator_coords(op["n"])
        acc_buf, acc_flat = op["acc"]
        for w in range(self.lanes // 128):
            lanes = slice(128 * w, 128 * w + 128)
            if not op["mask"][lanes].any():
                continue  # a warpgroup not issuing (a warp-specialized producer)
            if not op["mask"][lanes].all():
                raise _emu.EmulationError("wgmma issued by part of a warpgroup")
            da, db = op["desc_a"][lanes], op["desc_b"][lanes]
            if len(set(da.tolist())) != 1 or len(set(db.tolist())) != 1:
                raise _emu.EmulationError("wgmma descriptors differ inside a warpgroup")
            a_addr = operand_addresses(da[0], 64, k_major=op["ta"] == 0)
            b_addr = operand_addresses(db[0], op["n"], k_major=op["tb"] == 0)
            for addr in (a_addr, b_addr):
                if (addr % 2).any() or addr.max() // 2 >= smem.size:
                    raise _emu.EmulationError("wgmma operand outside shared memory")
            self._report_reads(w, a_addr, b_addr)
            a = smem[a_addr // 2].astype(np.float64)  # (64, 16)
            b = smem[b_addr // 2].astype(np.float64).T  # (16, n)
            d = a @ b
            base = acc_flat[lanes][:, None] + np.arange(op["n"] // 2)[None, :]
            t = np.arange(128 * w, 128 * w + 128)[:, None]
            old = acc_buf.data[t, base].astype(np.float64)
            new = d[rows, cols] + (old if op["scale"] else 0.0)
            acc_buf.data[t, base] = new.astype(acc_buf.data.dtype)

    def _report_reads(self, warpgroup, *byte_addresses):
        """Tell the race checker (``race_check``) that warpgroup ``warpgroup``'s wgmma read
        these shared bytes when it executed (at the ``wait_group`` retiring it in
        ``late_reads`` mode): every warp of the warpgroup reads them, so another warp's
        write before the next barrier is a race."""
        if self.race is None:
            return
        addr = np.unique(np.concatenate([np.asarray(a).ravel() for a in byte_addresses]))
        warps = 128 * warpgroup + 32 * np.arange(4)
        buf = _SharedRoot(self.smem_root)
        self.race.access(
            buf, np.tile(addr, 4), 2, np.repeat(warps, addr.size), "read", "wgmma", generic=False
        )

    def finish(self):
        if self.wg_open or self.wg_groups:
            raise _emu.EmulationError("wgmma groups still pending at the end of the kernel")
        if self.cp_open or self.cp_groups:
            raise _emu.EmulationError("cp.async groups still pending at the end of the kernel")


def emulate_wgmma(func, *arrays, mode="late_reads"):
    """Run a lowered kernel that uses wgmma; returns the arrays and the machine."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    m = WgmmaMachine(func, arrays, mode)
    m.run(func.body, True)
    m.finish()
    return arrays, m


# ------------------------------------------------------------------------- helpers
def _tensor(name, shape, dtype, scope):
    from tvm_tirx.tirx.tensor import TensorType

    return ir.Var(name, TensorType(list(shape), dtype, scope=scope))


def _gemm_view(m, n, k, ta, tb, dtype="float16", clear_accum=False, policy=0):
    from tilelang.lowering.region import full_region
    from tilelang.ops.gemm.op import GEMM

    a = _tensor("A_s", (k, m) if ta else (m, k), dtype, "shared.dyn")
    b = _tensor("B_s", (n, k) if tb else (k, n), dtype, "shared.dyn")
    c = _tensor("C_l", (m, n), "float32", "local.fragment")
    call = GEMM.make(
        full_region(a),
        full_region(b),
        full_region(c),
        transpose_A=ta,
        transpose_B=tb,
        clear_accum=clear_accum,
        policy=policy,
    )
    return GEMM.view(call), a, b, c


def _flat_offset(layout, *idx) -> int:
    coords = layout.forward_point(*idx)
    flat = 0
    for x, extent in zip(coords, layout.get_output_shape()):
        flat = flat * int(extent) + x
    return flat


# (M, N, K, threads, trans_a, trans_b): every swizzle width on both sides, both majors
GEMMS = [
    (64, 64, 64, 128, False, False),  # 128B A, 128B B (N-major)
    (64, 64, 64, 128, True, True),  # 128B M-major A, 128B K-major B
    (128, 256, 64, 256, False, False),  # the benchmark tile: 2 warpgroups x m64n256
    (128, 256, 64, 256, True, True),
    (128, 128, 32, 128, False, True),  # 64B K-major A and B, 2 m64 tiles per warpgroup
    (128, 128, 32, 128, True, False),  # MN-major: 128B on M (64-element blocks), N 128
    (64, 96, 16, 128, False, False),  # 32B K-major A; N-major B of 96: 64B (32-elem) blocks
    (64, 96, 16, 128, True, True),  # M-major A of 64 with K 16; K-major B with 32B rows
    (64, 48, 128, 128, False, False),  # K 128: two 128B column blocks; n48 N-major: 32B
    (256, 64, 64, 256, True, False),  # 2 warpgroups along M, M-major A in 2 column blocks
]


@pytest.mark.parametrize("m,n,k,threads,ta,tb", GEMMS)
def test_descriptor_address_walk(m, n, k, threads, ta, tb):
    """Each (mn, k) element of each instruction: stored byte == byte the descriptor reads."""
    from tilelang.ops.gemm.wgmma_cuda import INSTR_K, INSTR_M, WgmmaPlan

    view, *_ = _gemm_view(m, n, k, ta, tb)
    plan, why = WgmmaPlan.build(view, threads)
    assert plan is not None, why
    for op, extent, starts in (
        (plan.A, INSTR_M, range(0, m, INSTR_M)),
        (plan.B, plan.instr_n, range(0, n, plan.instr_n)),
    ):
        layout = op.layout_2d()
        for mn0 in starts:
            for kk in range(0, k, INSTR_K):
                row, col = op.origin(mn0, kk)
                start = 2 * _flat_offset(layout, row, col)
                desc = encode_desc(start, op.layout_type, op.lbo, op.sbo)
                hw = operand_addresses(desc, extent, op.k_major)
                for i in range(extent):
                    for j in range(INSTR_K):
                        r, c = op.origin(mn0 + i, kk + j)
                        assert 2 * _flat_offset(layout, r, c) == hw[i, j], (op.view.name, i, j)


def test_descriptor_fields():
    """K-major 128B: LBO 16 (unused), SBO 1024; N-major B of 256: LBO = 64 rows x 128 B."""
    from tilelang.ops.gemm.wgmma_cuda import WgmmaPlan

    view, *_ = _gemm_view(128, 256, 64, False, False)
    plan, _ = WgmmaPlan.build(view, 256)
    assert (plan.wg_m, plan.wg_n, plan.instr_n) == (2, 1, 256)
    assert (plan.A.layout_type, plan.A.lbo, plan.A.sbo, plan.A.trans) == (1, 16, 1024, 0)
    assert (plan.B.layout_type, plan.B.lbo, plan.B.sbo, plan.B.trans) == (1, 8192, 1024, 1)
    assert plan.instruction() == "tl::wgmma_m64n256k16_ss<false, 0, 1>"
    desc = encode_desc(0x2400, 1, 16, 1024)
    assert decode_desc(desc) == (0x2400, 16, 1024, 0, 1)


def test_header_is_generated():
    from tilelang.ops.gemm.wgmma_header import header_path, render_header

    assert header_path().read_text() == render_header(), (
        "tilelang/backends/cuda/include/tl_templates/cuda/wgmma.h is stale: python -m tilelang.ops.gemm.wgmma_header"
    )


# ------------------------------------------------------------------------- one gemm, lowered
LOWERED = [
    # M, N, K, threads, policy, ta, tb, clear_accum
    (64, 64, 32, 128, 0, False, False, False),
    (64, 64, 32, 128, 0, True, False, True),
    (64, 64, 32, 128, 0, False, True, False),
    (64, 64, 32, 128, 0, True, True, True),
    (128, 128, 64, 256, 0, False, False, False),  # 2 warpgroups along M
    (128, 128, 64, 256, 2, True, True, False),  # FullCol: 2 warpgroups along N
    (128, 256, 32, 128, 0, False, True, True),  # 2 m64 x 1 n256 per warpgroup
    (64, 512, 16, 128, 0, True, False, False),  # 2 n256 instructions per warpgroup
    (192, 64, 48, 384, 1, False, False, False),  # FullRow over 3 warpgroups, K 48 (32B)
]


@pytest.mark.parametrize("m,n,k,threads,policy,ta,tb,clear", LOWERED)
def test_gemm_lowering_emulated(m, n, k, threads, policy, ta, tb, clear):
    from tilelang.lowering.cuda_context import CudaLowerContext, LayoutInferContext
    from tilelang.ops.gemm.mma_cuda import infer_gemm_layout_dispatch, lower_gemm_dispatch

    view, a_var, b_var, c_var = _gemm_view(m, n, k, ta, tb, clear_accum=clear, policy=policy)
    layouts = {}
    layouts.update(
        infer_gemm_layout_dispatch(view, LayoutInferContext(threads, "sm_90a", "strict", layouts))
    )
    frag = layouts[c_var]
    c_loc = _tensor("C_local", [frag.get_local_size()], "float32", "local")
    tx = ir.Var("tx", "int32")
    ctx = CudaLowerContext("cuda", {}, threads, None, tx, "sm_90a", layouts, {c_var: c_loc})
    stmt = lower_gemm_dispatch(view, ctx)
    assert "tl::wgmma_m64n" in str(stmt)

    rng = np.random.default_rng(1)
    a_log = rng.integers(-3, 4, size=(k, m) if ta else (m, k)).astype(np.float16)
    b_log = rng.integers(-3, 4, size=(n, k) if tb else (k, n)).astype(np.float16)
    # both tiles in one "shared memory", each on a 1024-byte boundary (as plan_shared_memory)
    b_off = (a_log.size * 2 + 1023) // 1024 * 1024
    smem = np.zeros(b_off + b_log.size * 2, np.uint8)
    machine = WgmmaMachine.__new__(WgmmaMachine)
    _emu._Machine.__init__(machine, _FakeFunc(), [])
    machine.mode, machine.instructions = "late_reads", 0
    machine.wg_open, machine.wg_groups, machine.cp_open, machine.cp_groups = [], [], [], []
    machine.lanes = threads
    machine.env[tx.__chandle__()] = np.arange(threads, dtype=np.int32)
    for var, log, off in ((a_var, a_log, 0), (b_var, b_log, b_off)):
        layout = layouts[var]
        view16 = smem[off : off + log.size * 2].view(np.float16)
        for idx in np.ndindex(*log.shape):
            view16[_flat_offset(layout, *idx)] = log[idx]
        machine.bufs[var.__chandle__()] = _emu._Buf(var.name, view16, var.ty.shape, False)
    acc0 = rng.integers(-3, 4, size=(threads, frag.get_local_size())).astype(np.float32)
    machine.bufs[c_loc.__chandle__()] = _emu._Buf("C_local", acc0.copy(), c_loc.ty.shape, True)
    machine.run(stmt, np.ones(threads, bool))
    machine.finish()

    want = (a_log.T if ta else a_log).astype(np.float64) @ (b_log.T if tb else b_log)
    got = np.zeros((m, n))
    init = np.zeros((m, n))
    regs = machine.bufs[c_loc.__chandle__()].data
    for i, j in np.ndindex(m, n):
        t = frag.forward_thread_point(i, j)
        (loc,) = frag.map_forward_index([i, j])
        got[i, j] = regs[t, int(loc.value)]
        init[i, j] = acc0[t, int(loc.value)]
    np.testing.assert_array_equal(got, want if clear else want + init)


class _FakeFunc:
    params = []


# ------------------------------------------------------------------------- whole kernels
def _kernel(M, N, K, bM, bN, bK, threads, stages, ta=False, tb=False):
    from gemm_kernels import make

    return make(M=M, N=N, K=K, bM=bM, bN=bN, bK=bK, threads=threads, stages=stages, ta=ta, tb=tb)


KERNELS = [
    # M, N, K, bM, bN, bK, threads, stages, ta, tb
    (256, 256, 256, 128, 128, 64, 128, 3, False, False),
    (256, 256, 256, 128, 128, 64, 128, 3, False, True),
    (256, 256, 256, 128, 128, 64, 128, 3, True, False),
    (256, 256, 256, 128, 128, 64, 128, 3, True, True),
    (256, 256, 384, 128, 256, 64, 256, 1, False, False),
    (256, 256, 384, 128, 256, 64, 256, 2, False, False),
    (256, 256, 384, 128, 256, 64, 256, 4, False, False),
    (256, 512, 512, 128, 256, 64, 256, 4, True, True),
    (200, 136, 96, 128, 128, 32, 128, 3, False, False),  # tails in M, N (zero-filled)
    (200, 136, 96, 128, 128, 32, 128, 3, True, True),
    (136, 200, 80, 64, 64, 16, 128, 4, True, False),  # K tail, 32B swizzles
    (256, 128, 128, 256, 128, 64, 256, 3, False, True),  # 2 warpgroups x (2 m64) x n128
]


@pytest.mark.parametrize("mode", ["late_reads", "late_writes"])
@pytest.mark.parametrize("M,N,K,bM,bN,bK,threads,stages,ta,tb", KERNELS)
def test_kernel_emulated(M, N, K, bM, bN, bK, threads, stages, ta, tb, mode):
    from tilelang.backends.cuda import pipeline

    func = _kernel(M, N, K, bM, bN, bK, threads, stages, ta, tb)
    lowered = pipeline.lower(func, {"kind": "cuda", "arch": "sm_90a"})
    text = str(lowered)
    assert "tl::wgmma_m64n" in text and "mma_m16n8k16" not in text
    rng = np.random.default_rng(2)
    a = rng.integers(-3, 4, size=(K, M) if ta else (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, size=(N, K) if tb else (K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), machine = emulate_wgmma(lowered, a, b, c, mode=mode)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    np.testing.assert_array_equal(c, want)
    assert machine.instructions > 0


def test_in_flight_schedule_structure():
    """S >= 3: copies S-2 ahead, wgmma.wait_group 1 in the loop and 0 after it, one barrier."""
    from tilelang.backends.cuda import pipeline

    kernel = _kernel(512, 512, 512, 128, 256, 64, 256, 4)
    text = str(pipeline.lower(kernel, {"kind": "cuda"}, {"tl.disable_tma_lower": True}))
    loop = text.split("for k in")[1]
    assert loop.count("__syncthreads") == 1
    assert "tl::cp_async_wait<1>" in loop and "tl::wgmma_wait<1>" in loop
    fence = loop.index("tl::fence_proxy_async_shared")
    assert loop.index("tl::cp_async_wait<1>") < fence < loop.index("__syncthreads")
    assert loop.count("tl::fence_proxy_async_shared") == 1  # the gemm skips its own
    after = text.split("tl::wgmma_wait<1>")[1]
    assert "tl::wgmma_wait<0>" in after


def test_tiles_aligned_to_swizzle_period():
    """A small tile live across the loop must not push the wgmma tiles off 1024 bytes."""
    import tilelang.language as T
    from tilelang.backends.cuda import pipeline

    @T.prim_func
    def main(
        A: T.Tensor((256, 128), "float16"),
        B: T.Tensor((128, 256), "float16"),
        C: T.Tensor((256, 256), "float32"),
        D: T.Tensor((8,), "float16"),
    ):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            X = T.alloc_shared((8,), "float16")
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.copy(A[0, 0:8], X)
            T.clear(C_l)
            for k in T.Pipelined(2, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])
            T.copy(X, D[0:8])

    lowered = pipeline.lower(main, {"kind": "cuda", "arch": "sm_90a"})
    plan = {k: list(v) for k, v in lowered.attrs["tl.shared_memory"].items()}
    # X (or the pipeline's mbarriers) first, the wgmma tiles still on 1024-byte boundaries
    assert min(o for o, _ in plan.values()) == 0 and "X" in plan
    assert plan["A_s_mb"][0] % 1024 == 0 and plan["B_s_mb"][0] % 1024 == 0
    rng = np.random.default_rng(4)
    a = rng.integers(-3, 4, size=(256, 128)).astype(np.float16)
    b = rng.integers(-3, 4, size=(128, 256)).astype(np.float16)
    c, d = np.zeros((256, 256), np.float32), np.zeros(8, np.float16)
    (_, _, c, d), _ = emulate_wgmma(lowered, a, b, c, d)
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_array_equal(d, a[0, :8])
