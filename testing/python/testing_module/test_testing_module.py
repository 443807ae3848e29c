"""tilelang.testing: requirement decorators (run in a real pytest session), main,
set_random_seed, and the perf-regression runners of upstream's example scripts."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import tilelang.testing
from tilelang.testing import requirements

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[3]
HAS_GPU = torch.cuda.is_available()


def _fn():
    def test_something():  # pytest marks treat a lambda as a mark argument, so a def
        pass

    return test_something


def _marks(func):
    return {m.name: m for m in getattr(func, "pytestmark", [])}


def test_requires_cuda_marks_and_skips_without_gpu():
    @tilelang.testing.requires_cuda
    def t():
        pass

    marks = _marks(t)
    assert "cuda" in marks and marks["skipif"].args[0] is (not HAS_GPU)
    assert repr(tilelang.testing.requires_cuda).startswith("<Feature requires_cuda")


@pytest.mark.parametrize("mode", ["ge", "gt", "le", "lt", "eq"])
def test_compute_version_modes_compare_like_tuples(monkeypatch, mode):
    compare = {
        "ge": tuple.__ge__,
        "gt": tuple.__gt__,
        "le": tuple.__le__,
        "lt": tuple.__lt__,
        "eq": tuple.__eq__,
    }[mode]
    for have in [(0, 0), (8, 0), (8, 6), (9, 0), (10, 0)]:
        monkeypatch.setattr(requirements, "_device_compute_version", lambda have=have: have)
        for need in [(8, 0), (8, 9), (9, 0)]:
            deco = getattr(tilelang.testing, f"requires_cuda_compute_version_{mode}")(*need)

            def t():
                pass

            skip = [m for m in t.__dict__.get("pytestmark", [])]
            assert skip == []
            t = deco(t)
            skipifs = [m for m in t.pytestmark if m.name == "skipif"]
            version_skip = skipifs[0]
            assert version_skip.args[0] is (not compare(have, need)), (have, need, mode)
            assert f"{mode} {need[0]}.{need[1]}" in version_skip.kwargs["reason"]
            assert f"have {have[0]}.{have[1]}" in version_skip.kwargs["reason"]
            assert "cuda" in _marks(t)  # implies requires_cuda


def test_compute_version_misuse():
    with pytest.raises(ValueError, match="mode must be one of"):
        tilelang.testing.requires_cuda_compute_version(9, 0, mode="ne")
    with pytest.raises(TypeError, match="minor_version must be an int"):
        tilelang.testing.requires_cuda_compute_version(9, "0")


def test_requires_package():
    ok = tilelang.testing.requires_package("json", "numpy")(_fn())
    missing = tilelang.testing.requires_package("json", "no_such_package_xyz")(_fn())
    assert _marks(ok)["skipif"].args[0] is False
    assert _marks(missing)["skipif"].args[0] is True
    assert "no_such_package_xyz" in _marks(missing)["skipif"].kwargs["reason"]
    with pytest.raises(TypeError, match="packages must be non-empty strings"):
        tilelang.testing.requires_package()


def test_backends_tilelang_lacks_always_skip():
    for name in (
        "requires_rocm",
        "requires_metal",
        "requires_ascend",
        "requires_cdna",
        "requires_gfx950",
    ):
        t = getattr(tilelang.testing, name)(_fn())
        assert _marks(t)["skipif"].args[0] is True, name
    assert tilelang.testing.ascend_backend_compiled() is False
    assert tilelang.testing.requires_llvm.available is True  # the CPU backend is LLVM


def test_decorators_in_a_pytest_session(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(
        """
        import tilelang.testing

        @tilelang.testing.requires_cuda
        def test_gpu():
            pass

        @tilelang.testing.requires_llvm
        def test_cpu():
            pass

        @tilelang.testing.requires_cuda_compute_version_ge(8, 0)
        def test_sm80():
            pass

        @tilelang.testing.requires_rocm
        def test_rocm():
            pass

        @tilelang.testing.requires_package("no_such_package_xyz")
        def test_pkg():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    if HAS_GPU:
        result.assert_outcomes(passed=3, skipped=2)
    else:
        result.assert_outcomes(passed=1, skipped=4)


def _run(script: str, tmp_path: Path, name="script.py", env=None):
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_main_runs_the_calling_file(tmp_path):
    good = _run(
        """
        import tilelang.testing

        def test_ok():
            assert 1 + 1 == 2

        if __name__ == "__main__":
            tilelang.testing.main()
        """,
        tmp_path,
        "test_good.py",
    )
    assert good.returncode == 0 and "1 passed" in good.stdout
    bad = _run(
        """
        import tilelang.testing

        def test_ok():
            pass

        def test_bad():
            assert 1 + 1 == 3

        if __name__ == "__main__":
            tilelang.testing.main()
        """,
        tmp_path,
        "test_bad.py",
    )
    assert bad.returncode == 1 and "1 failed, 1 passed" in bad.stdout


def test_set_random_seed_reproduces_every_generator():
    def draw():
        return random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()

    tilelang.testing.set_random_seed(123)
    first = draw()
    tilelang.testing.set_random_seed(123)
    assert draw() == first
    tilelang.testing.set_random_seed(124)
    assert draw() != first
    tilelang.testing.set_random_seed()
    default = draw()
    tilelang.testing.set_random_seed(42)
    assert draw() == default
    with pytest.raises(TypeError, match="seed must be an int"):
        tilelang.testing.set_random_seed("1")


def test_torch_assert_close_is_the_utils_one():
    from tilelang.utils.tensor import torch_assert_close

    assert tilelang.testing.torch_assert_close is torch_assert_close


_REGRESSION = """
import tilelang.testing

def run_fast():
    return 1.5

def run_slow(scale=1):
    return 4.0 * scale

def run_broken():
    return 0.0

def regression_fast():
    tilelang.testing.process_func(run_fast)

def regression_slow():
    tilelang.testing.process_func(run_slow, "slow_x2", scale=2)

def regression_broken():
    tilelang.testing.process_func(run_broken, "broken")

if __name__ == "__main__":
    tilelang.testing.regression()
"""


def test_regression_text_output(tmp_path):
    proc = _run(_REGRESSION, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if ": " in line and "├" not in line]
    assert lines == ["__main__: 1.5", "slow_x2: 8.0"]  # broken (latency 0) dropped
    assert "[1/3] broken" in proc.stdout and "[3/3] slow" in proc.stdout


def test_regression_json_and_filter(tmp_path):
    proc = _run(
        _REGRESSION,
        tmp_path,
        env={"TL_PERF_REGRESSION_FORMAT": "json", "TL_PERF_REGRESSION_ONLY": "sl*"},
    )
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("__TILELANG_PERF_RESULTS_JSON__=")]
    rows = json.loads(line[0].split("=", 1)[1])
    assert rows == [{"name": "slow_x2", "latency": 8.0, "case": "slow"}]


def test_process_func_misuse():
    with pytest.raises(TypeError, match="func must be callable"):
        tilelang.testing.process_func(1.0)
