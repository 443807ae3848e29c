"""wgmma overlap on sm_90a: deferred wgmma waits and consumer software pipelining.

* ``passes/wgmma_wait_sinking.py``: a gemm's ``wgmma.wait_group`` moves to the first
  statement that needs its result; ``wait_group n`` counts the gemms issued meanwhile;
  ``tl.wgmma_wait_sinking = False`` keeps it in place.
* ``passes/pipeline_order.py``: ``T.Pipelined(order=, stage=, group=)`` honored in the
  warp-specialized loop (upstream's ``example_mha_fwd_bshd_wgmma_pipelined.py``), one TMA
  ring per copy; illegal annotations are ignored with a note; ``tl.wgmma_overlap`` derives
  the same schedule for the plain FlashAttention program.

Correctness runs the lowered kernels in the CUDA emulator (warp-specialized branches as
cooperative tasks, wgmma groups executed when ``wgmma.wait_group`` retires them, so a read
of an accumulator before its wait sees stale values) with a stricter machine that also
fails when an accumulator is written while its group is in flight; against float64 numpy,
with sequence lengths that are not tile multiples, causal and not. nvcc: no spills, no
wgmma serialization. GPU (``cuda``): the examples against torch in float64.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import tilelang.language as T
from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import wgmma_wait_sinking
from tilelang.testing import cuda_emulator as _emu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import RSMachine  # noqa: E402
from test_pipeline_emulate import _attention, _example  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
PIPELINED = "flash_attention/example_mha_fwd_bshd_wgmma_pipelined.py"
PLAIN = "flash_attention/example_mha_fwd_bshd.py"
OVERLAP = {"tl.wgmma_overlap": True}
PINGPONG = {"tl.ws_pingpong": True}
NO_PINGPONG = {"tl.ws_pingpong": False}


# ------------------------------------------------------------------------- the machine
class StrictMachine(RSMachine):
    """:class:`RSMachine` that also fails when a group's accumulator changes between its
    commit and the wait that retires it (a write to registers a wgmma in flight owns)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.snaps = {}
        self.max_pending = 0

    def _extern(self, fname, args, e, mask):
        if fname == "tl::wgmma_commit":
            ops = list(self.wg_open)
            out = super()._extern(fname, args, e, mask)
            self.snaps[id(self.wg_groups[-1])] = {
                id(op["acc"][0]): (op["acc"][0], op["acc"][0].data.copy()) for op in ops
            }
            self.max_pending = max(self.max_pending, len(self.wg_groups))
            return out
        if fname.startswith("tl::wgmma_wait<"):
            n = int(fname[fname.index("<") + 1 : -1])
            while len(self.wg_groups) > n:
                group = self.wg_groups.pop(0)
                snap = self.snaps.pop(id(group))
                for buf, data in snap.values():
                    if not np.array_equal(buf.data, data, equal_nan=True):
                        raise _emu.EmulationError(
                            "accumulator written while its wgmma is in flight"
                        )
                for op in group:
                    self._execute_wgmma(op)
                for other in self.wg_groups:  # later groups on the same registers
                    for key, (buf, _) in list(self.snaps[id(other)].items()):
                        if key in snap:
                            self.snaps[id(other)][key] = (buf, buf.data.copy())
            return None
        return super()._extern(fname, args, e, mask)


def emulate(func, *arrays):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    m = StrictMachine(func, arrays)
    m.run(func.body, True)
    m.finish()
    return arrays, m


# ------------------------------------------------------------------------- kernels
def two_gemms(M, N, K, threads=128, dtype="float16"):
    """C1 = A @ B^T and C2 = A2 @ B^T with independent work between the gemms and the
    uses of their results."""

    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        A2: T.Tensor((M, K), dtype),
        B: T.Tensor((N, K), dtype),
        X: T.Tensor((M, N), "float32"),
        O1: T.Tensor((M, N), "float32"),
        O2: T.Tensor((M, N), "float32"),
    ):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, K), dtype)
            A2_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            C1 = T.alloc_fragment((M, N), "float32")
            C2 = T.alloc_fragment((M, N), "float32")
            D = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(A2, A2_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C1, transpose_B=True, clear_accum=True)
            T.gemm(A2_s, B_s, C2, transpose_B=True, clear_accum=True)
            for i, j in T.Parallel(M, N):
                D[i, j] = X[i, j] * 2.0
            for i, j in T.Parallel(M, N):
                C1[i, j] += D[i, j]
            for i, j in T.Parallel(M, N):
                C2[i, j] -= D[i, j]
            T.copy(C1, O1)
            T.copy(C2, O2)

    return main


def chained(N1, bN, order, stage, group, M=64, K=64, N2=64, dtype="float16"):
    """O = cast(Q @ Kt^T) @ V over blocks of N1, with ``T.Pipelined`` annotations; body
    statements: 0 K copy, 1 V copy, 2 clear S, 3 Q @ K^T, 4 P = cast(S), 5 P @ V."""

    @T.prim_func
    def main(
        Q: T.Tensor((M, K), dtype),
        Kt: T.Tensor((N1, K), dtype),
        V: T.Tensor((N1, N2), dtype),
        O: T.Tensor((M, N2), "float32"),
    ):
        with T.Kernel(1, threads=128):
            Q_s = T.alloc_shared((M, K), dtype)
            K_s = T.alloc_shared((bN, K), dtype)
            V_s = T.alloc_shared((bN, N2), dtype)
            S = T.alloc_fragment((M, bN), "float32")
            P = T.alloc_fragment((M, bN), dtype)
            acc = T.alloc_fragment((M, N2), "float32")
            T.copy(Q, Q_s)
            T.clear(acc)
            for k in T.Pipelined(
                T.ceildiv(N1, bN), num_stages=2, order=order, stage=stage, group=group
            ):
                T.copy(Kt[k * bN, 0], K_s)
                T.copy(V[k * bN, 0], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True)
                T.copy(S, P)
                T.gemm(P, V_s, acc)
            T.copy(acc, O)

    return main


LEGAL = dict(order=[-1, -1, 0, 2, 1], stage=[-1, -1, 0, 0, 1], group=[[0], [1], [2, 3], [4], [5]])
# P = cast(S) one iteration late: Q @ K^T of k would overwrite S before the cast of k-1 reads it
ILLEGAL = dict(order=[-1, -1, 0, 1, 2], stage=[-1, -1, 0, 1, 1], group=[[0], [1], [2, 3], [4], [5]])


def _fa_tir(path, causal, seq, batch=1, heads=1, dim=64, blocks=(128, 128, 256)):
    fa = _example(path).flashattn
    bm, bn, threads = blocks
    return fa.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=2, threads=threads
    )


def _lower(func, configs=None):
    return pipeline.lower(func, SM90A, configs)


def _notes(lowered):
    return list(lowered.attrs["tl.tma"]) if "tl.tma" in lowered.attrs else []


def _steady_loop(text):
    """The text of the consumer's steady-state loop (``for k in range(1, ...)``)."""
    m = re.search(r"\n( +)for k in range\(1, .*?\n(?=\1\S)", text, re.S)
    assert m, text
    return m.group(0)


# ------------------------------------------------------------------------- wait sinking
def _positions(text, *needles):
    return [text.index(n) for n in needles]


def test_waits_sink_below_independent_work_and_count_groups(rng):
    M, N, K = 64, 64, 32
    func = two_gemms(M, N, K)
    text = str(_lower(func))
    commits = [m.start() for m in re.finditer(r"wgmma_commit", text)]
    w1, w0 = text.index("wgmma_wait<1>"), text.index("wgmma_wait<0>")
    store_d = text.index("D_local[")
    assert len(commits) == 2 and commits[1] < store_d < w1 < w0
    # C1's wait (one group, C2's, still in flight) before the first read of C1, C2's after
    assert w1 < text.index("C1_local[", w1) < w0
    off = str(_lower(func, {"tl.wgmma_wait_sinking": False}))
    assert "wgmma_wait<1>" not in off
    assert [m.start() for m in re.finditer(r"wgmma_wait<0>", off)][0] < off.index("D_local[")
    a, a2, b = (rng.standard_normal(s).astype(np.float16) for s in [(M, K), (M, K), (N, K)])
    x = rng.standard_normal((M, N)).astype(np.float32)
    o1, o2 = np.full((M, N), np.nan, np.float32), np.full((M, N), np.nan, np.float32)
    (_, _, _, _, o1, o2), m = emulate(_lower(func), a, a2, b, x, o1, o2)
    ab = a.astype(np.float64) @ b.astype(np.float64).T
    a2b = a2.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(o1, ab + 2 * x, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(o2, a2b - 2 * x, rtol=1e-4, atol=1e-3)
    assert m.max_pending == 2  # both gemms were in flight together


def test_sinking_everything_is_caught(monkeypatch, rng):
    """The emulator tells a wait moved past a use of its accumulator."""
    monkeypatch.setattr(wgmma_wait_sinking, "_passable", lambda *args: True)
    lowered = _lower(_fa_tir(PIPELINED, False, 300))
    q, k, v = (rng.standard_normal((1, 300, 1, 64)).astype(np.float16) for _ in range(3))
    with pytest.raises((_emu.EmulationError, AssertionError)):
        (_, _, _, o), _ = emulate(lowered, q, k, v, np.full_like(q, np.nan))
        np.testing.assert_allclose(o, _attention(q, k, v, False), rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------------- FlashAttention
def test_pipelined_example_structure():
    lowered = _lower(_fa_tir(PIPELINED, True, 4096, batch=4, heads=16, dim=128))
    notes = _notes(lowered)
    assert any("consumer software-pipelined" in n and "ring per copy" in n for n in notes), notes
    loop = _steady_loop(str(lowered))
    qk = loop.index("wgmma_m64n128k16_ss")
    pv = loop.index("wgmma_m64n128k16_rs")
    w1, w0 = loop.index("wgmma_wait<1>"), loop.index("wgmma_wait<0>")
    exp2 = loop.index("T.exp2")
    cast = re.search(r"acc_s_cast_local\[fl_\d+\] = T.Cast", loop).start()
    # Q @ K^T of block k and P @ V of block k-1 issued, then wait for Q @ K^T only; the
    # softmax (exp2) of k runs while P @ V is in flight; P is rewritten after its wait
    assert qk < pv < w1 < exp2 < w0 < cast
    assert loop.count("wgmma_commit") == 2 and loop.count("wgmma_wait<") == 2
    arrives = [m.start() for m in re.finditer("mbarrier_arrive", loop)]
    assert len(arrives) == 2 and arrives[0] > cast  # K of k and V of k-1 handed back


def test_plain_example_is_ordered_and_overlap_derives_the_schedule():
    """The plain example's annotations cover its causal body too (one softmax statement
    more: Check_inf); without them (``tl.pipeline_order = False``) and without the derived
    schedule (``tl.wgmma_overlap = False``) the loop keeps its order, and ``tl.wgmma_overlap``
    (unset: by default for this two-gemm loop) derives the same schedule."""
    func = _fa_tir(PLAIN, True, 4096, batch=4, heads=16, dim=128)
    assert any("consumer software-pipelined" in n for n in _notes(_lower(func)))
    off = {"tl.pipeline_order": False, "tl.wgmma_overlap": False}
    assert not any("software-pipelined" in n for n in _notes(_lower(func, off)))
    unannotated = {"tl.pipeline_order": False}  # the overlap derived by default
    assert any("consumer software-pipelined" in n for n in _notes(_lower(func, unannotated)))
    lowered = _lower(func, {**off, **OVERLAP})
    assert any("consumer software-pipelined" in n for n in _notes(lowered))
    loop = _steady_loop(str(lowered))
    assert loop.index("wgmma_m64n128k16_ss") < loop.index("wgmma_wait<1>") < loop.index("T.exp2")


def test_pingpong_turns_around_the_ordered_gemms():
    """Ping-pong turns in the ordered loop (FlashAttention-3's scheduler barrier; on by
    default, ``tl.ws_pingpong = False`` turns them off): each
    warpgroup waits for its turn before Q @ K^T of k and hands it over after issuing P @ V of
    k-1; the gemms' waits sink past the hand-over (the softmax of k overlaps the other
    warpgroup's gemms); warpgroup 1 opens before the loop, warpgroup 0 closes after it."""
    text = str(_lower(_fa_tir(PIPELINED, True, 4096, batch=4, heads=16, dim=128)))  # default
    loop = _steady_loop(text)
    turn = loop.index('"tl::ws_turn_wait", 2 + tx // 128, T.uint32(256)')
    give = loop.index('"tl::ws_turn_arrive", 3 - tx // 128, T.uint32(256)')
    qk, pv = loop.index("wgmma_m64n128k16_ss"), loop.index("wgmma_m64n128k16_rs")
    last_commit = loop.rindex("wgmma_commit")
    assert turn < qk < pv < last_commit < give < loop.index("wgmma_wait<1>") < loop.index("T.exp2")
    assert loop.count("ws_turn_wait") == 1 and loop.count("ws_turn_arrive") == 1
    head, tail = text.split(_steady_loop(text))
    assert head.count("ws_turn") == 1 and '"tl::ws_turn_arrive", 2, T.uint32(256)' in head
    assert tail.count("ws_turn") == 1 and '"tl::ws_turn_wait", 2, T.uint32(256)' in tail
    off = _lower(_fa_tir(PIPELINED, True, 4096, batch=4, heads=16, dim=128), NO_PINGPONG)
    assert "ws_turn" not in str(off) and not any("take turns" in n for n in _notes(off))


def test_pipeline_order_pass_config_off():
    off = {"tl.pipeline_order": False, "tl.wgmma_overlap": False}
    lowered = _lower(_fa_tir(PIPELINED, False, 300), off)
    assert not any("software-pipelined" in n for n in _notes(lowered))
    assert "for k in range(1," not in str(lowered)


@pytest.mark.parametrize(
    "path,causal,seq,configs",
    [
        (PIPELINED, False, 300, None),
        (PIPELINED, True, 300, None),
        (PIPELINED, False, 128, None),  # one block: prologue and epilogue only
        (PIPELINED, True, 257, None),
        (PIPELINED, False, 200, {"tl.wgmma_wait_sinking": False}),
        (PIPELINED, True, 200, {"tl.pipeline_order": False, "tl.wgmma_overlap": False}),
        (PIPELINED, True, 200, {"tl.pipeline_order": False}),  # derived by default
        (PLAIN, True, 300, OVERLAP),
        (PLAIN, False, 200, {**OVERLAP, "tl.pipeline_order": False}),
        (PLAIN, False, 300, (128, 64, 128)),  # one consumer warpgroup
        (PLAIN, True, 300, (128, 64, 128, OVERLAP)),
        (PLAIN, False, 200, (64, 64, 256)),  # P exchanged through shared memory
        (PIPELINED, True, 300, PINGPONG),
        (PLAIN, False, 257, PINGPONG),
        (PIPELINED, True, 300, NO_PINGPONG),
    ],
)
def test_flash_attention_emulated(path, causal, seq, configs, rng):
    B, H, D = 1, 2, 64
    blocks = (128, 128, 256)
    if isinstance(configs, tuple):
        blocks, configs = configs[:3], (configs[3] if len(configs) > 3 else None)
    lowered = _lower(_fa_tir(path, causal, seq, B, H, D, blocks), configs)
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)
    overlapped = configs is None or configs.get("tl.wgmma_overlap") or "tl.ws_pingpong" in configs
    if overlapped and seq > 128:
        assert m.max_pending == 2  # Q @ K^T of k and P @ V of k-1 in flight together


# ------------------------------------------------------------------------- annotations
@pytest.mark.parametrize("n1", [256, 200, 64])
def test_chained_legal_order_emulated(n1, rng):
    func = chained(n1, 64, **LEGAL)
    lowered = _lower(func)
    assert any("consumer software-pipelined" in n for n in _notes(lowered))
    q, kt = (rng.standard_normal(s).astype(np.float16) for s in [(64, 64), (n1, 64)])
    v = rng.standard_normal((n1, 64)).astype(np.float16)
    o = np.full((64, 64), np.nan, np.float32)
    (_, _, _, o), _ = emulate(lowered, q, kt, v, o)
    s = (q.astype(np.float64) @ kt.astype(np.float64).T).astype(np.float16)
    np.testing.assert_allclose(o, s.astype(np.float64) @ v.astype(np.float64), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize(
    "ann,why",
    [
        (ILLEGAL, "swap places but touch the same tensors"),
        (dict(LEGAL, group=[[0], [1], [2], [4], [5]]), "do not partition"),
        (dict(order=[-1, 3, 0, 1, 2, 4], stage=[-1, 0, 0, 0, 0, 1]), "a pipelined copy needs"),
        (dict(order=[-1, -1, -1, 1, 2, 3], stage=[-1, -1, -1, 0, 0, 1]), "only for the pipelined"),
        (dict(LEGAL, stage=[-1, -1, 0, 0, 2]), "stage 2"),
        (dict(LEGAL, order=[-1, -1, 0, 0, 1]), "same order"),
    ],
)
def test_illegal_annotations_are_ignored_with_a_note(ann, why, rng):
    func = chained(200, 64, ann["order"], ann["stage"], ann.get("group"))
    lowered = _lower(func, {"tl.wgmma_overlap": False})  # (else the derived order applies)
    notes = _notes(lowered)
    assert any("order/stage/group ignored" in n and why in n for n in notes), notes
    assert not any("software-pipelined" in n for n in notes)
    q, kt, v = (rng.standard_normal(s).astype(np.float16) for s in [(64, 64), (200, 64), (200, 64)])
    (_, _, _, o), _ = emulate(lowered, q, kt, v, np.full((64, 64), np.nan, np.float32))
    s = (q.astype(np.float64) @ kt.astype(np.float64).T).astype(np.float16)
    np.testing.assert_allclose(o, s.astype(np.float64) @ v.astype(np.float64), rtol=2e-3, atol=2e-2)


# ------------------------------------------------------------------------- nvcc
@needs_nvcc
@pytest.mark.parametrize(
    "path,causal,configs",
    [
        (PIPELINED, False, None),
        (PIPELINED, True, None),
        (PLAIN, True, OVERLAP),
        (PIPELINED, True, PINGPONG),
    ],
)
def test_flash_attention_compiles_without_spills(path, causal, configs, tmp_path):
    from test_gemm_wgmma import ptxas_report

    func = _fa_tir(path, causal, 4096, batch=4, heads=16, dim=128)
    art = pipeline.build(func, SM90A, pass_configs=configs, compiler="nvcc")
    rep = ptxas_report(art.get_kernel_source(), tmp_path)
    assert rep["spill"] == 0 and rep["stack"] == 0, rep["log"]
    assert "serialized" not in rep["log"], rep["log"]
    assert "wgmma.wait_group.sync.aligned 1;" in rep["ptx"]


# ------------------------------------------------------------------------- GPU
def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs sm_90a")
    return torch


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "path,configs",
    [
        (PIPELINED, None),
        (PLAIN, OVERLAP),
        (PLAIN, None),
        (PIPELINED, PINGPONG),
        (PLAIN, NO_PINGPONG),
    ],
)
@pytest.mark.parametrize("seq", [1000, 4096])
def test_flash_attention_gpu(path, configs, causal, seq):
    import tilelang

    torch = _gpu()
    fa = _example(path)
    B, H, D = 2, 4, 128
    tir = _fa_tir(path, causal, seq, B, H, D)
    kernel = tilelang.compile(tir, out_idx=[3], target="cuda", pass_configs=configs)
    q, k, v = (torch.randn(B, seq, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    out = kernel(q, k, v)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.double(), fa.ref_program(q, k, v, causal), rtol=1e-2, atol=1e-2)


@pytest.mark.cuda
@pytest.mark.parametrize("n1", [256, 200])
def test_chained_legal_order_gpu(n1):
    import tilelang

    torch = _gpu()
    kernel = tilelang.compile(chained(n1, 64, **LEGAL), out_idx=[3], target="cuda")
    q = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    kt, v = (torch.randn(n1, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    out = kernel(q, kt, v)
    torch.cuda.synchronize()
    ref = (q.double() @ kt.double().T).half().double() @ v.double()
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_pipelined_example_main_cpu(causal):
    """The ported example's ``main`` (upstream's signature) on the CPU backend."""
    out = _example(PIPELINED).main(1, 2, 100, 64, causal, device="cpu")
    assert out.shape == (1, 100, 2, 64)
