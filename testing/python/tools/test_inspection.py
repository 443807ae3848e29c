"""tilelang.lower stages, IR dumps, pass timing, ir_diff, and run_stages' contract."""

from __future__ import annotations

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.engine.instrument import run_stages, session
from tilelang.tools import ir_diff


@pytest.fixture(autouse=True)
def clean(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("TILELANG_DISABLE_CACHE", "TILELANG_DUMP_IR", "TILELANG_PASS_TIMING"):
        monkeypatch.delenv(name, raising=False)
    tilelang.cache.clear_cache()
    yield
    tilelang.cache.clear_cache()


def plus_one(n=128, block=32):
    @T.prim_func
    def plus_one_kernel(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=32) as bx:
            tile = T.alloc_shared((block,), "float32")
            T.copy(A[bx * block], tile)
            for i in T.Parallel(block):
                tile[i] = tile[i] + 1.0
            T.copy(tile, B[bx * block])

    return plus_one_kernel


# stages the CPU pipeline must have, in this order (others may sit between them)
CPU_STAGES = ["trace", "lower_threads", "lower_tile_ops", "lower_blocks"]


def _tilelang_stages(lowered):
    return [n for n in lowered.names() if lowered.origins[n] == "tilelang"]


def test_lower_returns_every_stage():
    lowered = tilelang.lower(plus_one(), target="cpu")
    names = lowered.names()
    ours = _tilelang_stages(lowered)
    assert names[: len(ours)] == ours  # tilelang's stages, then TIRx's passes
    assert [n for n in ours if n in CPU_STAGES] == CPU_STAGES
    assert names[-1] == "source"
    tirx = [n for n in names if lowered.origins[n] == "tirx"]
    assert any(n.startswith("tirx.") for n in tirx)
    assert "tl.copy" in lowered["trace"]
    assert "tl.copy" in lowered["lower_threads"]
    assert "tl.copy" not in lowered["lower_tile_ops"]
    assert "blockIdx" not in lowered["lower_blocks"]
    assert lowered.kernel_source == lowered.artifact.kernel_source
    assert all(lowered.seconds[n] >= 0 for n in names)
    assert "lower_tile_ops" in lowered.timing_table()
    with pytest.raises(KeyError, match="no stage 'nope'"):
        lowered.ir("nope")


def test_diff_between_stages():
    lowered = tilelang.lower(plus_one(), target="cpu")
    diff = lowered.diff("lower_threads", "lower_tile_ops")
    assert diff.startswith("--- lower_threads\n+++ lower_tile_ops\n")
    assert any(line.startswith("-") and "tl.copy" in line for line in diff.splitlines())
    assert ir_diff(lowered.ir("trace"), lowered.ir("trace")) == ""
    assert ir_diff("a\nb\n", "a\nc\n", context=0) == "--- a\n+++ b\n@@ -2 +2 @@\n-b\n+c\n"


def _dump_files(folder):
    (kernel_dir,) = [p for p in folder.iterdir() if p.is_dir()]
    assert kernel_dir.name.startswith("plus_one_kernel-")
    return sorted(p.name for p in kernel_dir.iterdir())


def test_dump_dir_env_var(tmp_path, monkeypatch):
    folder = tmp_path / "dump"
    monkeypatch.setenv("TILELANG_DUMP_IR", str(folder))
    kernel = tilelang.compile(plus_one(), out_idx=[-1], target="cpu")
    a = torch.randn(128)
    torch.testing.assert_close(kernel(a), a + 1)
    files = _dump_files(folder)
    ours = _tilelang_stages(tilelang.lower(plus_one(), target="cpu"))
    for k, name in enumerate(ours):
        assert f"{k:03d}_{name}.py" in files
    assert any(re.match(r"\d{3}_tirx\.", f) for f in files)
    assert len(files) > len(ours) + 5
    assert not (tmp_path / "cache" / "kernels").exists()  # observed builds skip the cache


def test_dump_dir_pass_config(tmp_path):
    folder = tmp_path / "dump2"
    configs = {tilelang.PassConfigKey.TL_DUMP_IR_DIR: str(folder)}
    tilelang.compile(plus_one(), out_idx=[-1], target="cpu", pass_configs=configs)
    files = _dump_files(folder)
    assert files[0] == "000_trace.py"
    (name,) = [f for f in files if f.endswith("_lower_tile_ops.py")]
    text = (next(folder.iterdir()) / name).read_text()
    assert text.startswith(f"# stage {int(name[:3])}: lower_tile_ops (tilelang)")
    assert "tl.copy" not in text


def test_pass_timing_table(capfd, monkeypatch):
    monkeypatch.setenv("TILELANG_PASS_TIMING", "1")
    tilelang.compile(plus_one(), out_idx=[-1], target="cpu")
    err = capfd.readouterr().err
    assert "tilelang pass timing: plus_one_kernel-" in err
    for name in CPU_STAGES[1:] + ["other (codegen, link, load)", "wall"]:
        assert name in err


def test_pass_timing_config_overrides_env(capfd, monkeypatch):
    monkeypatch.setenv("TILELANG_PASS_TIMING", "1")
    configs = {"tl.pass_profile": False}
    tilelang.compile(plus_one(), out_idx=[-1], target="cpu", pass_configs=configs)
    assert "pass timing" not in capfd.readouterr().err


def test_run_stages_contract():
    func = plus_one()
    assert run_stages(func, [("same", lambda f: f)]) is func
    with pytest.raises(TypeError, match="stage 'broken' returned None"):
        run_stages(func, [("broken", lambda f: None)])
    with pytest.raises(TypeError, match=r"expected \(name, fn\) pairs"):
        run_stages(func, [lambda f: f])

    def fail(f):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        run_stages(func, [("exploding", fail)])
    assert "(in pipeline stage 'exploding')" in info.value.__notes__


def test_session_records_stage_ir():
    func = plus_one()
    with session(record=True, func=func) as sess:
        out = run_stages(func, [("noop", lambda f: f), ("again", lambda f: f)])
    assert out is func
    assert [r.name for r in sess.records] == ["trace", "noop", "again"]
    assert sess.records[1].ir is func


def two_nests(n=100, block=64):
    @T.prim_func
    def two_nests_kernel(A: T.Tensor((n, 8), "float32"), B: T.Tensor((n, 8), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            frag = T.alloc_fragment((block, 8), "float32")
            row = T.alloc_fragment((block,), "float32")
            T.copy(A[bx * block, 0], frag)
            for i, j in T.Parallel(block, 8):
                frag[i, j] = frag[i, j] * 2.0
            for r in T.Parallel(block):  # (row is replicated over frag's two threads a row)
                row[r] = T.cast(r, "float32") * 0.5
            for i, j in T.Parallel(block, 8):
                frag[i, j] = frag[i, j] + row[i]
            T.copy(frag, B[bx * block, 0])

    return two_nests_kernel


def _loop_layouts(stage_ir: str) -> list:
    match = re.search(r'"tl\.loop_layouts": \[(.*?)\]\}', stage_ir)
    assert match, "no tl.loop_layouts attribute in the stage"
    return re.findall(r'"([^"]*)"', match.group(1))


def test_cuda_loop_layouts_dump_is_the_same_for_every_trace():
    """``tl.loop_layouts`` names each T.Parallel nest by ordinal and loop variables (not by an
    object handle), so two traces of one kernel dump the same text."""
    first, second = (
        tilelang.lower(two_nests(), target="cuda -arch=sm_80")["layout_inference"] for _ in range(2)
    )
    assert first == second
    entries = _loop_layouts(first)
    assert [e.split(":", 1)[0] for e in entries] == ["0 (i, j)", "1 (r)", "2 (i, j)"]
    assert all(e.split(": ", 1)[1].startswith("Fragment(") for e in entries)
