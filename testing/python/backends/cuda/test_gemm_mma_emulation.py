"""CPU check of the mma gemm lowering: interpret the emitted ldmatrix/mma calls lane by lane.

The lowered statements of ``lower_gemm_cuda`` are executed by a numpy interpreter that
follows the PTX ISA semantics of ``ldmatrix`` (x1/x2/x4, .trans) and of
``mma.m16n8k16.row.col`` (fragment tables written out independently below). Shared tiles
hold the operands stored through the layouts the layout rule chose; the result in the
per-thread accumulator registers is read back through C's fragment and compared with
``A @ B``. This catches warp-partition, address, swizzle and register-order bugs
without a GPU.
"""

import numpy as np
import pytest
from tvm_tirx import ir, sym
from tvm_tirx.tirx.tensor import TensorType

from tilelang.layout import Fragment
from tilelang.lowering.cuda_context import CudaLowerContext, LayoutInferContext
from tilelang.lowering.region import full_region
from tilelang.ops.gemm.mma_cuda import infer_gemm_layout_cuda, lower_gemm_cuda
from tilelang.ops.gemm.op import GEMM, GemmWarpPolicy


# PTX ISA "Matrix Fragments for mma.m16n8k16" (f16/bf16), g = lane // 4, t = lane % 4
def ptx_a(lane, i):
    g, t = lane // 4, lane % 4
    return g + 8 * ((i // 2) % 2), 2 * t + (i % 2) + 8 * (i >= 4)


def ptx_b(lane, i):
    g, t = lane // 4, lane % 4
    return 2 * t + (i % 2) + 8 * (i >= 2), g


def ptx_c(lane, i):
    g, t = lane // 4, lane % 4
    return g + 8 * (i >= 2), 2 * t + (i % 2)


def _tensor(name, shape, dtype, scope):
    return ir.Var(name, TensorType(list(shape), dtype, scope=scope))


def _const(expr, tx_var, tx):
    e = sym.Analyzer().simplify(_subst(expr, tx_var, tx))
    assert isinstance(e, ir.IntImm), e
    return int(e.value)


def _subst(expr, var, value):
    import tvm_ffi

    h = var.__chandle__()
    return tvm_ffi.structural_map(
        expr, [(ir.Var, lambda v: ir.const(value, "int32") if v.__chandle__() == h else v)]
    )


class Machine:
    """Per-thread local arrays and one flat shared memory per shared tensor."""

    def __init__(self, threads, tx_var, shared, locals_):
        self.threads, self.tx = threads, tx_var
        self.shared = shared  # Var -> flat numpy array (physical order)
        self.locals = {}  # (handle, thread) -> numpy array
        for var, arr in locals_.items():
            for t in range(threads):
                self.locals[(var.__chandle__(), t)] = arr[t]

    def local(self, var, t):
        key = (var.__chandle__(), t)
        if key not in self.locals:
            self.locals[key] = np.zeros(int(var.ty.shape[0]), np.float32)
        return self.locals[key]

    def addr_local(self, call, t):
        load = call.args[0]
        return self.local(load.source, t), _const(load.indices[0], self.tx, t)

    def smem_elem(self, ptr, t):
        base, off = ptr.args[0], ptr.args[1]
        tensor = base.args[0].source
        return self.shared[tensor.__chandle__()], _const(off, self.tx, t) // 2

    def run(self, stmt):
        if isinstance(stmt, ir.SeqStmt):
            for s in stmt.seq:
                self.run(s)
            return
        if isinstance(stmt, ir.Bind):
            return
        assert isinstance(stmt, ir.Evaluate), type(stmt)
        name = str(stmt.value.args[0].value)
        args = list(stmt.value.args[1:])
        for w in range(self.threads // 32):
            lanes = range(32 * w, 32 * w + 32)
            if "ldmatrix" in name:
                self.ldmatrix(name, args, lanes)
            elif "mma" in name:
                self.mma(args, lanes)
            else:
                raise AssertionError(name)

    def ldmatrix(self, name, args, lanes):
        n = int(name.split("_x")[1][0])
        trans = name.endswith("trans")
        rows = {}
        for lane in lanes:
            mem, elem = self.smem_elem(args[0], lane)
            rows[lane % 32] = mem[elem : elem + 8]
        for lane in lanes:
            dst, base = self.addr_local(args[1], lane)
            lo = lane % 32
            for q in range(n):
                for h in range(2):
                    if trans:
                        value = rows[8 * q + 2 * (lo % 4) + h][lo // 4]
                    else:
                        value = rows[8 * q + lo // 4][2 * (lo % 4) + h]
                    dst[base + 2 * q + h] = value

    def mma(self, args, lanes):
        a = np.zeros((16, 16))
        b = np.zeros((16, 8))
        c = np.zeros((16, 8))
        for lane in lanes:
            lo = lane % 32
            arr, base = self.addr_local(args[1], lane)
            for i in range(8):
                a[ptx_a(lo, i)] = arr[base + i]
            arr, base = self.addr_local(args[2], lane)
            for i in range(4):
                b[ptx_b(lo, i)] = arr[base + i]
            arr, base = self.addr_local(args[3], lane)
            for i in range(4):
                c[ptx_c(lo, i)] = arr[base + i]
        d = a @ b + c
        for lane in lanes:
            arr, base = self.addr_local(args[0], lane)
            for i in range(4):
                arr[base + i] = d[ptx_c(lane % 32, i)]


def _store(layout, logical):
    """Physical flat array of ``logical`` stored through ``layout``."""
    out_shape = [int(x) for x in layout.get_output_shape()]
    flat = np.zeros(int(np.prod(out_shape)), np.float32)
    for idx in np.ndindex(*logical.shape):
        coords = layout.forward_point(*idx)
        flat[np.ravel_multi_index(coords, out_shape)] = logical[idx]
    return flat


CASES = [
    # M, N, K, threads, policy, trans_a, trans_b, a_in_regs
    (64, 64, 32, 128, GemmWarpPolicy.Square, False, False, False),
    (64, 64, 32, 128, GemmWarpPolicy.Square, True, False, False),
    (64, 64, 32, 128, GemmWarpPolicy.Square, False, True, False),
    (64, 64, 32, 128, GemmWarpPolicy.Square, True, True, False),
    (64, 32, 64, 128, GemmWarpPolicy.FullRow, False, True, False),
    (32, 64, 32, 128, GemmWarpPolicy.FullCol, False, False, False),
    (32, 24, 16, 64, GemmWarpPolicy.Square, False, False, False),  # odd n8 tile: ldmatrix.x2
    (64, 64, 32, 128, GemmWarpPolicy.FullRow, False, False, True),  # P @ V: A in registers
]


@pytest.mark.parametrize("m,n,k,threads,policy,ta,tb,a_regs", CASES)
def test_mma_lowering_emulated(m, n, k, threads, policy, ta, tb, a_regs):
    rng = np.random.default_rng(0)
    a_log = rng.integers(-3, 4, size=(k, m) if ta else (m, k)).astype(np.float32)
    b_log = rng.integers(-3, 4, size=(n, k) if tb else (k, n)).astype(np.float32)
    a_var = _tensor("A_s", a_log.shape, "float16", "local.fragment" if a_regs else "shared.dyn")
    b_var = _tensor("B_s", b_log.shape, "float16", "shared.dyn")
    c_var = _tensor("C_l", (m, n), "float32", "local.fragment")
    call = GEMM.make(
        full_region(a_var),
        full_region(b_var),
        full_region(c_var),
        transpose_A=ta,
        transpose_B=tb,
        policy=int(policy),
    )
    view = GEMM.view(call)
    layouts = {}
    lctx = LayoutInferContext(threads, "sm_90a", "strict", layouts)
    layouts.update(infer_gemm_layout_cuda(view, lctx))
    tx = ir.Var("tx", "int32")
    c_frag = layouts[c_var]
    assert isinstance(c_frag, Fragment)
    c_loc = _tensor("C_local", [c_frag.get_local_size()], "float32", "local")
    local_arrays = {c_var: c_loc}
    init = {c_loc: np.zeros((threads, c_frag.get_local_size()), np.float32)}
    shared = {}
    if a_regs:
        a_frag = layouts[a_var]
        a_loc = _tensor("A_local", [a_frag.get_local_size()], "float16", "local")
        local_arrays[a_var] = a_loc
        regs = np.zeros((threads, a_frag.get_local_size()), np.float32)
        for idx in np.ndindex(*a_log.shape):
            for rep in range(a_frag.get_replicate()):
                t = a_frag.forward_thread_point(*idx, rep=rep)
                (loc,) = a_frag.map_forward_index(list(idx))
                regs[t, int(loc.value)] = a_log[idx]
        init[a_loc] = regs
    else:
        shared[a_var.__chandle__()] = _store(layouts[a_var], a_log)
    shared[b_var.__chandle__()] = _store(layouts[b_var], b_log)
    ctx = CudaLowerContext("cuda", {}, threads, None, tx, "sm_90a", layouts, local_arrays)
    stmt = lower_gemm_cuda(view, ctx)
    machine = Machine(threads, tx, shared, init)
    machine.run(stmt)
    a_mat = a_log.T if ta else a_log
    b_mat = b_log.T if tb else b_log
    want = a_mat @ b_mat
    got = np.zeros((m, n), np.float32)
    for i, j in np.ndindex(m, n):
        t = c_frag.forward_thread_point(i, j)
        (loc,) = c_frag.map_forward_index([i, j])
        got[i, j] = machine.local(c_loc, t)[int(loc.value)]
    np.testing.assert_array_equal(got, want)


def test_shared_layouts_are_ldmatrix_conflict_free():
    from tilelang.layout import ldmatrix_bank_conflicts, make_swizzled_layout

    for shape, operand, trans in [((128, 32), "A", False), ((32, 128), "B", True)]:
        lay = make_swizzled_layout((shape, "float16"))
        for r0 in range(0, shape[0], 16):
            for c0 in range(0, shape[1], 16):
                assert ldmatrix_bank_conflicts(lay, 16, operand, trans, r0, c0) == 0
