"""``benchmark/mla_decode.py`` without a GPU: its roofline arithmetic, its table, and a
``--device cpu`` smoke run that has a dense and a paged row with KV splits, each checked
against the float64 reference."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmark" / "mla_decode.py"


def _load():
    spec = importlib.util.spec_from_file_location("mla_decode_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kv_bytes_and_table(rng):
    m = _load()
    b, s, d, p = (int(x) for x in rng.integers(1, 300, size=4))
    assert m.kv_cache_bytes(b, s, d, p) == np.prod([b, s, d + p, 2])
    kv_bytes, roof_ms = int(rng.integers(10**6, 10**9)), float(rng.uniform(0.1, 2))
    rows = [("torch", 2 * roof_ms, 1e-3), ("tilelang split=2", roof_ms * 1.25, 2e-4)]
    lines = m.format_rows(rows, kv_bytes, roof_ms, rows[0][1])
    assert len(lines) == 3
    for (name, t, _), line in zip(rows, lines[1:]):
        cols = line[len(name) :].split()
        assert line.startswith(name)
        assert float(cols[0]) == pytest.approx(t, abs=1e-3)
        assert float(cols[1]) == pytest.approx(kv_bytes / t / 1e6, abs=1)
        assert float(cols[2]) == pytest.approx(roof_ms / t, abs=0.01)
        assert float(cols[3]) == pytest.approx(rows[0][1] / t, abs=0.01)


def test_block_sizes_checked():
    m = _load()
    with pytest.raises(SystemExit):
        m.parse_args(["--device", "cpu", "--block_N", "48", "--block_size", "64"])


def test_cpu_smoke_run_has_split_and_paged_rows():
    m = _load()
    lines = m.main(["--device", "cpu", "--splits", "2", "--iters", "1"])
    text = "\n".join(lines)
    assert re.search(r"roofline [0-9.]+ ms", text)
    names = [ln[:30].strip() for ln in lines if ln.startswith("tilelang")]
    assert names == ["tilelang split=2", "tilelang paged64 split=2"], text
    for ln in lines:
        if ln.startswith(("torch", "tilelang")):
            assert float(ln.split()[-1]) < 1e-2, ln  # max error vs the float64 reference


def test_variants_parse_and_add_rows():
    """``--variant NAME:KEY=VALUE,...``: one more dense and paged row per variant, built
    with the pass configs added to the examples' own (fast math kept)."""
    m = _load()
    assert m.parse_variants(["old:tl.reduce_merged_exchange=false,tl.wgmma_overlap=1", "x:"]) == [
        ("old", {"tl.reduce_merged_exchange": False, "tl.wgmma_overlap": 1}),
        ("x", {}),
    ]
    lines = m.main(["--device", "cpu", "--splits", "1", "--iters", "1",
                    "--variant", "old:tl.reduce_merged_exchange=false"])  # fmt: skip
    names = [ln[:30].strip() for ln in lines if ln.startswith("tilelang")]
    assert names == ["tilelang split=1", "tilelang split=1 old", "tilelang paged64 split=1",
                     "tilelang paged64 split=1 old"], names  # fmt: skip
    for ln in lines:
        if ln.startswith("tilelang"):
            assert float(ln.split()[-1]) < 1e-2, ln


def test_programs_add_dense_rows():
    """``--program NAME:KEY=VALUE,...``: one more dense row per program variant (the
    example's keyword arguments; each checked against float64) after each pass variant's
    row; the paged rows are not multiplied."""
    m = _load()
    lines = m.main(["--device", "cpu", "--splits", "1", "--iters", "1", "--no-paged",
                    "--program", "q32:q_reg_cols=32", "q32rs:q_reg_cols=32,defer_rowsum=true",
                    "n32:block_N=32,num_stages=3", "--variant", "x:"])  # fmt: skip
    names = [ln[:30].strip() for ln in lines if ln.startswith("tilelang")]
    assert names == ["tilelang split=1", "tilelang split=1 q32", "tilelang split=1 q32rs",
                     "tilelang split=1 n32", "tilelang split=1 x", "tilelang split=1 x q32",
                     "tilelang split=1 x q32rs", "tilelang split=1 x n32"], names  # fmt: skip
    for ln in lines:
        if ln.startswith("tilelang"):
            assert float(ln.split()[-1]) < 1e-2, ln
