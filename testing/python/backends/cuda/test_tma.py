"""TMA pipelining on sm_90a: box plans, tensor-map parameters, lowering decisions, the
emulated kernels (TMA boxes and mbarrier phases modelled), SASS of nvcc builds and, marked
``cuda``, the GEMM on the GPU against torch in float64."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.tensor_map import (
    SwizzleMode,
    TensorMapSpec,
    descriptor_dtype,
    hw_swizzle,
    plan_boxes,
)
from tilelang.layout.swizzle import make_padded_layout, make_swizzle_layout_for_mode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_kernels import make  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
NO_TMA = {"tl.disable_tma_lower": True}
TMA = {"tl.disable_tma_lower": False}  # TMA wherever possible (engine/pass_config.py)
TMA_NO_WS = {**TMA, "tl.disable_warp_specialized": True}  # every thread loads and computes


# ------------------------------------------------------------------------ box plans
def test_hw_swizzle_is_cutlass_swizzle():
    """128B: 16-byte chunk ^= row % 8 for 128-byte rows; 64B/32B on their row widths."""
    for row in range(16):
        for chunk in range(8):
            addr = row * 128 + chunk * 16 + 6
            assert (
                hw_swizzle(addr, SwizzleMode.SWIZZLE_128B)
                == row * 128 + ((chunk ^ (row % 8)) * 16) + 6
            )
    for row in range(16):
        for chunk in range(4):
            addr = row * 64 + chunk * 16
            want = row * 64 + (chunk ^ ((row % 8) // 2)) * 16
            assert hw_swizzle(addr, SwizzleMode.SWIZZLE_64B) == want
    assert hw_swizzle(12345, SwizzleMode.NONE) == 12345


def _tma_image(rows, cols, bits, plan, data):
    """Shared memory (element array) after the plan's boxes copied ``data``: each box
    compact, rows of ``box_cols``, through the hardware swizzle."""
    nbytes = bits // 8
    smem = np.full(rows * cols, -1, np.int64)
    for r0, c0, off in plan.boxes:
        box = data[r0 : r0 + plan.box_rows, c0 : c0 + plan.box_cols].reshape(-1)
        addr = hw_swizzle((off + np.arange(box.size)) * nbytes, plan.mode) // nbytes
        smem[addr] = box
    return smem


@pytest.mark.parametrize(
    "rows,cols,dtype,mode",
    [
        (128, 64, "float16", SwizzleMode.SWIZZLE_128B),
        (64, 128, "float16", SwizzleMode.SWIZZLE_128B),  # two 64-column panels
        (64, 256, "bfloat16", SwizzleMode.SWIZZLE_128B),
        (32, 64, "float16", SwizzleMode.SWIZZLE_64B),
        (64, 32, "float16", SwizzleMode.SWIZZLE_32B),
        (64, 32, "float32", SwizzleMode.SWIZZLE_128B),
        (128, 128, "int8", SwizzleMode.SWIZZLE_128B),
        (40, 24, "float16", SwizzleMode.NONE),
        (512, 64, "float16", SwizzleMode.SWIZZLE_128B),  # two 256-row boxes
    ],
)
def test_plan_reproduces_layout(rows, cols, dtype, mode):
    """Reading the TMA image through the tile's layout gives the tile back."""
    layout = make_swizzle_layout_for_mode(((rows, cols), dtype), mode)
    bits = {"float16": 16, "bfloat16": 16, "float32": 32, "int8": 8}[dtype]
    plan = plan_boxes(rows, cols, bits, layout)
    assert not isinstance(plan, str), plan
    assert plan.mode == mode
    assert plan.box_rows <= 256 and plan.box_cols * bits // 8 <= max(
        mode.swizzle_byte_size(), cols * bits // 8
    )
    data = np.random.default_rng(0).permutation(rows * cols).reshape(rows, cols)
    smem = _tma_image(rows, cols, bits, plan, data)
    table = layout.forward_table()
    shape = [int(s) for s in layout.get_output_shape()]
    flat = np.zeros((rows, cols), np.int64)
    for d, extent in enumerate(shape):
        flat = flat * extent + table[..., d]
    np.testing.assert_array_equal(smem[flat], data)


def test_plan_rejects_padded_and_row_major_wide_tiles():
    assert isinstance(plan_boxes(64, 64, 16, make_padded_layout(((64, 64), "float16"))), str)
    assert isinstance(plan_boxes(8, 512, 16, None), str)  # 512 > 256 columns, no swizzle
    plan = plan_boxes(8, 64, 16, None)
    assert not isinstance(plan, str) and plan.mode is SwizzleMode.NONE


def test_direct_launch_code_for_tensor_maps():
    from tilelang.backends.cuda.direct_launch import _direct_kernel_code, _direct_launch_unsupported

    info = {
        "arg_types": ["handle", "handle", "int32"],
        "launch_param_tags": ["blockIdx.x", "threadIdx.x"],
        "arg_extra_tags": [1, 0, 0],
        "cuda_launch_fields": 0,
        "cuda_kernel_attrs": 0,
    }
    assert _direct_launch_unsupported(info) is None
    code = _direct_kernel_code(0, "k", info)
    assert "void* params[3] = {args[0].v_ptr, &a1, &a2};" in code and "a0" not in code
    assert _direct_launch_unsupported({**info, "arg_extra_tags": [2, 0, 0]}) is not None
    assert _direct_launch_unsupported({**info, "arg_extra_tags": [0, 0, 1]}) is not None


def test_descriptor_dtypes():
    assert descriptor_dtype("float16") == "float16"
    assert descriptor_dtype("bfloat16") == "bfloat16"
    assert descriptor_dtype("int8") == "uint8"
    assert descriptor_dtype("float8_e4m3fn") == "uint8"
    with pytest.raises(ValueError, match="4 bits"):
        descriptor_dtype("int4")


# ------------------------------------------------------------------ lowering decisions
def _lower(func, configs=None, arch="sm_90a"):
    return pipeline.lower(func, {"kind": "cuda", "arch": arch}, TMA if configs is None else configs)


def _tma_attr(func):
    return [str(x) for x in func.attrs["tl.tma"]] if "tl.tma" in func.attrs else []


def _encode_args(func, tensor):
    """The operands after the base pointer of ``tensor``'s host-side map encoding."""
    for line in str(func).splitlines():
        if "tensormap_encode_tiled" in line and f"T.address_of({tensor}[" in line:
            return line.split("ty=T.Ptr(")[1].split("), ", 1)[1].rstrip(")")
    return None


def test_readme_gemm_uses_tma_with_encoded_maps():
    """128x128x64, 256 threads, 3 stages: A one 128B-swizzled box, B two 64-column panels;
    tensor maps over the whole tensors (tails zero-filled), elected-thread issue, mbarriers
    (the schedule without warp specialization)."""
    f = _lower(
        make(M=1000, N=1000, K=1000, bM=128, bN=128, bK=64, threads=256, stages=3), TMA_NO_WS
    )
    notes = _tma_attr(f)
    assert any("A -> A_shared: TMA, 1 box(es) of 128x64, swizzle SWIZZLE_128B" in n for n in notes)
    assert any("B -> B_shared: TMA, 2 box(es) of 64x64, swizzle SWIZZLE_128B" in n for n in notes)
    # dims (inner first, the inner one widened by the alignment shift), byte strides,
    # box (inner first), element strides, swizzle 128B
    tail = 'descriptor_dtype="float16", rank=2, swizzle=3'
    assert _encode_args(f, "A") == f"1000 + A_tma_shift, 1000, 2000, 64, 128, 1, 1, {tail}"
    assert _encode_args(f, "B") == f"1000 + B_tma_shift, 1000, 2000, 64, 64, 1, 1, {tail}"
    assert "T.reinterpret(T.address_of(A[0, 0]), ty=T.uint64) % T.uint64(16) // T.uint64(2)" in str(
        f
    )
    text = str(f)
    loop = text.split("for k in")[1]
    assert "tl::cp_async" not in text
    assert loop.count("tl::tma_load_2d") == 3 and "if tx == 0:" in loop
    assert '"tl::mbarrier_wait", T.address_of(tma_bar_k[k % 3]), k // 3 % 2,' in loop
    assert "T.uint32(32768)" in loop  # 16 KB of A + 16 KB of B per stage
    plan = dict(f.attrs["tl.shared_memory"])
    assert all(int(plan[t][0]) % 1024 == 0 for t in ("A_shared_mb", "B_shared_mb"))


def test_tilelang_lower_shows_the_decision():
    """``tilelang.lower`` (the public API) builds and shows ``tl.tma`` after pipelining."""
    import tilelang

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    func = make(M=256, N=256, K=256, bK=64, stages=3)
    out = tilelang.lower(func, target=SM90A, pass_configs=TMA)
    planned = str(out.stages["pipeline_planning"])
    assert '"tl.tma": ["loop k: A -> A_shared: TMA' in planned
    assert "tma_host_encode" in out.stages
    assert "const __grid_constant__ CUtensorMap" in out.artifact.get_kernel_source()


def test_encode_params_of_a_spec():
    a = T.Tensor((7, 300, 64), "bfloat16")  # noqa: F841 - only the var matters
    from tilelang.lowering.thread_utils import new_tensor

    t = new_tensor("X", [7, 300, 64], "bfloat16", "global")
    spec = TensorMapSpec(t, "bfloat16", (1, 128, 64), SwizzleMode.SWIZZLE_128B)
    p = spec.encode_params()
    assert p["rank"] == 3 and p["dtype"] == "bfloat16" and p["swizzle"] == 3
    assert [int(x) for x in p["dims"]] == [64, 300, 7]
    assert [int(x) for x in p["strides"]] == [128, 300 * 128]
    assert p["box"] == [64, 128, 1] and p["element_strides"] == [1, 1, 1]


def test_disable_tma_lower_keeps_cp_async():
    func = make(M=512, N=512, K=512, bM=128, bN=128, bK=64, threads=256, stages=3)
    f = _lower(func, NO_TMA)
    text = str(f)
    assert "tma_load" not in text and "mbarrier" not in text and "tensormap" not in text
    assert "tl::cp_async_gs<16>" in text and not _tma_attr(f)


def test_sm80_has_no_tma():
    f = _lower(make(M=256, N=256, K=256, stages=3), arch="sm_80")
    assert "tma_load" not in str(f) and not _tma_attr(f)


def test_fallback_reason_is_recorded():
    """A padded shared layout (T.annotate_layout) has no TMA box form: cp.async, and why."""
    M = N = K = 256

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(2, 2, threads=128) as (bx, by):
            As = T.alloc_shared((128, 32), "float16")
            Bs = T.alloc_shared((32, 128), "float16")
            Cf = T.alloc_fragment((128, 128), "float32")
            T.annotate_layout({As: make_padded_layout(As)})
            T.clear(Cf)
            for k in T.Pipelined(K // 32, num_stages=2):
                T.copy(A[by * 128, k * 32], As)
                T.copy(B[k * 32, bx * 128], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * 128, bx * 128])

    f = _lower(main, {**TMA, "tl.disable_wgmma": True, "tl.mma_split_pipeline": False})
    notes = _tma_attr(f)
    assert notes and "cp.async (A -> As: no TMA box/swizzle" in notes[0], notes
    assert "tma_load" not in str(f) and "tl::cp_async_gs" in str(f)


def test_batched_copy_has_a_rank3_map():
    """A copy out of a 3-d tensor (unit batch axis) uses a rank-3 map with box (1, r, c)."""

    @T.prim_func
    def main(A: T.Tensor((3, 200, 64), "float16"), C: T.Tensor((3, 200, 64), "float16")):
        with T.Kernel(4, 3, threads=128) as (bx, bz):
            s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float16")
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[bz, bx * 64 + k * 0, 0], s)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] = acc[i, j] + s[i, j]
            T.copy(acc, C[bz, bx * 64, 0])

    f = _lower(main)
    assert "tl::tma_load_3d" in str(f), _tma_attr(f)
    assert _encode_args(f, "A") == (
        '64 + A_tma_shift, 200, 3, 128, 25600, 64, 64, 1, 1, 1, 1, descriptor_dtype="float16", rank=3'
    )
    from tilelang.testing.cuda_emulator import emulate

    a = np.random.default_rng(3).standard_normal((3, 200, 64)).astype(np.float16)
    c = np.zeros_like(a)
    emulate(f, a, c, aligned=True)
    np.testing.assert_array_equal(c, a * np.float16(2))
    # a base one element past 16 bytes is refused at the call (the H200 rejected the widened
    # map with an illegal instruction), not read through a shifted map
    with pytest.raises(Exception, match="16-byte aligned data pointer"):
        emulate(f, a, np.zeros_like(a), aligned=False)


# -------------------------------------------------------------------------- emulated
def _emulate_gemm(func, M, N, K, ta, tb, dtype="float16", configs=None):
    from test_gemm_wgmma_emulation import emulate_wgmma

    lowered = _lower(func, configs)
    assert "tl::tma_load_2d" in str(lowered)
    rng = np.random.default_rng(5)
    np_dt = np.float16 if dtype == "float16" else __import__("ml_dtypes").bfloat16
    a = rng.integers(-3, 4, size=(K, M) if ta else (M, K)).astype(np_dt)
    b = rng.integers(-3, 4, size=(N, K) if tb else (K, N)).astype(np_dt)
    c = np.full((M, N), np.nan, np.float32)
    (_, _, c), _ = emulate_wgmma(lowered, a, b, c, mode="late_writes")
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    return c, want


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
@pytest.mark.parametrize("ws", [True, False])
def test_emulated_gemm_with_tails(ta, tb, ws):
    """Tails in M, N and K: the boxes past the tensors' ends are zero-filled (with and
    without warp specialization: the emulator interleaves producer and consumers)."""
    M, N, K = 136, 72, 200
    func = make(M=M, N=N, K=K, bM=128, bN=64, bK=64, threads=128, stages=3, ta=ta, tb=tb)
    c, want = _emulate_gemm(func, M, N, K, ta, tb, configs=None if ws else TMA_NO_WS)
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("threads,stages", [(256, 3), (128, 2), (384, 4)])
def test_readme_gemm_is_warp_specialized(threads, stages):
    """The kernel's one pipelined loop, all copies TMA: a producer warpgroup (threads
    T..T+127, one elected thread issuing) and the block's T threads consuming; full/empty
    mbarrier rings; setmaxnreg from 384 threads up; emulated with tails it is exact."""
    M, N, K = 200, 136, 328
    bM = 64 * (threads // 128)
    func = make(M=M, N=N, K=K, bM=bM, bN=64, bK=64, threads=threads, stages=stages)
    f = _lower(func)
    text = str(f)
    assert any("warp-specialized" in n for n in _tma_attr(f)), _tma_attr(f)
    assert f'T.launch_thread("threadIdx.x", {threads + 128})' in text
    assert f"if tx < {threads}:" in text and f"if tx == {threads}:" in text
    assert f'"tl::mbarrier_init", T.address_of(tma_empty_k[0]), T.uint32({threads})' in text
    regs = "tl::set_max_nreg<" in text
    assert regs == (threads + 128 >= 384)
    assert "__syncthreads" not in text.split(f"if tx < {threads}:")[1]  # named barriers only
    c, want = _emulate_gemm(func, M, N, K, False, False)
    np.testing.assert_array_equal(c, want)


def test_disable_warp_specialized_keeps_one_role():
    """``tl.disable_warp_specialized`` keeps the block size and every thread's two jobs."""
    f = _lower(make(M=256, N=256, K=256, bM=128, bN=128, bK=64, threads=256, stages=3), TMA_NO_WS)
    text = str(f)
    assert 'T.launch_thread("threadIdx.x", 256)' in text and "tma_empty" not in text


@pytest.mark.parametrize("ws", [False, True])
def test_wrong_phase_parity_is_caught(monkeypatch, ws):
    """The mbarrier model fails a wait on a phase that cannot complete (a GPU would hang):
    without warp specialization at the wait; with it, once no branch can complete it."""
    from tilelang.backends.cuda.passes import tma_lowering, warp_specialize_auto
    from tilelang.testing.cuda_emulator import EmulationError

    module = warp_specialize_auto if ws else tma_lowering
    real = module._call
    flips = []

    def flipped(name, *args):
        if name == "tl::mbarrier_wait" and not flips:  # the first wait built: the consumer's
            flips.append(name)
            args = (args[0], 1 - args[1])
        return real(name, *args)

    monkeypatch.setattr(module, "_call", flipped)
    func = make(M=128, N=128, K=256, bM=128, bN=128, bK=64, threads=128, stages=2)
    with pytest.raises(EmulationError, match="never return"):
        _emulate_gemm(func, 128, 128, 256, False, False, configs=None if ws else TMA_NO_WS)


# ---------------------------------------------------------------------------- SASS
def _tool(name):
    path = shutil.which(name)
    if path:
        return path
    try:
        import nvidia

        for root in nvidia.__path__:
            for cand in Path(root).glob(f"*/bin/{name}"):
                return str(cand)
    except ImportError:
        pass
    return None


def _sass(artifact):
    cuobjdump, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    if cuobjdump is None or nvdisasm is None:
        pytest.skip(
            "cuobjdump/nvdisasm not installed (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)"
        )
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        Path(path).write_bytes(artifact.device_binary)
        out = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("bN", [128, 256])
def test_sass_has_utmaldg_syncs_hgmma(bN):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    func = make(M=1000, N=1000, K=1000, bM=128, bN=bN, bK=64, threads=256, stages=3)
    # (register-store epilogue: the parameter list below has no map for C)
    art = pipeline.build(func, SM90A, {**TMA, "tl.tma_store_epilogue": False}, compiler="nvcc")
    assert "const __grid_constant__ CUtensorMap A_tmap" in art.kernel_source
    assert "__tl_tensor_map_slot" in art.host_source
    assert "tma.h" in art.meta["extra_headers"]
    # direct launch: the grid-constant maps are passed as pointers to their 128 bytes
    assert art.meta["direct_launch_kernels"] == ["main_kernel"]
    assert "void* params[5] = {args[0].v_ptr, args[1].v_ptr, &a2, &a3, &a4};" in art.host_source
    sass = _sass(art)
    assert "UTMALDG" in sass and "HGMMA" in sass
    assert "SYNCS.ARRIVE.TRANS64" in sass and "SYNCS.PHASECHK.TRANS64.TRYWAIT" in sass
    assert "LDGSTS" not in sass
    off = _sass(pipeline.build(func, SM90A, NO_TMA, compiler="nvcc"))
    assert "UTMALDG" not in off and "LDGSTS" in off


# ----------------------------------------------------------------------------- GPU
def _gpu_run(func, M, N, K, dtype, ta, tb):
    import torch

    from tilelang.backends.cuda import load_kernel

    tdt = getattr(torch, dtype)
    a = torch.randn((K, M) if ta else (M, K), device="cuda", dtype=tdt)
    b = torch.randn((N, K) if tb else (K, N), device="cuda", dtype=tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    load_kernel(pipeline.build(func, {"kind": "cuda"}, TMA))(a, b, c)
    torch.cuda.synchronize()
    ref = (a.T if ta else a).double() @ (b.T if tb else b).double()
    return c.double(), ref


@pytest.mark.cuda
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shape,tile",
    [
        ((1024, 1024, 1024), (128, 128, 64)),
        ((1000, 1000, 1000), (128, 128, 64)),  # tails in M, N, K
        ((2048, 2048, 512), (128, 256, 64)),
        ((1000, 776, 520), (128, 256, 64)),
    ],
)
def test_tma_gemm_matches_torch_gpu(ta, tb, dtype, shape, tile):
    import torch

    M, N, K = shape
    bM, bN, bK = tile
    func = make(
        M=M, N=N, K=K, bM=bM, bN=bN, bK=bK, threads=256, stages=3, dtype=dtype, ta=ta, tb=tb
    )
    assert "tl::tma_load_2d" in str(_lower(func))
    c, ref = _gpu_run(func, M, N, K, dtype, ta, tb)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=5e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("stages", [1, 2, 4])
def test_tma_stage_counts_gpu(stages):
    import torch

    M, N, K = 520, 264, 1000
    func = make(M=M, N=N, K=K, bM=128, bN=128, bK=64, threads=256, stages=stages)
    c, ref = _gpu_run(func, M, N, K, "float16", False, False)
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=5e-2)


@pytest.mark.cuda
def test_tma_repeated_calls_and_threads_gpu():
    """Maps are re-encoded per call (new pointers each call) in per-thread storage."""
    import threading

    import torch

    M = N = K = 512
    func = make(M=M, N=N, K=K, bM=128, bN=128, bK=64, threads=256, stages=3)
    from tilelang.backends.cuda import load_kernel

    kernel = load_kernel(pipeline.build(func, {"kind": "cuda"}, TMA))
    errors = []

    def work(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        for _ in range(5):
            a = torch.randn((M, K), device="cuda", dtype=torch.float16, generator=g)
            b = torch.randn((K, N), device="cuda", dtype=torch.float16, generator=g)
            c = torch.empty((M, N), device="cuda", dtype=torch.float32)
            kernel(a, b, c)
            torch.cuda.synchronize()
            if not torch.allclose(c.double(), a.double() @ b.double(), rtol=1e-2, atol=5e-2):
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _dyn_gemm(m_dyn, k_dyn, N=128, K=256):
    M = T.dynamic("m") if m_dyn else 256
    Kd = T.dynamic("k") if k_dyn else K

    @T.prim_func
    def main(A: T.Tensor((M, Kd), "float16"), B: T.Tensor((Kd, N), "float16"), C: T.Tensor((M, N), "float32")):  # fmt: skip
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            As = T.alloc_shared((128, 64), "float16")
            Bs = T.alloc_shared((64, 128), "float16")
            Cf = T.alloc_fragment((128, 128), "float32")
            T.clear(Cf)
            for k in T.Pipelined(T.ceildiv(Kd, 64), num_stages=3):
                T.copy(A[by * 128, k * 64], As)
                T.copy(B[k * 64, bx * 128], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C[by * 128, bx * 128])

    return main


def test_dynamic_rows_use_tma_and_emulate():
    """A symbolic M: the map's outer dimension is the run-time M (encoded per call)."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    f = _lower(_dyn_gemm(True, False))
    assert "tl::tma_load_2d" in str(f)
    assert _encode_args(f, "A").startswith("256 + A_tma_shift, m, 512, 64, 128")
    rng = np.random.default_rng(11)
    for m in (72, 300):
        a = rng.integers(-3, 4, size=(m, 256)).astype(np.float16)
        b = rng.integers(-3, 4, size=(256, 128)).astype(np.float16)
        c = np.full((m, 128), np.nan, np.float32)
        (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
        np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


def test_dynamic_row_length_keeps_synchronous_copies():
    """A symbolic K: the byte stride K * 2 is not provably a multiple of 16, so neither TMA
    nor cp.async; the kernel stays correct (emulated with K = 200 and 72)."""
    from test_gemm_wgmma_emulation import emulate_wgmma

    f = _lower(_dyn_gemm(False, True))
    assert "tma_load" not in str(f) and "mbarrier" not in str(f)
    rng = np.random.default_rng(12)
    for k in (200, 72):
        a = rng.integers(-3, 4, size=(256, k)).astype(np.float16)
        b = rng.integers(-3, 4, size=(k, 128)).astype(np.float16)
        c = np.full((256, 128), np.nan, np.float32)
        (_, _, c), _ = emulate_wgmma(f, a, b, c, mode="late_writes")
        np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.cuda
@pytest.mark.parametrize("offset", [1, 3, 8])
def test_tma_base_off_16_bytes_gpu(offset):
    """Tensors that start ``offset`` elements into an allocation: 16-byte aligned ones run,
    others are refused with a clear error at the call (a widened map hit an illegal
    instruction on the H200), never a crash."""
    import torch

    from tilelang.backends.cuda import load_kernel

    M, N, K = 264, 200, 328
    func = make(M=M, N=N, K=K, bM=128, bN=128, bK=64, threads=256, stages=3)
    kernel = load_kernel(pipeline.build(func, {"kind": "cuda"}, TMA))
    a = torch.randn(M * K + offset, device="cuda", dtype=torch.float16)[offset:].view(M, K)
    b = torch.randn(K * N + offset, device="cuda", dtype=torch.float16)[offset:].view(K, N)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    if (offset * 2) % 16:
        with pytest.raises(Exception, match="16-byte aligned"):
            kernel(a, b, c)
        return
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-2, atol=5e-2)


def _two_kernels(M=200, N=64):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")):  # fmt: skip
        W = T.alloc_global((M, N), "float16")
        for src, dst, rows in ((A, W, 64), (W, C, 32)):  # two blocks, two tile shapes
            with T.Kernel(T.ceildiv(M, rows), threads=128) as bx:
                s = T.alloc_shared((rows, N), "float16")
                acc = T.alloc_fragment((rows, N), "float16")
                T.clear(acc)
                for k in T.Pipelined(2, num_stages=2):
                    T.copy(src[bx * rows + k * 0, 0], s)
                    for i, j in T.Parallel(rows, N):
                        acc[i, j] = acc[i, j] + s[i, j]
                T.copy(acc, dst[bx * rows, 0])
        with T.Kernel(1, threads=32) as _:
            for i in T.serial(1):
                B[0, i] = A[0, i]

    return main


def test_two_kernel_blocks_each_encode_their_maps():
    """Each T.Kernel block gets its own maps (the workspace W's too), encoded before its
    launch; the joined function runs both (emulated: C = 4 A)."""
    from tilelang.testing.cuda_emulator import emulate

    f = _lower(_two_kernels())
    text = str(f)
    assert text.count("tensormap_encode_tiled(") == 2 and text.count("tl::tma_load_2d") >= 2
    a = np.random.default_rng(4).standard_normal((200, 64)).astype(np.float16)
    b, c = np.zeros_like(a), np.zeros_like(a)
    w = np.zeros_like(a)
    emulate(f, a, b, c, w)
    np.testing.assert_array_equal(c, a * np.float16(4))
