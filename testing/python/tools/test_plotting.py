"""``tilelang.tools.plotting.ratio_chart`` and the benchmarks' ``--plot`` option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tilelang.tools import plotting

REPO = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def test_ratio_chart_draws_groups_and_failures(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [
        {"group": "4096 float16", "label": "torch.matmul", "ratio": 1.0},
        {"group": "4096 float16", "label": "128x256x64 wgmma", "ratio": 0.89},
        {"group": "8192 bfloat16", "label": "128x256x64 wgmma", "ratio": 1.07},
        {"group": "8192 bfloat16", "label": "broken", "ratio": None},
    ]
    path = plotting.ratio_chart(rows, tmp_path / "r.png", title="gemm")
    data = Path(path).read_bytes()
    assert data.startswith(PNG) and len(data) > 5000


def test_ratio_chart_rejects_bad_rows(tmp_path):
    with pytest.raises(ValueError, match="'rows' is empty"):
        plotting.ratio_chart([], tmp_path / "r.png")
    with pytest.raises(ValueError, match=r"rows\[0\] lacks \['ratio'\]"):
        plotting.ratio_chart([{"group": 1, "label": 2}], tmp_path / "r.png")


@pytest.mark.parametrize("script", ["matmul.py", "flash_attention.py"])
def test_benchmark_plot_without_matplotlib_exits_with_a_message(script, tmp_path):
    code = (
        "import runpy, sys; sys.modules['matplotlib'] = None; "
        f"sys.argv = ['{script}', '--plot', sys.argv[1]]; "
        f"runpy.run_path('benchmark/{script}', run_name='__main__')"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.png")],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1
    assert "--plot" in run.stderr and "pip install matplotlib" in run.stderr


def test_benchmark_plotting_helper_draws_rows(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    sys.path.insert(0, str(REPO / "benchmark"))
    try:
        import plotting as bench_plotting
    finally:
        sys.path.pop(0)
    out = bench_plotting.plot_ratios(
        [{"group": "causal=False", "label": "64x64/128t/1s", "ratio": 0.7}], tmp_path / "fa.png"
    )
    assert Path(out).read_bytes().startswith(PNG)
    assert "plot written to" in capsys.readouterr().out
    assert bench_plotting.plot_ratios([], None) is None


@pytest.mark.cuda
@pytest.mark.parametrize(
    "command",
    [
        ["benchmark/matmul.py", "--sizes", "1024", "--dtypes", "float16", "--iters", "3"],
        ["benchmark/flash_attention.py", "--batch", "1", "--heads", "2", "--seq", "512",
         "--dim", "64", "--iters", "3", "--configs", "64x64/128/1"],
    ],
)  # fmt: skip
def test_benchmark_plot_on_gpu(command, tmp_path):
    pytest.importorskip("matplotlib")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = tmp_path / "out.png"
    run = subprocess.run(
        [sys.executable, *command, "--plot", str(out)],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert out.read_bytes().startswith(PNG)
