"""`.ci/gpu sanitize`: the compute-sanitizer commands (dry run) and the summary lines."""

import importlib.util
import os
import pathlib
import re
import shlex
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
GPU = ROOT / ".ci" / "gpu"


def _dry_run(tmp_path, *args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SANITIZE_")}
    full.update(DRY_RUN="1", OUT=str(tmp_path), **env)
    return subprocess.run(
        ["bash", str(GPU), "sanitize", *args], capture_output=True, text=True, env=full, timeout=60
    )


def _summary_module():
    spec = importlib.util.spec_from_file_location(
        "sanitize_summary", GPU.parent / "sanitize_summary.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_all_tools(tmp_path):
    res = _dry_run(tmp_path, "all", SHARD_TIMEOUT="123")
    assert res.returncode == 0, res.stderr
    lines = [shlex.split(x) for x in res.stdout.strip().splitlines()]
    assert [x[x.index("--tool") + 1] for x in lines] == ["memcheck", "racecheck", "synccheck"]
    for argv in lines:
        # the watchdog wraps the sanitizer, which wraps the whole python process
        assert argv[:4] == ["timeout", "-k", "30", "123"]
        assert argv[4].endswith("compute-sanitizer")
        assert ["--target-processes", "all"] == argv[argv.index("--target-processes") :][:2]
        py = argv.index("python3")
        assert argv[py : py + 6] == [
            "python3",
            "-m",
            "pytest",
            "-q",
            "-m",
            "cuda and not no_sanitizer",
        ]
        log = argv[argv.index("--log-file") + 1]
        assert log.startswith(str(tmp_path)) and "%p" in log


def test_default_tests_exist(tmp_path):
    """Every default test file / node id names a cuda-marked test that exists."""
    argv = shlex.split(_dry_run(tmp_path, "memcheck").stdout)
    targets = argv[argv.index("no:cacheprovider") + 1 :]
    assert len(targets) >= 5
    for target in targets:
        path, _, name = target.partition("::")
        text = (ROOT / path).read_text()
        assert "mark.cuda" in text
        if name:
            assert re.search(rf"def {re.escape(name)}\(", text), target


def test_subset_and_k_expression(tmp_path):
    res = _dry_run(
        tmp_path, "racecheck", SANITIZE_TESTS="x/test_a.py x/test_b.py::t", SANITIZE_K="gemm or fa"
    )
    (argv,) = [shlex.split(x) for x in res.stdout.strip().splitlines()]
    assert argv[-4:] == ["x/test_a.py", "x/test_b.py::t", "-k", "gemm or fa"]


def test_unknown_tool_is_refused(tmp_path):
    res = _dry_run(tmp_path, "leakcheck")
    assert res.returncode == 2 and "unknown tool 'leakcheck'" in res.stderr


def _write_run(tmp_path, tool, pytest_out, log, rc):
    (tmp_path / f"sanitize_{tool}.txt").write_text(pytest_out)
    if log is not None:
        (tmp_path / f"sanitize_{tool}.4242.log").write_text(log)
    (tmp_path / f"sanitize_{tool}.rc").write_text(f"{rc}\n")


CLEAN_LOG = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
RACE_LOG = (
    "========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k+0x90"
    "\n=========     and Read access at k+0x100 [508 hazards]\n"
    "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)\n"
)


@pytest.mark.parametrize(
    "tool,pytest_out,log,rc,ok,expect",
    [
        ("memcheck", "..s\n2 passed, 1 skipped in 9.1s\n", CLEAN_LOG, 0, True, "2 passed"),
        (
            "racecheck",
            "...\n3 passed in 20s\n",
            RACE_LOG,
            86,
            False,
            "sanitizer errors 2, hazards 3",
        ),
        ("synccheck", "..F\n1 failed, 2 passed in 3s\n", CLEAN_LOG, 1, False, "tests failed"),
        ("memcheck", "..", None, 124, False, "timed out"),
        ("synccheck", "\n5 passed in 2s\n", "", 0, False, "no sanitizer summary"),
        (
            "racecheck",
            "2 passed\n",
            "RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)",
            0,
            True,
            "(1 warnings)",
        ),
    ],
)
def test_summary_lines(tmp_path, tool, pytest_out, log, rc, ok, expect):
    module = _summary_module()
    _write_run(tmp_path, tool, pytest_out, log, rc)
    passed, line = module.summarize(tmp_path, tool)
    assert passed is ok and line.startswith(f"sanitize {tool}: ") and expect in line
    assert line.endswith("OK") if ok else "FAIL (" in line


def test_summary_exit_status(tmp_path):
    module = _summary_module()
    _write_run(tmp_path, "memcheck", "1 passed\n", CLEAN_LOG, 0)
    _write_run(tmp_path, "racecheck", "1 passed\n", RACE_LOG, 86)
    assert module.main([str(tmp_path), "memcheck"]) == 0
    assert module.main([str(tmp_path), "memcheck", "racecheck"]) == 1


def test_counts_are_summed_over_per_node_runs():
    """SANITIZE_JOBS concatenates one pytest run per node: every final line counts."""
    text = ".\n1 passed in 2.50s\nF\n=== 1 failed, 2 passed, 1 skipped in 3s ===\n"
    counts = _summary_module().pytest_counts(text)
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (3, 1, 1)


def test_one_process_per_file_with_exclusions(tmp_path):
    """``SANITIZE_UNIT=file``: one sanitized process per test file (its cuda tests narrowed by
    ``SANITIZE_K``; most nodes first), ``SANITIZE_EXCLUDE`` globs left out, and a unit
    stopped by the watchdog named in the summary. A stand-in sanitizer records its argv."""
    fake = tmp_path / "fake-sanitizer"
    calls = tmp_path / "calls"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        'if [[ "$*" == *test_tma_store* ]]; then sleep 30; fi\n'
        'echo "1 passed in 0.1s"; echo "========= ERROR SUMMARY: 0 errors"\n'
    )
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANITIZE_")}
    env.update(
        OUT=str(tmp_path / "out"),
        COMPUTE_SANITIZER=str(fake),
        SANITIZE_JOBS="4",
        SANITIZE_UNIT="file",
        SANITIZE_TESTS="testing/python/backends/cuda/test_wgmma_overlap.py "
        "testing/python/backends/cuda/test_tma_store.py "
        "testing/python/backends/cuda/test_warp_specialize.py",
        SANITIZE_K="gpu",
        SANITIZE_EXCLUDE="test_warp_*.py",
        SHARD_TIMEOUT="5",
    )
    res = subprocess.run(
        ["bash", str(GPU), "sanitize", "memcheck"],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        cwd=ROOT,
    )
    lines = calls.read_text().splitlines()
    # one process per file: the file itself, narrowed by SANITIZE_K (node ids may hold
    # spaces and commas, so they are not passed one by one)
    files = [[a for a in ln.split() if a.startswith("testing/")] for ln in lines]
    assert sorted(len(f) for f in files) == [1, 1], lines
    assert {f[0] for f in files} == {
        "testing/python/backends/cuda/test_wgmma_overlap.py",
        "testing/python/backends/cuda/test_tma_store.py",
    }
    for ln in lines:
        assert ln.endswith(" -k gpu"), ln
    assert res.returncode == 1  # a unit ran past SHARD_TIMEOUT
    assert "stopped by the time limit: testing/python/backends/cuda/test_tma_store.py" in res.stdout
