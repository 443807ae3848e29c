"""The autotuner's trials as CSV and as a chart (``AutotuneResult.write_trials_csv/plot_trials``)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

import tilelang

HERE = Path(__file__).resolve().parent
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


def _read(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_trials_csv_lists_every_config_with_its_outcome(cache_dir, tmp_path):
    wrong = {"work": 1, "bias": 1.0}
    tuned = kernels.tuned([wrong, SLOW, FAST], skip_check=False, ref_prog=lambda a: a)
    result = tuned.tune(4096)
    assert [t["status"] for t in result.trials] == ["benchmark", "ok", "ok"]
    rows = _read(result.write_trials_csv(tmp_path / "trials.csv"))
    assert [r["index"] for r in rows] == ["0", "1", "2"]
    assert [r["status"] for r in rows] == ["benchmark", "ok", "ok"]
    assert rows[0]["latency_ms"] == "" and "benchmark" in rows[0]["error"]
    assert [r["work"] for r in rows] == ["1", "96", "1"]
    assert rows[0]["bias"] == "1.0" and rows[1]["bias"] == ""
    latencies = {int(r["index"]): float(r["latency_ms"]) for r in rows if r["status"] == "ok"}
    assert latencies[2] < latencies[1]  # FAST is faster
    assert [r["best"] for r in rows] == ["0", "0", "1"]
    assert float(rows[1]["ref_latency_ms"]) == pytest.approx(result.ref_latency)


def test_stored_result_writes_its_one_config(cache_dir, tmp_path):
    kernels.tuned([SLOW, FAST]).tune(8192)
    tilelang.autotuner.clear_memory_cache()
    again = kernels.tuned([SLOW, FAST]).tune(8192)
    assert again.from_disk and again.trials == []
    rows = _read(again.write_trials_csv(tmp_path / "t.csv"))
    assert len(rows) == 1 and rows[0]["status"] == "stored" and rows[0]["work"] == "1"


def test_trials_plot_is_an_image(cache_dir, tmp_path):
    pytest.importorskip("matplotlib")
    result = kernels.tuned([SLOW, FAST]).tune(2048)
    path = result.plot_trials(tmp_path / "trials.png", title="copy kernel")
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


def test_plot_without_matplotlib_says_how_to_install(cache_dir, tmp_path, monkeypatch):
    result = kernels.tuned([FAST]).tune(1024)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        result.plot_trials(tmp_path / "x.png")
