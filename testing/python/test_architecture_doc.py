"""docs/architecture.md names every stage of every backend's pipeline, and its CUDA stage
table lists ``backends/cuda/pipeline.py``'s ``STAGES`` row for row, in order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tilelang.language as T
from tilelang.backends.cpu import pipeline as cpu_pipeline
from tilelang.backends.cuda import pipeline as cuda_pipeline
from tilelang.backends.metal import pipeline as metal_pipeline
from tilelang.backends.rocm import pipeline as rocm_pipeline
from tilelang.engine.instrument import session

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
TABLES = {"cuda": cuda_pipeline, "rocm": rocm_pipeline, "metal": metal_pipeline}


def _doc():
    return DOC.read_text()


def _cpu_stage_names():
    """The CPU pipeline's stages (built per kernel, no module table): those one lowering
    with every optional stage switched on runs."""

    @T.prim_func
    def scale(A: T.Tensor((100,), "float32"), B: T.Tensor((100,), "float32")):
        with T.Kernel(2, threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < 100:
                    B[bx * 64 + i] = A[bx * 64 + i] * 2.0

    with session(record=True, func=scale) as sess:
        cpu_pipeline.lower(scale, {"tl.enable_bounds_check": True})
    return [r.name for r in sess.records if r.origin == "tilelang" and r.name != "trace"]


@pytest.mark.parametrize("backend", sorted(TABLES))
def test_every_stage_is_named_in_the_doc(backend):
    doc = _doc()
    missing = [name for name, _ in TABLES[backend].STAGES if f"`{name}`" not in doc]
    assert not missing, f"docs/architecture.md does not name {backend} stages {missing}"


def test_every_cpu_stage_is_named_in_the_doc():
    names = _cpu_stage_names()
    assert "bounds_check" in names and "lower_blocks" in names
    doc = _doc()
    cpu = doc[doc.index("   - CPU: ") : doc.index("   - CUDA: ")]
    missing = [name for name in names if f"`{name}`" not in cpu]
    assert not missing, f"the CPU pipeline paragraph does not name {missing}"
    assert [n for n in re.findall(r"`([a-z_0-9]+)`", cpu) if n in names] == names  # in order


def test_cuda_stage_table_matches_the_pipeline():
    doc = _doc()
    start = doc.index("| stage | does | records on the function |")
    table = doc[start : doc.index("\n\n", start)]
    rows = re.findall(r"^\s*\| `([a-z_0-9]+)` \|", table, re.M)
    assert rows == [name for name, _ in cuda_pipeline.STAGES]
