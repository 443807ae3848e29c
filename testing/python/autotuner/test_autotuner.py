"""@tilelang.autotune on the CPU: picks the faster config, checks, stores and reuses the best."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilelang
from tilelang.autotuner import AutoTuner, set_autotune_inputs

HERE = Path(__file__).resolve().parent
REPO = str(Path(tilelang.__file__).resolve().parents[1])  # subprocesses test this tilelang
sys.path.insert(0, str(HERE))
import tl_autotune_kernels as kernels  # noqa: E402

FAST, SLOW = {"work": 1}, {"work": 96}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(root))
    monkeypatch.setenv("TILELANG_AUTO_TUNING_PROGRESS", "0")
    for name in ("TILELANG_DISABLE_CACHE", "TILELANG_AUTO_TUNING_DISABLE_CACHE"):
        monkeypatch.delenv(name, raising=False)
    tilelang.cache.clear_cache()
    yield root
    tilelang.cache.clear_cache()


def _no_bench(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the stored best config should have been reused")

    monkeypatch.setattr(AutoTuner, "_bench", refuse)


def test_picks_the_faster_config_and_reuses_it(cache_dir, monkeypatch):
    tuned = kernels.tuned([SLOW, FAST])
    result = tuned.tune(16384)
    assert result.config == FAST
    assert not result.from_disk
    assert result.latency > 0
    kernel = tuned(16384)
    assert kernel is result.kernel and kernel.config == FAST
    a = torch.randn(16384)
    torch.testing.assert_close(kernel(a), a)
    (record,) = (cache_dir / "autotuner").glob("*.json")
    assert json.loads(record.read_text())["config"] == FAST

    # a fresh decorator, with the in-memory results forgotten, reuses the stored config: no benchmark
    tilelang.autotuner.clear_memory_cache()
    _no_bench(monkeypatch)
    again = kernels.tuned([SLOW, FAST]).tune(16384)
    assert again.from_disk and again.config == FAST
    torch.testing.assert_close(again.kernel(a), a)


def test_other_arguments_tune_again(cache_dir):
    tuned = kernels.tuned([SLOW, FAST])
    tuned.tune(16384)
    tuned.tune(8192)
    assert len(list((cache_dir / "autotuner").glob("*.json"))) == 2


def test_reference_check_rejects_wrong_configs(cache_dir):
    wrong = {"work": 1, "bias": 1.0}
    tuned = kernels.tuned([wrong, SLOW], skip_check=False, ref_prog=lambda a: a)
    result = tuned.tune(4096)
    assert result.config == SLOW
    assert "benchmark" in result.failures[0]
    assert result.ref_latency is not None


def test_a_compile_past_the_timeout_is_rejected_not_waited_for(cache_dir, monkeypatch):
    import threading
    import time

    from tilelang.autotuner.param import CompileArgs

    release = threading.Event()
    original = CompileArgs.compile_program

    def hangs_for_block_64(self, func):
        if 'launch_thread("blockIdx.x", 64)' in func.script():
            release.wait(30)  # a compiler that hangs on this config
        return original(self, func)

    monkeypatch.setattr(CompileArgs, "compile_program", hangs_for_block_64)
    tuned = kernels.tuned([{"block": 64}, {"block": 256}], timeout=1.0)
    start = time.perf_counter()
    try:
        result = tuned.tune(4096)
    finally:
        release.set()
    assert time.perf_counter() - start < 20
    assert result.config == {"block": 256}
    assert "compile" in result.failures[0] and "exceeded 1.0 s" in result.failures[0]


def test_all_configs_failing_names_the_reasons(cache_dir):
    tuned = kernels.tuned([{"work": 1, "bias": 1.0}], skip_check=False, ref_prog=lambda a: a)
    with pytest.raises(tilelang.CompileError, match=r"configs\[0\] benchmark"):
        tuned.tune(4096)


def test_set_autotune_inputs_feeds_the_benchmark(cache_dir):
    seen = []

    def reference(a):
        seen.append(a)
        return a

    tuned = kernels.tuned([FAST, SLOW], skip_check=False, ref_prog=reference)
    a = torch.randn(4096)
    with set_autotune_inputs(a):
        result = tuned.tune(4096)
    assert result.config == FAST
    assert seen and all(x is a for x in seen)


def test_explicit_tunable_argument_skips_tuning(cache_dir, monkeypatch):
    _no_bench(monkeypatch)
    kernel = kernels.tuned([FAST, SLOW])(4096, work=3)
    a = torch.randn(4096)
    torch.testing.assert_close(kernel(a), a)
    assert not (cache_dir / "autotuner").exists()


def test_bad_configs_name_the_problem(cache_dir):
    with pytest.raises(ValueError, match=r"configs\[1\] names \['blocks'\]"):
        kernels.tuned([FAST, {"blocks": 2}]).tune(4096)
    with pytest.raises(ValueError, match="configs is empty"):
        kernels.tuned([]).tune(4096)
    with pytest.raises(TypeError, match="stacked over @tilelang.jit"):
        tilelang.autotune(configs=[FAST])(kernels.repeated_sum)


def test_configs_from_a_callable(cache_dir):
    tuned = kernels.tuned(lambda n: [{"work": 1}, {"work": max(2, n // 256)}])
    assert tuned.tune(8192).config == FAST


def test_autotune_record_is_reused_by_another_process(cache_dir):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{REPO!r}, {str(HERE)!r}]
        import tl_autotune_kernels as kernels
        result = kernels.tuned([{SLOW!r}, {FAST!r}]).tune(16384)
        print("RESULT", result.from_disk, result.config["work"])
        """
    )
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache_dir), TILELANG_AUTO_TUNING_PROGRESS="0")
    outs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout.split("RESULT")[1].split())
    assert outs == [["False", "1"], ["True", "1"]]


def test_eager_body_with_const_sizes_given_as_keywords(cache_dir):
    """Upstream's mHC sinkhorn backward: ``@autotune`` over an eager ``@jit`` body whose
    tensors are annotated inside it, compiled with ``.compile(n_stream=4)`` (a ``T.const``
    size, not a parameter) under ``set_autotune_inputs``."""
    import tilelang.language as T

    seen = []

    def reference(a):
        seen.append(a.shape)
        return a * torch.arange(1, 5)

    @tilelang.autotune(configs=[{"block": 8}, {"block": 32}], ref_prog=reference, skip_check=False)
    @tilelang.jit(target="cpu")
    def scale_rows(x, block: int = 16):
        rows, n_stream = T.const("rows, n_stream")
        x: T.Tensor((rows, n_stream), T.float32)
        y = T.empty((rows, n_stream), T.float32)
        with T.Kernel(T.ceildiv(rows, block), threads=32) as bx:
            for i, j in T.Parallel(block, n_stream):
                y[bx * block + i, j] = x[bx * block + i, j] * (j + 1)
        return y

    x = torch.randn(37, 4)
    with set_autotune_inputs(x):
        kernel = scale_rows.compile(rows=37, n_stream=4)
    assert kernel.config in ({"block": 8}, {"block": 32}) and seen
    torch.testing.assert_close(kernel(x).double(), x.double() * torch.arange(1, 5).double())
