"""The synchronisation schedule of the cluster-multicast GEMM (pass config
``tl.cluster_multicast_sync``, ``backends/cuda/passes/cluster_multicast.py``): ``"cta"``
(default, CUTLASS's ``PipelineTmaAsync``: plain remote arrivals and CTA-scope waits in the
main loop, a relaxed publishing barrier, a closing cluster barrier each branch arrives on
after its loop, TMA-store epilogue) against ``"cluster"`` (the first schedule: cluster-scope
release/acquire in every iteration, full cluster barriers, register-store epilogue).
Checked on the lowered IR, on the SASS of nvcc builds (what each main-loop iteration
executes), by the emulator against float64, and, marked ``cuda``, on the GPU."""

from __future__ import annotations

import functools
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_programs import readme_gemm  # noqa: E402
from test_gemm_wgmma_emulation import emulate_wgmma  # noqa: E402
from test_tma import _sass  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
SCHEDULES = ["cta", "cluster"]


#: The README GEMM (fp16 inputs, float32 accumulation, C in ``out``), blockIdx.x walking N
#: so the two blocks of a cluster share the A tile; ``T.use_swizzle(10)``.
gemm = functools.partial(readme_gemm, bN=256, threads=256, out="float16", swizzle=10)


def _configs(sync, size=2, **extra):
    return {"tl.cluster_multicast": size, "tl.cluster_multicast_sync": sync, **extra}


# ------------------------------------------------------------------------ lowered IR
@pytest.mark.parametrize("sync", SCHEDULES)
def test_schedule_ir(sync):
    f = pipeline.lower(gemm(1024, 1024, 1000), SM90A, _configs(sync))
    text = str(f)
    split = text.index("if tx < 256:")
    consumer, producer = text[split:].split("if tx == 256:")
    loop_end = consumer.index("tl::wgmma_wait<0>")
    assert "tl::tma_load_multicast_2d" in producer
    if sync == "cta":
        assert '"tl::mbarrier_wait", T.address_of(tma_empty_k[' in producer
        assert "tl::mbarrier_arrive_cluster_warp<2>" in consumer[:loop_end]
        assert "cluster_warp_release" not in text and "tl::cluster_sync" not in text
        # publishing: relaxed arrive + wait before the split; closing: each branch arrives
        # once its loop is done (the consumers before their epilogue), one wait at the end
        head = text[:split]
        assert head.index("tl::mbarrier_init_fence") < head.index("tl::cluster_arrive_relaxed")
        assert head.index("tl::cluster_arrive_relaxed") < head.index('"tl::cluster_wait"')
        arrive = consumer.index('"tl::cluster_arrive"')
        assert loop_end < arrive < consumer.index("tl::tma_store_2d")  # staged epilogue
        assert producer.count('"tl::cluster_arrive"') == 1
        assert text.rstrip().endswith('T.call_extern("tl::cluster_wait", ty=T.void)')
    else:
        assert '"tl::mbarrier_wait_cluster", T.address_of(tma_empty_k[' in producer
        assert "tl::mbarrier_arrive_cluster_warp_release<2>" in consumer[:loop_end]
        assert text.count('T.call_extern("tl::cluster_sync"') == 2
        assert "tl::cluster_arrive" not in text and "tl::tma_store_2d" not in text
        notes = [str(n) for n in f.attrs["tl.tma"]]
        assert any("register stores (tl.cluster_multicast_sync='cluster')" in n for n in notes)


def test_schedule_config_is_checked():
    with pytest.raises(ValueError, match="tl.cluster_multicast_sync"):
        pipeline.lower(gemm(1024, 1024, 256), SM90A, _configs("gpu"))


# ----------------------------------------------------------------------------- SASS
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_BACK = re.compile(r"(?<![.\w])BRA\s+0x([0-9a-f]+)")


def main_loops(sass):
    """(consumer, producer) main-loop bodies of a warp-specialized GEMM's SASS, each the
    smallest backward-branch range that holds HGMMAs / UTMALDGs (lists of instructions)."""
    ins = [(int(a, 16), txt.strip()) for a, txt in _INSTR.findall(sass)]
    ranges = []
    for addr, txt in ins:
        m = _BACK.search(txt)
        if m and int(m.group(1), 16) < addr:
            ranges.append((addr - int(m.group(1), 16), int(m.group(1), 16), addr))
    bodies = [[t for a, t in ins if lo <= a <= hi] for _, lo, hi in sorted(ranges)]
    consumer = next(b for b in bodies if any("HGMMA" in t for t in b))
    producer = next(b for b in bodies if any("UTMALDG" in t for t in b))
    return consumer, producer


def per_iteration(body):
    """Instruction counts of a loop body per iteration (one mbarrier try-wait each)."""
    n = sum("SYNCS.PHASECHK" in t for t in body)

    def count(word):
        return sum(word in t for t in body) / n

    return {
        "instructions": len(body) / n,
        "membar_gpu": count("MEMBAR.ALL.GPU"),
        "membar": count("MEMBAR"),
        "errbar": count("ERRBAR"),
        "cctl": count("CCTL.IVALL"),
        "arrive": count("SYNCS.ARRIVE.TRANS64.RED") + count("SYNCS.ARRIVE.TRANS64.A1T0"),
        "multicast": count("UTMALDG.2D.MULTICAST"),
    }


def _build_sass(configs):
    art = pipeline.build(gemm(4096, 4096, 4096), SM90A, configs, compiler="nvcc")
    return art, _sass(art)


def test_sass_main_loops_have_no_cluster_scope_fences():
    """The README GEMM at 4096 (128x256x64, 256 threads, 3 stages): with the default
    schedule neither main loop holds a fence (the first schedule put MEMBAR.ALL.GPU +
    ERRBAR + CGAERRBAR before every consumer warp's stage release and CCTL.IVALL after
    every producer wait: both are checked to be found there, so this test can fail); each
    iteration releases its stage with one remote arrive per consumer warp and costs a few
    instructions more than the one-block kernel's."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    base_art, base = _build_sass({"tl.persistent_tiles": False})  # one tile per block, as they
    new_art, new = _build_sass(_configs("cta"))
    _, old = _build_sass(_configs("cluster"))
    assert "__cluster_dims__(2, 1, 1)" in new_art.kernel_source
    assert "__cluster_dims__" not in base_art.kernel_source
    stats = {}
    for name, sass in (("base", base), ("cta", new), ("cluster", old)):
        consumer, producer = main_loops(sass)
        stats[name] = per_iteration(consumer), per_iteration(producer)
    (c_new, p_new), (c_old, p_old), (c_base, p_base) = stats["cta"], stats["cluster"], stats["base"]
    # the first schedule: fences in every iteration
    assert c_old["membar_gpu"] >= 1 and c_old["errbar"] >= 2 and p_old["cctl"] >= 1
    # the default one: none, in either loop
    for s in (c_new, p_new):
        assert s["membar"] == s["errbar"] == s["cctl"] == 0, stats
    assert c_new["arrive"] == 1 and p_new["multicast"] == 1 and p_base["multicast"] == 0
    assert c_new["instructions"] <= c_base["instructions"] + 12, stats
    assert p_new["instructions"] <= p_base["instructions"] + 16, stats
    # the closing cluster barrier: one arrive per branch, one wait (the old: one of each)
    assert new.count("UCGABAR_ARV") == 3 and new.count("UCGABAR_WAIT") == 2
    assert old.count("UCGABAR_ARV") == 2 and old.count("UCGABAR_WAIT") == 2
    assert "UTMASTG" in new and "UTMASTG" not in old  # the staged TMA-store epilogue


# ----------------------------------------------------------------------- emulated
def _emulate(func, M, N, K, configs, out, seed=0):
    lowered = pipeline.lower(func, SM90A, configs)
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, size=(M, K)).astype(np.float16)
    b = rng.integers(-3, 4, size=(K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, out)
    (_, _, c), _ = emulate_wgmma(lowered, a, b, c, mode="late_writes")
    return lowered, c, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("sync", SCHEDULES)
@pytest.mark.parametrize(
    "M,N,K,bN,threads,size,swizzle",
    [
        (136, 256, 200, 64, 128, 2, 0),  # the staging tile reuses the multicast A stages
        (200, 200, 136, 64, 128, 2, 0),  # tails in M, N and K
        (136, 512, 72, 64, 128, 4, 0),  # 4-block clusters
        (264, 256, 136, 64, 128, 2, 3),  # swizzled clusters
        (136, 256, 136, 128, 256, 2, 0),  # two consumer warpgroups
    ],
)
def test_emulated_schedules_exact(sync, M, N, K, bN, threads, size, swizzle):
    """Both schedules, exact against float64 (small integers): float32 output staged through
    a reused stage buffer by the default schedule (``tl.tma_store_epilogue=True``), with
    register stores by the first one; the peers run as cooperative tasks, so a staging
    write that a peer's multicast could still overwrite would show."""
    func = gemm(M, N, K, bN=bN, threads=threads, out="float32", swizzle=swizzle)
    configs = _configs(sync, size, **{"tl.tma_store_epilogue": True})
    lowered, c, want = _emulate(func, M, N, K, configs, np.float32)
    assert f"tl::cluster_dims<{size}, 1, 1>" in str(lowered)
    assert ("tl::tma_store_2d" in str(lowered)) == (sync == "cta")
    np.testing.assert_array_equal(c, want)


def test_emulated_fp16_output_staged_with_stmatrix():
    """The README's fp16 output (staged by default): ``stmatrix`` into a stage buffer, one
    TMA store per 64 columns, in 2-block clusters; exact (small integer sums fit fp16)."""
    M, N, K = 264, 512, 136
    lowered, c, want = _emulate(gemm(M, N, K), M, N, K, _configs("cta"), np.float16)
    text = str(lowered)
    assert "ptx_stmatrix" in text and "tl::tma_store_2d" in text
    np.testing.assert_array_equal(c.astype(np.float64), want)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.cuda
@pytest.mark.parametrize("sync", SCHEDULES)
@pytest.mark.parametrize("size", [2, 4])
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 2048, 1000), (520, 1024, 776)])
def test_schedules_match_torch_gpu(sync, size, shape):
    """The README GEMM (fp16 out, swizzle 10) in clusters of 2 and 4 under both schedules,
    launched three times (every launch forms clusters and ends cleanly)."""
    import torch

    import tilelang

    M, N, K = shape
    kern = tilelang.compile(gemm(M, N, K), target="cuda", pass_configs=_configs(sync, size))
    assert "tl::tma_load_multicast_2d" in kern.get_kernel_source()
    for _ in range(3):
        a = torch.randn((M, K), device="cuda", dtype=torch.float16)
        b = torch.randn((K, N), device="cuda", dtype=torch.float16)
        c = torch.empty((M, N), device="cuda", dtype=torch.float16)
        kern(a, b, c)
        want = (a.double() @ b.double()).half().double()
        torch.testing.assert_close(c.double(), want, rtol=2e-2, atol=1e-1)


def test_attention_chain_uses_the_default_schedule():
    """The FlashAttention gemm chain (K and V multicast, one mbarrier ring per copy under
    the ordered consumer): every ring's releases are CTA-scope remote arrivals, the waits
    CTA-scope, and the closing barrier is split (its emulated run: test_cluster_multicast)."""
    from test_gemm_wgmma_rs import chained

    f = pipeline.lower(
        chained(200, 256, 96, 64, 128, 128, 256, 3, "float16"), SM90A, _configs("cta")
    )
    text = str(f)
    assert text.count("tl::tma_load_multicast_2d") >= 2
    assert "tl::mbarrier_arrive_cluster_warp<2>" in text
    assert "mbarrier_wait_cluster" not in text and "cluster_warp_release" not in text
    assert text.count('"tl::cluster_arrive"') == 2 and "tl::cluster_sync" not in text
    assert text.rstrip().endswith('T.call_extern("tl::cluster_wait", ty=T.void)')
