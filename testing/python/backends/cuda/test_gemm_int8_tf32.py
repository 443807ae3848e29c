"""int8 (``mma.m16n8k32.s32.s8.s8.s32``) and tf32 (``mma.m16n8k8.f32.tf32.tf32.f32``) gemms.

* CPU emulation: the statements ``lower_gemm_cuda`` emits (ldmatrix, element loads from
  shared memory, ``tl::float_to_tf32``, the mma wrappers) are interpreted lane by lane with
  the PTX ISA fragment tables for m16n8k32 (8-bit) and m16n8k8 (tf32), written out
  independently below, for all four transposes and several warp policies.
* nvcc: the CUDA pipeline (wgmma disabled) compiles for sm_80 and sm_90a without spills and emits
  the expected mma instruction.
* GPU (``cuda`` marker): results against torch in float64 (int8 exact, tf32 ~1e-3).
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from tvm_tirx import ir

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemm_kernels  # noqa: E402
from test_gemm_cuda_compile import ptxas_report  # noqa: E402
from test_gemm_mma_emulation import _const, _store, _tensor  # noqa: E402

from tilelang.lowering.cuda_context import CudaLowerContext, LayoutInferContext  # noqa: E402
from tilelang.lowering.region import full_region  # noqa: E402
from tilelang.ops.gemm.mma_cuda import infer_gemm_layout_cuda, lower_gemm_cuda  # noqa: E402
from tilelang.ops.gemm.op import GEMM, GemmWarpPolicy  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ACCUM = {"int8": "int32", "float32": "float32"}


# PTX ISA "Matrix Fragments for mma.m16n8k32" (.s8) and "for mma.m16n8k8" (.tf32);
# g = groupID = lane >> 2, t = threadID_in_group = lane % 4. Entries: (row, col).
def ptx_k32_a(lane, i):
    g, t = lane // 4, lane % 4
    row = g if (i < 4 or 8 <= i < 12) else g + 8
    col = t * 4 + (i & 3) + (16 if i >= 8 else 0)
    return row, col


def ptx_k32_b(lane, i):
    g, t = lane // 4, lane % 4
    return t * 4 + (i & 3) + (16 if i >= 4 else 0), g


def ptx_k8_a(lane, i):
    g, t = lane // 4, lane % 4
    row = g if i in (0, 2) else g + 8
    col = t if i in (0, 1) else t + 4
    return row, col


def ptx_k8_b(lane, i):
    g, t = lane // 4, lane % 4
    return (t if i == 0 else t + 4), g


def ptx_c(lane, i):
    g, t = lane // 4, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


# name fragment -> (k, A regs, B regs, A table, B table)
MMA = {
    "m16n8k32": (32, 16, 8, ptx_k32_a, ptx_k32_b),
    "m16n8k8": (8, 4, 2, ptx_k8_a, ptx_k8_b),
}


def tf32_round(x):
    """cvt.rna.tf32.f32: nearest, ties away from zero, low 13 mantissa bits cleared."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32)
    return bits.view(np.float32)


def is_tf32(x):
    return (np.asarray(x, np.float32).view(np.uint32) & 0x1FFF) == 0


class Machine:
    """Per-thread float64 local arrays and flat (physical) shared arrays; runs the calls."""

    def __init__(self, threads, tx_var, shared, ebytes):
        self.threads, self.tx, self.shared, self.ebytes = threads, tx_var, shared, ebytes
        self.locals = {}
        self.calls = {}

    def local(self, var, t):
        key = (var.__chandle__(), t)
        if key not in self.locals:
            self.locals[key] = np.zeros(int(var.ty.shape[0]), np.float64)
        return self.locals[key]

    def addr_local(self, call, t):
        load = call.args[0]
        return self.local(load.source, t), _const(load.indices[0], self.tx, t)

    def eval(self, expr, t):
        if isinstance(expr, ir.TensorLoad):
            src = expr.source
            idx = [_const(i, self.tx, t) for i in expr.indices]
            flat = int(np.ravel_multi_index(idx, [int(s) for s in src.ty.shape]))
            return self.shared[src.__chandle__()][flat]
        name = str(expr.args[0].value)
        assert name == "tl::float_to_tf32", name
        self.calls[name] = self.calls.get(name, 0) + 1
        return float(tf32_round(self.eval(expr.args[1], t)))

    def run(self, stmt):
        if isinstance(stmt, ir.SeqStmt):
            for s in stmt.seq:
                self.run(s)
            return
        if isinstance(stmt, ir.Bind):
            return
        if isinstance(stmt, ir.TensorStore):
            for t in range(self.threads):
                dst = self.local(stmt.dest, t)
                dst[_const(stmt.indices[0], self.tx, t)] = self.eval(stmt.value, t)
            return
        assert isinstance(stmt, ir.Evaluate), type(stmt)
        name = str(stmt.value.args[0].value)
        self.calls[name] = self.calls.get(name, 0) + 1
        args = list(stmt.value.args[1:])
        for w in range(self.threads // 32):
            lanes = range(32 * w, 32 * w + 32)
            if "ldmatrix" in name:
                self.ldmatrix(name, args, lanes)
            else:
                self.mma(name, args, lanes)

    def ldmatrix(self, name, args, lanes):
        """PTX ldmatrix (no .trans) at element granularity: row = 16 bytes, reg = 4 bytes."""
        assert not name.endswith("trans"), "8-bit/32-bit operands must not use ldmatrix.trans"
        n = int(name.split("_x")[1][0])
        per_reg, per_row = 4 // self.ebytes, 16 // self.ebytes
        rows = {}
        for lane in lanes:
            ptr = args[0]
            mem = self.shared[ptr.args[0].args[0].source.__chandle__()]
            off = _const(ptr.args[1], self.tx, lane)
            assert off % 16 == 0, "ldmatrix row address not 16-byte aligned"
            elem = off // self.ebytes
            rows[lane % 32] = mem[elem : elem + per_row]
        for lane in lanes:
            dst, base = self.addr_local(args[1], lane)
            lo = lane % 32
            for q in range(n):
                word = rows[8 * q + lo // 4][per_reg * (lo % 4) : per_reg * (lo % 4 + 1)]
                dst[base + per_reg * q : base + per_reg * (q + 1)] = word

    def mma(self, name, args, lanes):
        shape = next(s for s in MMA if s in name)
        k, na, nb, ta, tb = MMA[shape]
        a, b, c = np.zeros((16, k)), np.zeros((k, 8)), np.zeros((16, 8))
        for lane in lanes:
            lo = lane % 32
            arr, base = self.addr_local(args[1], lane)
            for i in range(na):
                a[ta(lo, i)] = arr[base + i]
            arr, base = self.addr_local(args[2], lane)
            for i in range(nb):
                b[tb(lo, i)] = arr[base + i]
            arr, base = self.addr_local(args[3], lane)
            for i in range(4):
                c[ptx_c(lo, i)] = arr[base + i]
        if "tf32" in name:
            assert is_tf32(a).all() and is_tf32(b).all(), "mma.tf32 operand not rounded"
        else:
            assert (np.abs(a) <= 128).all() and (a == np.round(a)).all()
        d = a @ b + c
        for lane in lanes:
            arr, base = self.addr_local(args[0], lane)
            for i in range(4):
                arr[base + i] = d[ptx_c(lane % 32, i)]


def emulate(m, n, k, threads, policy, ta, tb, dtype, a_regs=False, seed=0):
    """(got, want, calls) of the lowered gemm interpreted on random operands."""
    rng = np.random.default_rng(seed)
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    if dtype == "int8":
        a_log = rng.integers(-128, 128, size=a_shape).astype(np.float64)
        b_log = rng.integers(-128, 128, size=b_shape).astype(np.float64)
    else:
        a_log = rng.standard_normal(a_shape).astype(np.float32).astype(np.float64)
        b_log = rng.standard_normal(b_shape).astype(np.float32).astype(np.float64)
    a_var = _tensor("A_s", a_shape, dtype, "local.fragment" if a_regs else "shared.dyn")
    b_var = _tensor("B_s", b_shape, dtype, "shared.dyn")
    c_var = _tensor("C_l", (m, n), ACCUM[dtype], "local.fragment")
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
    layouts.update(
        infer_gemm_layout_cuda(view, LayoutInferContext(threads, "sm_90a", "strict", layouts))
    )
    tx = ir.Var("tx", "int32")
    c_frag = layouts[c_var]
    c_loc = _tensor("C_local", [c_frag.get_local_size()], ACCUM[dtype], "local")
    local_arrays = {c_var: c_loc}
    shared = {b_var.__chandle__(): _store(layouts[b_var], b_log).astype(np.float64)}
    ebytes = 1 if dtype == "int8" else 4
    tx_ = tx
    machine = Machine(threads, tx_, shared, ebytes)
    if a_regs:
        a_frag = layouts[a_var]
        a_loc = _tensor("A_local", [a_frag.get_local_size()], dtype, "local")
        local_arrays[a_var] = a_loc
        for idx in np.ndindex(*a_log.shape):
            for rep in range(a_frag.get_replicate()):
                t = a_frag.forward_thread_point(*idx, rep=rep)
                (loc,) = a_frag.map_forward_index(list(idx))
                machine.local(a_loc, t)[int(loc.value)] = a_log[idx]
    else:
        shared[a_var.__chandle__()] = _store(layouts[a_var], a_log).astype(np.float64)
    if dtype == "float32":  # _store goes through float32; keep exact float64 copies
        for key, val in list(shared.items()):
            shared[key] = val.astype(np.float32).astype(np.float64)
    ctx = CudaLowerContext("cuda", {}, threads, None, tx, "sm_90a", layouts, local_arrays)
    machine.run(lower_gemm_cuda(view, ctx))
    a_mat, b_mat = (a_log.T if ta else a_log), (b_log.T if tb else b_log)
    if dtype == "float32":
        a_mat, b_mat = tf32_round(a_mat).astype(np.float64), tf32_round(b_mat).astype(np.float64)
    got = np.zeros((m, n))
    for i, j in np.ndindex(m, n):
        t = c_frag.forward_thread_point(i, j)
        (loc,) = c_frag.map_forward_index([i, j])
        got[i, j] = machine.local(c_loc, t)[int(loc.value)]
    return got, a_mat @ b_mat, machine.calls


TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
SHAPES = [
    # M, N, K, threads, policy
    (64, 64, 64, 128, GemmWarpPolicy.Square),
    (64, 32, 64, 128, GemmWarpPolicy.FullRow),
    (32, 64, 32, 128, GemmWarpPolicy.FullCol),
    (32, 24, 32, 64, GemmWarpPolicy.Square),  # odd n8 tile count: ldmatrix.x2 for int8 B
]


@pytest.mark.parametrize("ta,tb", TRANSPOSES)
@pytest.mark.parametrize("m,n,k,threads,policy", SHAPES)
def test_int8_lowering_emulated(m, n, k, threads, policy, ta, tb):
    got, want, calls = emulate(m, n, k, threads, policy, ta, tb, "int8")
    np.testing.assert_array_equal(got, want)
    assert calls["tl::mma_m16n8k32_s8s8s32"] > 0
    uses_ldmatrix = any("ldmatrix" in c for c in calls)
    assert uses_ldmatrix == (not ta or tb)  # K-major operands go through ldmatrix


@pytest.mark.parametrize("ta", [False, True])
def test_int8_register_a_emulated(ta):
    got, want, _ = emulate(64, 64, 64, 128, GemmWarpPolicy.FullRow, ta, False, "int8", True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ta,tb", TRANSPOSES)
@pytest.mark.parametrize("m,n,k,threads,policy", SHAPES)
def test_tf32_lowering_emulated(m, n, k, threads, policy, ta, tb):
    got, want, calls = emulate(m, n, k, threads, policy, ta, tb, "float32")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert calls["tl::mma_m16n8k8_tf32tf32f32"] > 0
    assert calls["tl::float_to_tf32"] > 0
    assert not any("ldmatrix" in c for c in calls)


def test_errors_name_buffers():
    from tilelang import errors

    a = _tensor("A_f", (64, 32), "float32", "local.fragment")
    b = _tensor("B_s", (32, 64), "float32", "shared.dyn")
    c = _tensor("C_l", (64, 64), "float32", "local.fragment")
    view = GEMM.view(GEMM.make(full_region(a), full_region(b), full_region(c)))
    with pytest.raises(errors.CompileError, match="A_f"):
        infer_gemm_layout_cuda(view, LayoutInferContext(128, "sm_80", "strict", {}))
    c32 = _tensor("C_bad", (64, 64), "float32", "local.fragment")
    a8 = _tensor("A8", (64, 32), "int8", "shared.dyn")
    b8 = _tensor("B8", (32, 64), "int8", "shared.dyn")
    view = GEMM.view(GEMM.make(full_region(a8), full_region(b8), full_region(c32)))
    with pytest.raises(errors.CompileError, match="C_bad"):
        infer_gemm_layout_cuda(view, LayoutInferContext(128, "sm_80", "strict", {}))


# ---------------------------------------------------------------------------------------
# nvcc and GPU
# ---------------------------------------------------------------------------------------
def make_kernel(
    M, N, K, bM=128, bN=128, bK=64, threads=128, stages=2, dtype="int8", ta=False, tb=False
):
    """A tiled ``C = op(A) @ op(B)`` kernel (C int32 for int8, float32 for float32)."""
    return gemm_kernels.make(M, N, K, bM, bN, bK, threads, stages, dtype, ta, tb, ACCUM[dtype])


CFG = {"int8": dict(bK=64), "float32": dict(bK=16)}  # 2 stages fit the 48 KB static smem
PTX_MMA = {
    "int8": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
    "float32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
}


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_compiles_without_spills(dtype, ta, tb, arch, tmp_path):
    from gemm_kernels import build_mma

    art = build_mma(make_kernel(512, 512, 512, dtype=dtype, ta=ta, tb=tb, **CFG[dtype]), arch)
    rep = ptxas_report(art.get_kernel_source(), arch, tmp_path)
    assert rep["spill_bytes"] == 0, rep["log"]
    assert PTX_MMA[dtype] in rep["ptx"]
    assert "wgmma" not in rep["ptx"]
    if dtype == "float32":
        assert "cvt.rna.tf32.f32" in rep["ptx"]
        assert "ldmatrix" not in rep["ptx"]
    elif not ta or tb:
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in rep["ptx"]


def build_any(func, arch, flow):
    """CudaArtifact of ``func`` through the CUDA pipeline (``flow`` "mma": wgmma disabled)."""
    if flow == "mma":
        from gemm_kernels import build_mma

        return build_mma(func, arch, compiler="nvrtc")
    from tilelang.backends.cuda.pipeline import build

    return build(func, target={"kind": "cuda", "arch": arch}, compiler="nvcc")


@needs_nvcc
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False)])
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_full_pipeline_builds(dtype, ta, tb):
    """On sm_90a the full CUDA pipeline takes the int8/tf32 mma.sync path, odd shapes too,
    except for K-major int8 (A (M, K), B (N, K)): that one runs on wgmma k32
    (``test_gemm_wgmma_8bit.py``)."""
    import re

    func = make_kernel(200, 136, 96, dtype=dtype, ta=ta, tb=tb, **CFG[dtype])
    src = build_any(func, "sm_90a", "pipeline").get_kernel_source()
    body = src[src.index('extern "C"') :]
    calls = set(re.findall(r"tl::(?:mma|wgmma)\w*", body))
    if dtype == "int8" and not ta and tb:
        assert {c for c in calls if "k32_ss_int8" in c}, calls
        assert not {c for c in calls if c.startswith("tl::mma_")}, calls
        return
    want = "tl::mma_m16n8k32_s8s8s32" if dtype == "int8" else "tl::mma_m16n8k8_tf32tf32f32"
    assert calls == {want}, calls


def _flows_and_shapes():
    for flow in ("mma", "pipeline"):
        for shape in ((256, 256, 256), (200, 136, 96)):
            yield pytest.param(flow, shape, id=f"{flow}-{shape}")


def _tail_cases():
    for dtype, k in (("int8", 96), ("int8", 88), ("float32", 40)):
        for ta, tb in TRANSPOSES:
            for aligned in (True, False):
                yield pytest.param(dtype, k, ta, tb, aligned)


@pytest.mark.parametrize("dtype,k,ta,tb,aligned", list(_tail_cases()))
def test_pipeline_tails_emulated(dtype, k, ta, tb, aligned):
    """The full CUDA pipeline's kernel run by ``emulate.py`` (mma/ldmatrix included) at
    M/N/K tails with two K tiles: a shared tile left stale at the K tail (the int8
    transpose_A bug seen on the H200) gives wrong sums. ``aligned=False`` runs the scalar
    copies."""
    from tilelang.backends.cuda.pipeline import lower
    from tilelang.testing.cuda_emulator import emulate as run_kernel

    m, n = 40, 24
    # 128-byte rows of int8 MN-major A and B tiles: the swizzle whose copy lost the K-tail
    # zero fill (A and B both stale, so neither masks the other)
    cfg = dict(bM=128, bN=128, threads=128, bK=64 if dtype == "int8" else 16)
    func = make_kernel(m, n, k, dtype=dtype, ta=ta, tb=tb, **cfg)
    # the mma.sync path (K-major int8 would take wgmma on sm_90a, which this emulator lacks)
    # with cp.async copies (TMA would refuse the unaligned pointers of aligned=False)
    configs = {"tl.disable_wgmma": True, "tl.disable_tma_lower": True}
    lowered = lower(func, {"kind": "cuda", "arch": "sm_90a"}, configs)
    rng = np.random.default_rng(1)
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    if dtype == "int8":
        a = rng.integers(-128, 128, a_shape).astype(np.int8)
        b = rng.integers(-128, 128, b_shape).astype(np.int8)
        c = np.full((m, n), -1, np.int32)
    else:
        a = rng.standard_normal(a_shape).astype(np.float32)
        b = rng.standard_normal(b_shape).astype(np.float32)
        c = np.full((m, n), np.nan, np.float32)
    _, _, c = run_kernel(lowered, a, b, c, aligned=aligned)
    a_mat, b_mat = (a.T if ta else a), (b.T if tb else b)
    if dtype == "int8":
        np.testing.assert_array_equal(c, a_mat.astype(np.int64) @ b_mat.astype(np.int64))
        assert k > 64  # two K tiles: the second one has the tail
    else:
        a_mat, b_mat = tf32_round(a_mat).astype(np.float64), tf32_round(b_mat).astype(np.float64)
        np.testing.assert_allclose(c, a_mat @ b_mat, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("flow,shape", list(_flows_and_shapes()))
def test_gemm_matches_torch(flow, dtype, ta, tb, shape):
    import torch

    from tilelang.backends.cuda.runtime import load_kernel

    m, n, k = shape
    cap = torch.cuda.get_device_capability()
    arch = "sm_90a" if cap[0] == 9 else f"sm_{cap[0]}{cap[1]}"
    func = make_kernel(m, n, k, dtype=dtype, ta=ta, tb=tb, **CFG[dtype])
    kern = load_kernel(build_any(func, arch, flow))
    a_shape, b_shape = ((k, m) if ta else (m, k)), ((n, k) if tb else (k, n))
    if dtype == "int8":
        a = torch.randint(-128, 128, a_shape, dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, b_shape, dtype=torch.int8, device="cuda")
        c = torch.empty((m, n), dtype=torch.int32, device="cuda")
    else:
        a = torch.randn(a_shape, dtype=torch.float32, device="cuda")
        b = torch.randn(b_shape, dtype=torch.float32, device="cuda")
        c = torch.empty((m, n), dtype=torch.float32, device="cuda")
    kern(a, b, c)
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    if dtype == "int8":
        assert torch.equal(c.long(), ref.long())
    else:
        err = (c.double() - ref).abs().max() / ref.abs().max()
        assert err < 2e-3, float(err)
