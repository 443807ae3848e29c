"""FlashAttention forward with three consumer warpgroups on sm_90a: ``block_M = 192``,
``threads = 384`` (FlashAttention-3's head-dim-64 tile: each warpgroup owns 64 rows of Q),
plus the producer warpgroup of the automatic warp specialization (512 threads, registers
split 160 / 24 by ``setmaxnreg``).

* Structure: the loop is specialized and ordered (Q @ K^T of k and P @ V of k-1 in flight
  together), each warpgroup's wgmma reads its own 64 rows of Q, the row reductions stay
  inside a quad of lanes (``shfl.xor`` 1 and 2), the epilogue is one TMA store.
* Emulated (producer and consumers as cooperative tasks, wgmma groups executed when their
  wait retires them, a machine that fails on an accumulator written while in flight)
  against float64: the examples with sequence lengths that are not tile multiples, causal
  and not, head dim 64 and 128, block_N 64 / 128 / 176.
* ``tl.ws_pingpong`` with three warpgroups: turns round robin (warpgroup ``w`` waits on
  named barrier ``2 + w``, hands over on ``2 + (w + 1) % 3``); the barrier operations each
  warpgroup executes in the emulator are replayed under barrier semantics (random
  interleavings): no deadlock, no warpgroup arriving twice in one phase, every barrier
  balanced at the end.
* nvcc: no spills, no wgmma serialization (ptxas ``-v``).
* GPU (``cuda``): against torch in float64.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline
from tilelang.backends.cuda.passes import warp_specialize_auto as ws

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gemm_wgmma_rs import _round, chained  # noqa: E402
from test_pipeline_emulate import _attention, _example  # noqa: E402
from test_wgmma_overlap import StrictMachine, _gpu  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
PLAIN = "flash_attention/example_mha_fwd_bshd.py"
PIPELINED = "flash_attention/example_mha_fwd_bshd_wgmma_pipelined.py"
BHSD = "flash_attention/example_mha_fwd_bhsd.py"
GQA = "flash_attention/example_gqa_fwd_bshd.py"
PINGPONG = {"tl.ws_pingpong": True}  # ordered loops take turns by default; True: others too
NOPP = {"tl.ws_pingpong": False}
PER_WARP = {"tl.ws_release_per_warp": True}


def _fa(causal, seq, bn=128, dim=64, batch=1, heads=1, bm=192, threads=384, path=PLAIN):
    return _example(path).flashattn.get_tir(
        batch, heads, seq, dim, causal, block_M=bm, block_N=bn, num_stages=2, threads=threads
    )


def _notes(lowered):
    return list(lowered.attrs["tl.tma"]) if "tl.tma" in lowered.attrs else []


# ------------------------------------------------------------------------- barrier replay
_BARRIERS = {
    "tl::named_barrier_sync": "sync",
    "tl::named_barrier_arrive": "arrive",
    "tl::ws_turn_wait": "sync",
    "tl::ws_turn_arrive": "arrive",
}


class TracingMachine(StrictMachine):
    """:class:`StrictMachine` that records the named-barrier operations each warpgroup of
    each block executes (the emulator runs a branch's lanes in lockstep: barriers are no-ops
    there), as ``traces[block][warpgroup] = [(kind, id, thread count), ...]`` in program
    order."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.traces = defaultdict(lambda: defaultdict(list))

    def _extern(self, fname, args, e, mask):
        kind = _BARRIERS.get(fname)
        if kind is not None:
            lanes = np.nonzero(np.broadcast_to(mask, (self.lanes,)))[0]
            ids = np.broadcast_to(np.asarray(self.eval(args[0], mask)), (self.lanes,))
            count = int(np.asarray(self.eval(args[1], mask)).reshape(-1)[0])
            for wg in np.unique(lanes // 128):
                members = lanes[lanes // 128 == wg]
                assert members.size == 128, f"{fname}: part of warpgroup {wg}"
                assert len(set(ids[members].tolist())) == 1, f"{fname}: ids differ in {wg}"
                block = tuple(sorted((k, int(v)) for k, v in self.block_index.items()))
                self.traces[block][int(wg)].append((kind, int(ids[members[0]]), count))
        return super()._extern(fname, args, e, mask)


def emulate_traced(func, *arrays, race=None):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    m = TracingMachine(func, arrays, race=race)
    m.run(func.body, True)
    m.finish()
    return arrays, m


def replay_blocks(machine, warpgroups, seed=0):
    """:func:`replay_barriers` for every block ``machine`` ran; each block's barrier
    operations come from all ``warpgroups`` consumer warpgroups."""
    assert machine.traces
    for block, trace in machine.traces.items():
        assert sorted(trace) == list(range(warpgroups)), (block, sorted(trace))
        replay_barriers(trace, seed)


def replay_barriers(trace, seed=0, schedules=20):
    """Run each warpgroup's barrier operations under ``bar.sync`` / ``bar.arrive``
    semantics (a barrier completes when ``count`` threads arrived; ``sync`` blocks until
    then) for round-robin and random interleavings. Raises AssertionError on a deadlock, a
    warpgroup arriving twice in one phase (the hardware would count it twice), a count
    exceeded, or a barrier left with arrivals at the end."""
    rng = np.random.default_rng(seed)
    for schedule in range(schedules):
        pos = dict.fromkeys(trace, 0)
        blocked, arrived = {}, defaultdict(list)
        step = 0
        while True:
            ready = [w for w in sorted(trace) if pos[w] < len(trace[w]) and w not in blocked]
            if not ready:
                assert not blocked, f"deadlock (schedule {schedule}): {blocked}"
                break
            w = ready[step % len(ready)] if schedule == 0 else ready[rng.integers(len(ready))]
            step += 1
            kind, bid, count = trace[w][pos[w]]
            pos[w] += 1
            assert w not in arrived[bid], f"warpgroup {w} arrives twice on barrier {bid}"
            arrived[bid].append(w)
            assert 128 * len(arrived[bid]) <= count, f"barrier {bid} over {count} threads"
            if kind == "sync":
                blocked[w] = bid
            if 128 * len(arrived[bid]) == count:
                arrived[bid] = []
                for x in [x for x, b in blocked.items() if b == bid]:
                    del blocked[x]
        left = {b: ws_ for b, ws_ in arrived.items() if ws_}
        assert not left, f"unbalanced barriers at the end: {left}"


def test_replay_catches_unbalanced_and_deadlocked_turns():
    # two warpgroups: one opening arrival too many, then a missing one (deadlock)
    turn = [("sync", 2, 256), ("arrive", 3, 256)]
    other = [("sync", 3, 256), ("arrive", 2, 256)]
    replay_barriers({0: turn + [("sync", 2, 256)], 1: [("arrive", 2, 256)] + other})
    with pytest.raises(AssertionError, match="unbalanced"):
        replay_barriers({0: turn, 1: [("arrive", 2, 256)] + other})
    with pytest.raises(AssertionError, match="deadlock"):
        replay_barriers({0: turn, 1: other})
    with pytest.raises(AssertionError, match="twice"):
        replay_barriers({0: [("arrive", 3, 256)] * 2, 1: [("sync", 3, 256)] * 2})


# ------------------------------------------------------------------------- structure
def test_register_split_for_three_consumer_warpgroups():
    # 384 consumers + 128 producer threads: min(240, (65536 - 128 * 24) // 384 // 8 * 8)
    assert ws.register_split(384) == (160, 24)
    assert ws.register_split(256) == (240, 24)
    assert 384 * 160 + 128 * 24 <= 65536


@pytest.mark.parametrize("bn", [64, 128, 176])
@pytest.mark.parametrize("causal", [False, True])
def test_192_row_blocks_are_specialized_and_ordered(bn, causal):
    lowered = pipeline.lower(_fa(causal, 4096, bn, batch=4, heads=16), SM90A)
    text = str(lowered)
    notes = _notes(lowered)
    assert 'T.launch_thread("threadIdx.x", 512)' in text
    assert "tl::set_max_nreg<160, 1>" in text and "tl::set_max_nreg<24, 0>" in text
    assert any("warp-specialized (producer warpgroup: threads 384..511" in n for n in notes)
    assert any("consumer software-pipelined" in n for n in notes), notes
    # the epilogue acc_o -> O_shared -> Output: staged in a swizzled tile (stmatrix) in a
    # stage buffer's bytes instead of the row-major O_shared, then one TMA store
    assert any("TMA store, 1 box(es) of 192x64, swizzle SWIZZLE_128B" in n for n in notes)
    assert any("stmatrix" in n and "in place of O_shared" in n for n in notes), notes
    assert "O_shared" not in text.split("tl.layouts")[-1].split("T.launch_thread")[-1]
    # one m64 instruction per warpgroup and k16 step: Q @ K^T from shared memory, P @ V
    # with P in registers (the accumulator's rows are the register-A rows)
    assert set(re.findall(r"tl::wgmma_m64n\d+k16_[rs]s", text)) == {
        f"tl::wgmma_m64n{bn}k16_ss",
        "tl::wgmma_m64n64k16_rs",
    }
    # warpgroup w reads rows 64 w .. 64 w + 63 of Q (8 row groups of the 128B swizzle); w
    # read from lane 0 (tl.wgmma_uniform_warpgroup: nvcc keeps the descriptors uniform)
    assert '"__shfl_sync", T.uint32(4294967295), tx // 128, 0, ty=T.int32) % 3 * 8 * 512' in text
    # fragments over the 384 consumer threads; the row max/sum reduce over the 4 lanes of
    # a quad only (shfl.xor 1 and 2): a row never leaves its warp, let alone its warpgroup
    assert "thread: 384," in str(lowered.attrs["tl.layouts"]["acc_s"])
    offsets = set(re.findall(r"__shfl_xor_sync\", T.uint32\(4294967295\), \w+\[\w+\], (\d+)", text))
    assert offsets == {"1", "2"}, offsets
    assert "mma_m16n8k16" not in text


# ------------------------------------------------------------------------- emulated
@pytest.mark.parametrize(
    "bn,dim,causal,seq",
    [
        (128, 64, False, 300),
        (128, 64, True, 300),
        (128, 64, True, 400),  # rows of the second block fully masked in its last K block
        (64, 64, False, 257),
        (64, 64, True, 300),
        (176, 64, False, 400),
        (176, 64, True, 400),
        (128, 128, False, 300),
        (128, 128, True, 257),
        (128, 64, False, 100),  # one K block: prologue and epilogue only, rows past seq
    ],
)
def test_192_row_blocks_emulated(bn, dim, causal, seq, rng):
    B, H = 1, 2
    lowered = pipeline.lower(_fa(causal, seq, bn, dim, B, H), SM90A)
    q, k, v = (rng.standard_normal((B, seq, H, dim)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)
    if seq > bn:
        assert m.max_pending == 2  # Q @ K^T of k and P @ V of k-1 in flight together
    replay_blocks(m, 3)


@pytest.mark.parametrize("causal", [False, True])
def test_192_row_blocks_bhsd_and_gqa_examples_emulated(causal, rng):
    """The bhsd example (seq_kv > seq_q: causal aligned on the right) and the GQA one."""
    import torch

    bhsd = _example(BHSD)
    sq, skv, D = 250, 330, 64
    tir = bhsd.flashattn.get_tir(
        1, 2, sq, skv, D, causal, block_M=192, block_N=128, num_stages=2, threads=384
    )
    q = rng.standard_normal((1, 2, sq, D)).astype(np.float16)
    k, v = (rng.standard_normal((1, 2, skv, D)).astype(np.float16) for _ in range(2))
    (_, _, _, o), _ = emulate_traced(pipeline.lower(tir, SM90A), q, k, v, np.full_like(q, np.nan))
    want = bhsd.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), causal).numpy()
    np.testing.assert_allclose(o, want, rtol=1e-2, atol=2e-3)

    gqa = _example(GQA)
    S, H, G = 300, 4, 2
    tir = gqa.flashattn.get_tir(
        1, H, S, D, causal, groups=G, block_M=192, block_N=128, num_stages=2, threads=384
    )
    q = rng.standard_normal((1, S, H, D)).astype(np.float16)
    k, v = (rng.standard_normal((1, S, H // G, D)).astype(np.float16) for _ in range(2))
    (_, _, _, o), _ = emulate_traced(pipeline.lower(tir, SM90A), q, k, v, np.full_like(q, np.nan))
    want = gqa.ref_program(*(torch.from_numpy(x) for x in (q, k, v)), causal, G).numpy()
    np.testing.assert_allclose(o, want, rtol=1e-2, atol=2e-3)


# ------------------------------------------------------------------------- ping-pong
def _steady_loop(text):
    m = re.search(r"\n( +)for k in range\(1, .*?\n(?=\1\S)", text, re.S)
    assert m, text
    return m.group(0)


def test_three_warpgroup_turns_in_the_ordered_loop():
    """Round robin: w waits on 2 + w before Q @ K^T of k, hands over on 2 + (w + 1) % 3
    after issuing P @ V of k-1; warpgroup 2 opens (warpgroup 0 goes first), warpgroup 0
    closes; none of the ids is the consumers' barrier 1."""
    lowered = pipeline.lower(_fa(True, 4096, batch=4, heads=16), SM90A)  # on by default
    text = str(lowered)
    assert any("take turns" in n and "3 warpgroups round robin" in n for n in _notes(lowered))
    assert str(pipeline.lower(_fa(True, 4096, batch=4, heads=16), SM90A, PINGPONG)) == text
    off = str(pipeline.lower(_fa(True, 4096, batch=4, heads=16), SM90A, NOPP))
    assert "ws_turn" not in off
    loop = _steady_loop(text)
    turn = loop.index('"tl::ws_turn_wait", 2 + tx // 128, T.uint32(256)')
    give = loop.index('"tl::ws_turn_arrive", 2 + (tx // 128 + 1) % 3, T.uint32(256)')
    qk, pv = loop.index("wgmma_m64n128k16_ss"), loop.index("wgmma_m64n64k16_rs")
    assert turn < qk < pv < loop.rindex("wgmma_commit") < give < loop.index("wgmma_wait<1>")
    head, tail = text.split(loop)
    assert head.count("ws_turn") == 1 and tail.count("ws_turn") == 1
    assert re.search(r'if tx // 128 == 2:\n\s+T.call_extern\("tl::ws_turn_arrive", 2,', head)
    assert re.search(r'if tx // 128 == 0:\n\s+T.call_extern\("tl::ws_turn_wait", 2,', tail)
    assert '"tl::named_barrier_sync", T.uint32(1), T.uint32(384)' in text


@pytest.mark.parametrize("own_id,turns", [(3, False), (7, True)])
def test_turns_skip_barrier_ids_the_kernel_uses(own_id, turns):
    """A program whose own named barrier has an id of the turns (2, 3, 4) keeps no turns,
    with a note saying why; another id does not get in the way."""
    import tilelang.language as T

    M, N1, N2, K, bM, bN = 192, 256, 64, 64, 192, 64

    @T.prim_func
    def main(Q: T.Tensor((M, K), "float16"), Kt: T.Tensor((N1, K), "float16"),
             V: T.Tensor((N1, N2), "float16"), O: T.Tensor((M, N2), "float32")):  # fmt: skip
        with T.Kernel(1, threads=384):
            Q_s = T.alloc_shared((bM, K), "float16")
            K_s = T.alloc_shared((bN, K), "float16")
            V_s = T.alloc_shared((bN, N2), "float16")
            S = T.alloc_fragment((bM, bN), "float32")
            P = T.alloc_fragment((bM, bN), "float16")
            acc = T.alloc_fragment((bM, N2), "float32")
            T.copy(Q[0, 0], Q_s)
            T.clear(acc)
            T.named_barrier_sync(own_id, 384)
            for k in T.Pipelined(N1 // bN, num_stages=2):
                T.copy(Kt[k * bN, 0], K_s)
                T.copy(V[k * bN, 0], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True)
                T.copy(S, P)
                T.gemm(P, V_s, acc)
            T.copy(acc, O[0, 0])

    notes = _notes(pipeline.lower(main, SM90A, PINGPONG))
    assert any("warp-specialized" in n for n in notes), notes
    assert any("take turns" in n for n in notes) == turns, notes
    assert any("no ping-pong turns" in n and "[2, 3, 4]" in n for n in notes) != turns, notes


@pytest.mark.parametrize(
    "path,causal,seq,bn",
    [
        (PLAIN, False, 300, 128),
        (PLAIN, True, 400, 128),
        (PLAIN, True, 300, 64),
        (PLAIN, False, 100, 128),  # no steady-state iteration: open and close only
        (PIPELINED, False, 500, 128),
    ],
)
def test_three_warpgroup_turns_emulated(path, causal, seq, bn, rng):
    B, H, D = 1, 1, 64
    lowered = pipeline.lower(_fa(causal, seq, bn, D, B, H, path=path), SM90A)
    assert "ws_turn_wait" in str(lowered)
    q, k, v = (rng.standard_normal((B, seq, H, D)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)
    steady = -(-seq // bn) - 1  # iterations of the steady-state loop (non-causal)
    for trace in m.traces.values():
        for w in range(3):
            # one turn per steady-state iteration, plus the opening (warpgroup 2 hands
            # warpgroup 0 the first turn) and the closing wait (warpgroup 0)
            waits = trace[w].count(("sync", 2 + w, 256))
            gives = trace[w].count(("arrive", 2 + (w + 1) % 3, 256))
            assert gives == waits - (w == 0) + (w == 2)
            if not causal:
                assert waits == steady + (w == 0)
    replay_blocks(m, 3, seed=seq)


@pytest.mark.parametrize("causal", [False, True])
def test_four_warpgroup_turns_emulated(causal, rng):
    """The round robin is not special to three: 256-row blocks on four warpgroups (512
    consumer threads, barriers 2..5) match float64 and replay without deadlock."""
    lowered = pipeline.lower(_fa(causal, 300, bm=256, threads=512), SM90A)
    assert any("4 warpgroups round robin" in n for n in _notes(lowered))
    assert '"tl::ws_turn_arrive", 2 + (tx // 128 + 1) % 4' in str(lowered)
    q, k, v = (rng.standard_normal((1, 300, 1, 64)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan))
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)
    replay_blocks(m, 4)


@pytest.mark.parametrize("threads", [256, 384])
def test_turns_around_the_first_gemm_emulated(threads, rng):
    """The unordered loop's turns (the first gemm only) with two and three warpgroups."""
    M, N1, N2, K = 300, 256, 64, 64
    bm = threads // 2
    unordered = {**PINGPONG, "tl.wgmma_overlap": False}  # (else the derived order applies)
    lowered = pipeline.lower(chained(M, N1, N2, K, bm, 64, threads, 2), SM90A, unordered)
    assert any("turns at the first gemm" in n for n in _notes(lowered))
    q = _round(rng.standard_normal((M, K)) / 4, "float16")
    kt = _round(rng.standard_normal((N1, K)) / 4, "float16")
    v = _round(rng.standard_normal((N1, N2)), "float16")
    (_, _, _, o), m = emulate_traced(lowered, q, kt, v, np.full((M, N2), np.nan, np.float32))
    s = q.astype(np.float64) @ kt.astype(np.float64).T
    want = s.astype(np.float16).astype(np.float64) @ v.astype(np.float64)
    np.testing.assert_allclose(o, want, rtol=4e-3, atol=4e-3 * np.abs(want).max())
    replay_blocks(m, threads // 128)


# ------------------------------------------------------------------------- epilogue
def _staged_through_user_tile(second_reader):
    """O = cast(Q @ K^T) @ V written as ``T.copy(acc, O_s); T.copy(O_s, O)`` (the FA
    examples' epilogue); ``second_reader``: O_s is also copied to O2."""
    import tilelang.language as T

    M, N1, N2, K, bM, bN = 300, 256, 64, 64, 192, 64

    @T.prim_func
    def main(Q: T.Tensor((M, K), "float16"), Kt: T.Tensor((N1, K), "float16"),
             V: T.Tensor((N1, N2), "float16"), O: T.Tensor((M, N2), "float16"),
             O2: T.Tensor((M, N2), "float16")):  # fmt: skip
        with T.Kernel(T.ceildiv(M, bM), threads=384) as bx:
            Q_s = T.alloc_shared((bM, K), "float16")
            K_s = T.alloc_shared((bN, K), "float16")
            V_s = T.alloc_shared((bN, N2), "float16")
            O_s = T.alloc_shared((bM, N2), "float16")
            S = T.alloc_fragment((bM, bN), "float32")
            P = T.alloc_fragment((bM, bN), "float16")
            acc = T.alloc_fragment((bM, N2), "float32")
            T.copy(Q[bx * bM, 0], Q_s)
            T.clear(acc)
            for k in T.Pipelined(N1 // bN, num_stages=2):
                T.copy(Kt[k * bN, 0], K_s)
                T.copy(V[k * bN, 0], V_s)
                T.clear(S)
                T.gemm(Q_s, K_s, S, transpose_B=True)
                T.copy(S, P)
                T.gemm(P, V_s, acc)
            T.copy(acc, O_s)
            T.copy(O_s, O[bx * bM, 0])
            if second_reader:
                T.copy(O_s, O2[bx * bM, 0])

    return main


@pytest.mark.parametrize("second_reader", [False, True])
@pytest.mark.parametrize("configs", [None, {"tl.tma_store_epilogue": False}])
def test_user_tile_epilogue_staged_emulated(second_reader, configs, rng):
    """``T.copy(fragment -> O_s); T.copy(O_s -> global)`` with a row-major ``O_s`` named
    nowhere else is staged like ``T.copy(fragment -> global)`` (swizzled, stmatrix, one TMA
    store; ``O_s`` dropped); kept as written when ``O_s`` has another reader or with
    ``tl.tma_store_epilogue = False``. Both against float64, race check on."""
    lowered = pipeline.lower(_staged_through_user_tile(second_reader), SM90A, configs)
    notes = _notes(lowered)
    staged = not second_reader and configs is None
    assert any("in place of O_s" in n for n in notes) == staged, notes
    assert ("O_s = " in str(lowered)) != staged
    M, N1, N2, K = 300, 256, 64, 64
    q = _round(rng.standard_normal((M, K)) / 4, "float16")
    kt = _round(rng.standard_normal((N1, K)) / 4, "float16")
    v = _round(rng.standard_normal((N1, N2)) / 4, "float16")
    o, o2 = np.full((M, N2), np.nan, np.float16), np.full((M, N2), np.nan, np.float16)
    (_, _, _, o, o2), _ = emulate_traced(lowered, q, kt, v, o, o2, race=True)
    s = q.astype(np.float64) @ kt.astype(np.float64).T
    want = s.astype(np.float16).astype(np.float64) @ v.astype(np.float64)
    np.testing.assert_allclose(o, want, rtol=1e-2, atol=1e-2)
    if second_reader:
        np.testing.assert_array_equal(o2, o)


# ------------------------------------------------------------------------- per-warp release
def test_per_warp_release_structure():
    """``tl.ws_release_per_warp``: the empty barriers count the 12 consumer warps, each warp
    hands a stage back with one arrival; off by default."""
    lowered = pipeline.lower(_fa(True, 4096, batch=4, heads=16), SM90A, PER_WARP)
    text = str(lowered)
    assert any("one release per consumer warp" in n for n in _notes(lowered))
    empties = re.findall(
        r'"tl::mbarrier_init", T.address_of\(tma_empty\w+\[\d\]\), T.uint32\((\d+)\)', text
    )
    assert empties and set(empties) == {"12"}
    assert '"tl::mbarrier_arrive_warp"' in text and '"tl::mbarrier_arrive",' not in text
    plain = str(pipeline.lower(_fa(True, 4096, batch=4, heads=16), SM90A))
    assert "mbarrier_arrive_warp" not in plain and "T.uint32(384)" in plain


@pytest.mark.parametrize(
    "causal,seq,configs",
    [(False, 300, PER_WARP), (True, 400, PER_WARP), (True, 300, {**PER_WARP, **NOPP})],
)
def test_per_warp_release_emulated(causal, seq, configs, rng):
    """Against float64 with the race check on (a stage handed back before a warp's last
    read of it would be overwritten by the producer's next TMA load)."""
    lowered = pipeline.lower(_fa(causal, seq, batch=1, heads=2), SM90A, configs)
    q, k, v = (rng.standard_normal((1, seq, 2, 64)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan), race=True)
    np.testing.assert_allclose(o, _attention(q, k, v, causal), rtol=1e-2, atol=2e-3)
    replay_blocks(m, 3)


def test_per_warp_release_after_generic_reads_emulated(rng):
    """A stage also read by element loads (generic proxy): every thread's fence, then its
    warp's one arrival (``test_warp_specialize.py``'s kernel), against float64."""
    from test_warp_specialize import _gemm_reading_a_tile

    lowered = pipeline.lower(_gemm_reading_a_tile("parallel"), SM90A, PER_WARP)
    text = str(lowered)
    assert "generic-proxy stage reads" in text and "one release per consumer warp" in text
    lines = [x.strip() for x in text.splitlines()]
    arrives = [i for i, x in enumerate(lines) if '"tl::mbarrier_arrive_warp"' in x]
    assert arrives and all("tl::fence_proxy_async_shared" in lines[i - 1] for i in arrives)
    a = _round(rng.standard_normal((256, 256)), "float16")
    b = _round(rng.standard_normal((256, 256)), "float16")
    c = np.full((256, 256), np.nan, np.float32)
    s = np.zeros((256, 64), np.float32)
    (_, _, c, s), _ = emulate_traced(lowered, a, b, c, s, race=True)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(c, a64 @ b64, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(s, a64.reshape(256, 4, 64).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("configs", [{}, PER_WARP])
def test_192_row_blocks_persistent_emulated(configs, monkeypatch, rng):
    """``tl.persistent_tiles``: one block walks every 192-row tile (rings, turns and the
    staged epilogue running on across tiles), against float64 with the race check."""
    monkeypatch.setenv("TILELANG_EMULATOR_SM_COUNT", "1")
    cfg = {"tl.persistent_tiles": True, **configs}
    lowered = pipeline.lower(_fa(False, 400, batch=2, heads=1), SM90A, cfg)
    notes = _notes(lowered)
    assert any("tiles = 3 x 1 x 2 = 6" in n for n in notes), notes
    assert any("in place of O_shared" in n for n in notes), notes
    q, k, v = (rng.standard_normal((2, 400, 1, 64)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan), race=True)
    np.testing.assert_allclose(o, _attention(q, k, v, False), rtol=1e-2, atol=2e-3)
    replay_blocks(m, 3)


# ------------------------------------------------------------------------- benchmark
def _benchmark():
    import importlib.util

    path = Path(__file__).resolve().parents[4] / "benchmark" / "flash_attention.py"
    spec = importlib.util.spec_from_file_location("fa_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_configs_parse():
    """``--configs 192x128/384/2`` is (block_M, block_N, stages, threads); a malformed one
    is an argparse error naming the expected form; at head dim 64 the default list starts
    with the 192-row tile."""
    import argparse

    bench = _benchmark()
    assert bench.parse_config("192x128/384/2") == (192, 128, 2, 384)
    assert bench.CONFIGS_D64[0] == (192, 128, 2, 384)
    for bad in ["192x128/384", "192/384/2", "192xa/384/2", "0x128/384/2", "192x128/100/2"]:
        with pytest.raises(argparse.ArgumentTypeError, match="192x128/384/2|multiple of 32"):
            bench.parse_config(bad)


# ------------------------------------------------------------------------- nvcc
@needs_nvcc
@pytest.mark.parametrize(
    "bn,dim,causal,configs",
    [
        (128, 64, False, None),
        (128, 64, True, None),
        (128, 64, False, NOPP),
        (128, 64, True, NOPP),
        (64, 64, False, None),
        (64, 128, False, None),
        (64, 128, True, NOPP),
        (128, 64, True, PER_WARP),
    ],
)
def test_192_row_blocks_compile_without_spills(bn, dim, causal, configs, tmp_path):
    """ptxas: no spills, no wgmma serialization: the consumer's 160 registers hold S and P
    of one 64-row slice plus O (block_N 176 or 192 at head dim 64, and 128 at head dim
    128, hold more than 160 live registers in the overlapped loop and spill: not listed)."""
    from test_gemm_wgmma import ptxas_report

    func = _fa(causal, 4096, bn, dim, batch=4, heads=16)
    art = pipeline.build(func, SM90A, pass_configs=configs, compiler="nvcc")
    rep = ptxas_report(art.get_kernel_source(), tmp_path)
    assert rep["spill"] == 0 and rep["stack"] == 0, rep["log"]
    assert "serialized" not in rep["log"], rep["log"]
    assert "setmaxnreg.inc.sync.aligned.u32 160;" in rep["ptx"]
    assert "wgmma.wait_group.sync.aligned 1;" in rep["ptx"]


# ------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "bn,dim,configs",
    [
        (128, 64, None),
        (128, 64, NOPP),
        (64, 64, None),
        (176, 64, None),
        (128, 128, None),
        (64, 128, NOPP),
        (128, 64, PER_WARP),
        (128, 64, {**PER_WARP, **NOPP}),
        (128, 64, {"tl.persistent_tiles": True}),
    ],
)
@pytest.mark.parametrize("seq", [1000, 4096])
def test_192_row_blocks_gpu(bn, dim, configs, causal, seq):
    import tilelang

    torch = _gpu()
    B, H = 2, 4
    kernel = tilelang.compile(
        _fa(causal, seq, bn, dim, B, H), out_idx=[3], target="cuda", pass_configs=configs
    )
    q, k, v = (torch.randn(B, seq, H, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    for _ in range(2):  # a second launch: barriers and phases start fresh
        out = kernel(q, k, v)
        torch.cuda.synchronize()
        ref = _example(PLAIN).ref_program(q, k, v, causal)
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)


def test_replay_catches_turns_without_the_opening(monkeypatch, rng):
    """Without warpgroup 2's opening arrival every warpgroup waits for its turn forever."""
    monkeypatch.setattr(ws._Turns, "open", lambda self, arrive: [])
    lowered = pipeline.lower(_fa(False, 300, batch=1, heads=1), SM90A)
    q, k, v = (rng.standard_normal((1, 300, 1, 64)).astype(np.float16) for _ in range(3))
    (_, _, _, o), m = emulate_traced(lowered, q, k, v, np.full_like(q, np.nan))
    with pytest.raises(AssertionError, match="deadlock"):
        replay_blocks(m, 3)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["plain", "parallel"])
def test_per_warp_release_gemm_gpu(mode):
    """``tl.ws_release_per_warp`` on a wgmma GEMM whose stage is also read by element loads
    (fenced release), repeated launches, against float64."""
    from test_warp_specialize import _gemm_reading_a_tile

    import tilelang

    torch = _gpu()
    kern = tilelang.compile(_gemm_reading_a_tile(mode), target="cuda", pass_configs=PER_WARP)
    a, b = (torch.randn(256, 256, dtype=torch.float16, device="cuda") for _ in range(2))
    c = torch.full((256, 256), float("nan"), device="cuda")
    s = torch.zeros(256, 64, device="cuda")
    for _ in range(3):
        kern(a, b, c, s)
        torch.cuda.synchronize()
        torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3)
        if mode == "parallel":
            want = a.double().reshape(256, 4, 64).sum(1)
            torch.testing.assert_close(s.double(), want, rtol=1e-4, atol=1e-4)
