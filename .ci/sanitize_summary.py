"""One summary line per compute-sanitizer tool run by ``.ci/gpu sanitize``.

    python3 .ci/sanitize_summary.py OUT_DIR TOOL...

Reads, for each TOOL, ``OUT_DIR/sanitize_TOOL.txt`` (pytest's output), the sanitizer's
logs ``OUT_DIR/sanitize_TOOL.<pid>.log`` and the exit status ``OUT_DIR/sanitize_TOOL.rc``.
A tool passes when its run finished in time, pytest ran tests and none failed, and the
sanitizer reported no error (racecheck warnings are counted, not failed). Exit status:
0 when every tool passes, 1 otherwise.
"""

from __future__ import annotations

import pathlib
import re
import sys

_PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")
_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_RACE_SUMMARY = re.compile(
    r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)
_TIMEOUT_CODES = (124, 137)
_DURATION = re.compile(r"\bin \d+(\.\d+)?s\b")


def pytest_counts(text: str) -> dict:
    """Counts from pytest's final summary lines (those ending in the run's duration), summed
    over the runs the text holds (SANITIZE_JOBS concatenates one per test node); without
    such a line, the last line naming any outcome."""
    counts = {"passed": 0, "failed": 0, "skipped": 0, "error": 0}
    lines = text.splitlines()
    finals = [line for line in lines if _PYTEST_COUNTS.search(line) and _DURATION.search(line)]
    if not finals:
        finals = [line for line in lines if _PYTEST_COUNTS.search(line)][-1:]
    for line in finals:
        for n, kind in _PYTEST_COUNTS.findall(line):
            key = "error" if kind.startswith("error") else kind
            counts[key] = counts.get(key, 0) + int(n)
    return counts


def sanitizer_counts(texts) -> dict:
    """Sanitizer totals over every log: errors, hazards, race errors/warnings, and how
    many summaries were found (a run that printed none did not finish)."""
    out = {"errors": 0, "hazards": 0, "race_errors": 0, "race_warnings": 0, "summaries": 0}
    for text in texts:
        for m in _ERROR_SUMMARY.finditer(text):
            out["errors"] += int(m.group(1))
            out["summaries"] += 1
        for m in _RACE_SUMMARY.finditer(text):
            out["hazards"] += int(m.group(1))
            out["race_errors"] += int(m.group(2))
            out["race_warnings"] += int(m.group(3))
            out["summaries"] += 1
    return out


def summarize(out_dir: pathlib.Path, tool: str) -> tuple[bool, str]:
    """(passed, summary line) of one tool's run."""
    pytest_file = out_dir / f"sanitize_{tool}.txt"
    text = pytest_file.read_text(errors="replace") if pytest_file.exists() else ""
    logs = [p.read_text(errors="replace") for p in sorted(out_dir.glob(f"sanitize_{tool}.*.log"))]
    rc_file = out_dir / f"sanitize_{tool}.rc"
    rc = int(rc_file.read_text().strip() or -1) if rc_file.exists() else -1
    tests = pytest_counts(text)
    # the sanitizer prints its summary into the pytest output when it has no log file
    san = sanitizer_counts(logs or [text])
    problems = []
    if rc in _TIMEOUT_CODES:
        problems.append("timed out (SHARD_TIMEOUT)")
    elif rc not in (0, 86) and not tests["failed"]:
        problems.append(f"exit status {rc}")
    if tests["failed"] or tests["error"]:
        problems.append("tests failed")
    if not tests["passed"]:
        problems.append("no test passed")
    if san["errors"] or san["race_errors"]:
        problems.append("sanitizer errors")
    if not san["summaries"] and rc not in _TIMEOUT_CODES:
        problems.append("no sanitizer summary")
    timeouts_file = out_dir / f"sanitize_{tool}.timeouts"
    stopped = timeouts_file.read_text().split() if timeouts_file.exists() else []
    line = (
        f"sanitize {tool}: tests {tests['passed']} passed, {tests['failed']} failed, "
        f"{tests['skipped']} skipped, {tests['error']} errors; sanitizer errors "
        f"{san['errors'] + san['race_errors']}, hazards {san['hazards']} "
        f"({san['race_warnings']} warnings); rc {rc} -> "
        + ("OK" if not problems else "FAIL (" + ", ".join(problems) + ")")
        + (f"; stopped by the time limit: {' '.join(stopped)}" if stopped else "")
    )
    return not problems, line


def main(argv) -> int:
    """Print one line per tool; 0 when all passed."""
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = pathlib.Path(argv[0])
    ok = True
    for tool in argv[1:]:
        passed, line = summarize(out_dir, tool)
        ok &= passed
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
