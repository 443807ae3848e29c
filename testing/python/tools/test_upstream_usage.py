"""scripts/upstream_usage.py: the AST scan of upstream's examples and language tests, and the
report section it feeds (its counts, and re-reading the recorded names without a checkout)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import upstream_usage  # noqa: E402


def _checkout(tmp_path: Path) -> Path:
    for pkg in ("tilelang", "tilelang/language", "tilelang/testing", "tilelang/carver",
                "tilelang/carver/arch"):  # fmt: skip
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "tilelang/env.py").write_text("")
    ex = tmp_path / "examples" / "gemm"
    ex.mkdir(parents=True)
    (ex / "a.py").write_text(
        "import tilelang\n"
        "import tilelang.language as T\n"
        "import tilelang.testing\n"
        "from tilelang.carver.arch import driver, CUDA as C\n"
        "@tilelang.jit\n"
        "def f(A: T.Tensor((4,), T.float32)):\n"
        "    with T.Kernel(1) as bx:\n"
        "        T.copy(A, A)\n"
        "        x = T.float32.bits\n"  # only the first name after the module counts
        "tilelang.testing.main()\n"
        "print(driver.get_num_sms(), tilelang.env.TILELANG_CACHE_DIR)\n"
    )
    (ex / "b.py").write_text(
        "from tilelang import language as L\nL.copy(1, 2)\nL.__exp(1)\nL.__all__\n"
    )
    (ex / "broken.py").write_text("def (:\n")  # unparsable files are skipped
    lang = tmp_path / "testing" / "python" / "language"
    lang.mkdir(parents=True)
    (lang / "t.py").write_text("def g():\n    import tilelang.language as T\n    T.gemm()\n")
    (tmp_path / "testing" / "python" / "other.py").write_text("import tilelang\ntilelang.nope\n")
    return tmp_path


def test_scan_collects_names_by_module_and_files(tmp_path):
    users = upstream_usage.scan(_checkout(tmp_path))
    got = {f"{m}.{n}": sorted(files) for (m, n), files in users.items()}
    a, b, t = "examples/gemm/a.py", "examples/gemm/b.py", "testing/python/language/t.py"
    assert got["tilelang.language.copy"] == [a, b]
    assert got["tilelang.language.Tensor"] == [a]
    assert got["tilelang.language.float32"] == [a]
    assert got["tilelang.language.gemm"] == [t]
    assert got["tilelang.jit"] == [a]
    assert got["tilelang.testing.main"] == [a]
    assert got["tilelang.carver.arch.driver"] == [a]
    assert got["tilelang.carver.arch.CUDA"] == [a]
    assert got["tilelang.env.TILELANG_CACHE_DIR"] == [a]
    assert (
        "tilelang.language.bits" not in got and "tilelang.nope" not in got
    )  # other.py: not scanned
    assert got["tilelang.language.__exp"] == [b]


def test_private_and_dunder_names_are_not_reported():
    assert upstream_usage.is_reported("__exp") and upstream_usage.is_reported("copy")
    assert not upstream_usage.is_reported("__all__")
    assert not upstream_usage.is_reported("_private")


def test_section_counts_and_round_trip(tmp_path):
    users = upstream_usage.scan(_checkout(tmp_path))
    usage = {pair: (len(files), files[0]) for pair, files in users.items()}

    def state_of(module, name):
        if name == "gemm":
            return "error", "error", "refused"
        if name == "Tensor":
            return "missing", "missing", "why"
        return "present", "function", ""

    text = upstream_usage.usage_section(usage, "label 1", state_of)
    reported = [p for p in usage if upstream_usage.is_reported(p[1])]
    assert (
        f"**Used names: {len(reported)}; present {len(reported) - 2}, clear error 1, missing 1.**"
        in text
    )
    assert "`tilelang.language` (T.*): " in text
    rows = [line for line in text.splitlines() if line.startswith("| `tilelang")]
    counts = [int(row.split("|")[2]) for row in rows]
    assert counts == sorted(counts, reverse=True)  # most used first
    assert rows[0].startswith("| `tilelang.language` | 3 |")  # imported by a.py, b.py, t.py
    again, label = upstream_usage.recorded_usage("# report\n\n" + text)
    assert label == "label 1"
    assert again == {p: v for p, v in usage.items() if upstream_usage.is_reported(p[1])}


def test_scan_rejects_a_directory_without_tilelang(tmp_path):
    with pytest.raises(SystemExit, match="not an upstream tilelang checkout"):
        upstream_usage.scan(tmp_path)


def test_signature_difference_names_what_differs():
    import api_coverage

    pos = "POSITIONAL_OR_KEYWORD"
    same = {"tilelang.language": {"reinterpret": [["value", pos], ["dtype", pos]]}}
    assert api_coverage.signature_difference("tilelang.language", "reinterpret", same) == ""
    other = {"tilelang.language": {"reinterpret": [["x", pos], ["dtype", pos], ["span", pos]]}}
    note = api_coverage.signature_difference("tilelang.language", "reinterpret", other)
    assert "positional parameters (value, dtype), upstream (x, dtype, span)" in note
    assert "not accepted: x, span" in note
    assert api_coverage.signature_difference("tilelang.language", "reinterpret", None) == ""
