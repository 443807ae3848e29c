"""ROCm software pipelining (``tilelang/backends/rocm/pipelining.py``): ``T.Pipelined`` loops
get multi-buffered LDS tiles filled through registers, one barrier an iteration.

Checked without AMD hardware: the ROCm emulator runs the pipelined lowering against float64
references (tails in M, N and K; aligned and unaligned base pointers), the lowered IR has
the schedule's shape, and hipcc's code object (``llvm-objdump``) issues the next tile's
global loads before the current tile's MFMAs with one ``s_barrier`` in the loop.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from tvm_tirx import ir
from vendor_kernels import check_matmul, matmul, random_operand

from tilelang.backends.rocm import build as rocm_build
from tilelang.backends.rocm import pipeline
from tilelang.testing.rocm_emulator import emulate

GFX90A = {"kind": "rocm", "arch": "gfx90a"}
GFX940 = {"kind": "rocm", "arch": "gfx940"}
needs_hipcc = pytest.mark.skipif(
    rocm_build.find_toolchain() is None,
    reason="no HIP toolchain (apt-get install -y hipcc rocm-device-libs)",
)


def pipelined_gemm(
    m, n, k, stages, trans_a=False, trans_b=False, in_dtype="float16", acc="float32"
):
    """``vendor_kernels.matmul`` with a ``num_stages=stages`` k loop."""
    return matmul.get_tir(m, n, k, trans_A=trans_a, trans_B=trans_b, in_dtype=in_dtype,
                          accum_dtype=acc, out_dtype=acc, num_stages=stages)  # fmt: skip


def _loop(func):
    """The outermost serial loop of the lowered kernel (the k loop)."""
    found = []

    def visit(node):
        if isinstance(node, ir.For) and not found:
            if node.kind == ir.ForKind.DEFAULT:
                found.append(node)

    import tvm_ffi

    tvm_ffi.structural_walk(func.body, [(ir.For, visit)], order="pre")
    return found[0] if found else None


def _calls(node) -> list[str]:
    names = []

    def visit(x):
        if getattr(x.op, "name", "") == "tirx.call_extern":
            names.append(str(x.args[0].value))

    import tvm_ffi

    tvm_ffi.structural_walk(node, [(ir.Call, visit)])
    return names


@pytest.mark.parametrize(
    "m,n,k,stages,trans_a,trans_b,in_dtype,acc,target",
    [
        (100, 72, 120, 2, False, False, "float16", "float32", GFX90A),
        (130, 70, 200, 3, False, True, "float16", "float32", GFX90A),
        (88, 136, 72, 4, True, False, "bfloat16", "float32", GFX90A),
        (72, 80, 96, 2, True, True, "float16", "float32", GFX940),
        (40, 90, 176, 3, False, True, "int8", "int32", GFX940),
        (50, 40, 24, 3, False, False, "float16", "float32", GFX90A),  # one k tile, S > tiles
        (33, 20, 100, 2, False, False, "float32", "float32", GFX90A),  # scalar gemm fallback
    ],
)
@pytest.mark.parametrize("aligned", [True, False])
def test_pipelined_gemm_matches_float64(m, n, k, stages, trans_a, trans_b, in_dtype, acc, target,
                                        aligned, rng):  # fmt: skip
    func = pipelined_gemm(m, n, k, stages, trans_a, trans_b, in_dtype, acc)
    lowered = pipeline.lower(func, target)
    assert "tl::stage_copy<16>" in _calls(lowered.body), "the loop was not pipelined"

    def run(a, b, c):
        return emulate(lowered, a, b, c, aligned=aligned, check_races=True)[2]

    check_matmul(run, rng, m, n, k, trans_a, trans_b, in_dtype, acc)


def test_schedule_shape():
    # S = 3: two tiles loaded in the prologue, three LDS stages, one barrier an iteration
    lowered = pipeline.lower(pipelined_gemm(100, 72, 200, 3), GFX90A)
    plan = dict(lowered.attrs["tl.shared_memory"].items())
    assert {str(n) for n in plan} == {"As_mb", "Bs_mb"}
    assert int(plan["As_mb"][1]) == 3 * 64 * 32 * 2
    loop = _loop(lowered)
    body = list(loop.body.seq)
    assert _calls(body[0]) == ["__syncthreads"]
    names = _calls(loop.body)
    assert names.count("__syncthreads") == 1
    first_mfma = names.index("tl::mfma_f32_16x16x16_f16")
    assert names.index("tl::load_vec<16>") < first_mfma  # global -> registers first
    stores = [i for i, x in enumerate(names) if x == "tl::stage_copy<16>"]
    assert stores and min(stores) > max(i for i, x in enumerate(names) if x.startswith("tl::mfma"))
    prologue = _calls(lowered.body).index("__syncthreads")  # before the loop: 2 tiles staged
    assert _calls(lowered.body)[:prologue].count("tl::stage_copy<16>") == 2 * 4


@pytest.mark.parametrize("stages", [0, 1])
def test_fewer_than_two_stages_is_the_plain_loop(stages, rng):
    lowered = pipeline.lower(pipelined_gemm(70, 64, 96, stages), GFX90A)
    assert "tl::stage_copy<16>" not in _calls(lowered.body)
    assert "As_mb" not in str(lowered.attrs["tl.shared_memory"])
    a, b = random_operand(rng, (70, 96), "float16"), random_operand(rng, (96, 64), "float16")
    c = emulate(lowered, a, b, np.zeros((70, 64), np.float32), check_races=True)[2]
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), atol=1e-3)


def test_rows_not_a_vector_multiple_stay_unpipelined_and_correct(rng):
    # K = 70 halves: a row is no multiple of 16 bytes, so the copies cannot move 16-byte
    # vectors; the loop lowers as the plain loop
    lowered = pipeline.lower(pipelined_gemm(100, 72, 70, 2), GFX90A)
    assert "tl::stage_copy<16>" not in _calls(lowered.body)
    a, b = random_operand(rng, (100, 70), "float16"), random_operand(rng, (70, 72), "float16")
    c = emulate(lowered, a, b, np.zeros((100, 72), np.float32), check_races=True)[2]
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), atol=1e-3)


def test_example_gemm_pipelined(rng):
    from example_kernels import example_tir

    m, n, k = 129, 257, 96  # the README gemm: num_stages=3, 128x128x32 tiles
    lowered = pipeline.lower(example_tir("gemm/example_gemm.py", "matmul", (m, n, k)), GFX90A)
    assert "tl::stage_copy<16>" in _calls(lowered.body)
    a, b = random_operand(rng, (m, k), "float16"), random_operand(rng, (k, n), "float16")
    c = emulate(lowered, a, b, np.zeros((m, n), np.float16), check_races=True)[2]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


FA = "flash_attention/example_mha_fwd_bshd.py"


@pytest.mark.parametrize("schedule", ["auto", "leading"])
def test_flash_attention_pipelined(schedule, rng):
    # the K copy leads the body; the V copy (after Q @ K^T and the softmax) is hoisted into
    # the stages too unless the copy schedule is "leading"
    from example_kernels import example_tir

    b, h, s, d = 1, 2, 128, 64
    func = example_tir(FA, "flashattn", (b, h, s, d, True, 64, 64, 2))
    lowered = pipeline.lower(func, GFX90A, {"tl.pipeline_copy_schedule": schedule})
    tiles = {str(name) for name in lowered.attrs["tl.shared_memory"]}
    assert "K_shared_mb" in tiles
    assert ("V_shared_mb" in tiles) == (schedule == "auto")
    q, k, v = (random_operand(rng, (b, s, h, d), "float16") for _ in range(3))
    out = emulate(lowered, q, k, v, np.zeros((b, s, h, d), np.float16), check_races=True)[3]
    qt, kt, vt = (torch.from_numpy(x).double().transpose(1, 2) for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    np.testing.assert_allclose(out.astype(np.float64), ref.transpose(1, 2).numpy(), atol=2e-2)


def test_lds_budget_is_64_kib():
    # three stages of K and V (48 KiB) with Q and P: more than CUDA's default 48 KiB, within
    # a CDNA workgroup's 64 KiB of LDS
    from example_kernels import example_tir

    lowered = pipeline.lower(
        example_tir(FA, "flashattn", (1, 2, 256, 64, False, 64, 64, 3)), GFX90A
    )
    used = max(int(o) + int(n) for o, n in lowered.attrs["tl.shared_memory"].values())
    assert 48 * 1024 < used <= 64 * 1024


# ------------------------------------------------------------------------ code objects
_INSN = re.compile(r"^\s+(\w+)\b.*//\s*([0-9A-Fa-f]+):.*?(?:<\w+\+0x([0-9a-f]+)>)?\s*$")


def _instructions(disasm: str):
    """[(offset in the kernel, mnemonic, branch target offset or None)] of the kernel."""
    base, out = None, []
    for line in disasm.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        addr = int(m.group(2), 16)
        base = addr if base is None else base
        target = int(m.group(3), 16) if m.group(3) else None
        out.append((addr - base, m.group(1), target))
    return out


def _loop_body(disasm: str) -> list[str]:
    """Mnemonics of the largest loop (a backward branch's span), starting after its barrier."""
    insns = _instructions(disasm)
    spans = [
        (t, off)
        for off, name, t in insns
        if name.startswith(("s_cbranch", "s_branch")) and t is not None and t < off
    ]
    assert spans, "no loop in the kernel"
    lo, hi = max(spans, key=lambda s: s[1] - s[0])
    body = [name for off, name, _ in insns if lo <= off <= hi]
    if "s_barrier" in body:  # rotate: one iteration from its barrier on
        i = body.index("s_barrier")
        body = body[i:] + body[:i]
    return body


def _first(body, prefix):
    return next(i for i, name in enumerate(body) if name.startswith(prefix))


@needs_hipcc
@pytest.mark.parametrize("target", [GFX90A, GFX940])
@pytest.mark.parametrize("stages", [2, 3])
def test_loads_are_issued_before_the_mfmas(stages, target):
    # 32 k tiles: the loop stays a loop in the code object
    artifact = pipeline.build(pipelined_gemm(100, 72, 1024, stages), target)
    disasm = rocm_build.disassemble(artifact.code_object)
    assert not re.search(r"\b(scratch|buffer)_(load|store)", disasm), "registers spilled"
    body = _loop_body(disasm)
    assert body.count("s_barrier") == 1
    g, m = _first(body, "global_load"), _first(body, "v_mfma")
    assert g < m, "the next tile's global loads come after the MFMAs"
    last_write = max(i for i, name in enumerate(body) if name.startswith("ds_write"))
    assert last_write > m, "the stage stores come before the MFMAs"


@needs_hipcc
def test_unpipelined_loop_has_two_barriers():
    # the control for the test above: without pipelining the loop waits twice
    artifact = pipeline.build(pipelined_gemm(100, 72, 1024, 0), GFX90A)
    body = _loop_body(rocm_build.disassemble(artifact.code_object))
    assert body.count("s_barrier") == 2
