"""tilelang.tools.plot_layout: the cells it draws (checked through verbose output against the
layout's own tables), the files it writes, and its errors (matplotlib absent included)."""

from __future__ import annotations

import importlib
import sys

import pytest

import tilelang.layout as L
from tilelang.tools import plot_layout

plot_module = importlib.import_module("tilelang.tools.plot_layout")


def _printed_cells(capsys):
    lines = capsys.readouterr().out.splitlines()
    return [line.split() for line in lines if line.startswith("  ")]


def test_fragment_cells_name_thread_and_register(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    frag = L.make_mma_c_atom_fragment()  # 16x8 accumulator of one mma.sync m16n8
    files = plot_layout(frag, str(tmp_path), "acc", formats="png", verbose=True)
    cells = _printed_cells(capsys)
    threads, local = frag.thread_table()[0], frag.forward_table()[..., 0]
    assert len(cells) == 16 and all(len(row) == 8 for row in cells)
    for i in range(16):
        for j in range(8):
            assert cells[i][j] == f"T{threads[i, j]}/L{local[i, j]}"
    # the documented m16n8 accumulator: thread 4*(i%8) + j//2, register 2*(i//8) + j%2
    assert cells[9][3] == f"T{4 * 1 + 1}/L{2 + 1}"
    assert files == [str(tmp_path / "acc.png")]
    assert (tmp_path / "acc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_layout_input_and_output_views(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    transpose = L.Layout((4, 8), lambda i, j: [j, i])
    plot_layout(transpose, str(tmp_path), "t_in", formats="svg", verbose=True)
    cells = _printed_cells(capsys)
    assert [[cells[i][j] for j in range(8)] for i in range(4)] == [
        [f"{j},{i}" for j in range(8)] for i in range(4)
    ]
    plot_layout(transpose, str(tmp_path), "t_out", formats="svg", view="output", verbose=True)
    cells = _printed_cells(capsys)
    assert len(cells) == 8 and cells[5][2] == "2,5"  # output (5, 2) holds input (2, 5)
    assert (tmp_path / "t_in.svg").exists() and (tmp_path / "t_out.svg").exists()
    written = plot_layout(transpose, str(tmp_path), "t_all", formats="all", grid_shape=(2, 16))
    assert sorted(p.rsplit(".", 1)[1] for p in written) == ["pdf", "png", "svg"]


def test_misuse(tmp_path):
    layout = L.Layout((4, 8), lambda i, j: [i, j])
    with pytest.raises(TypeError, match="layout must be a T.Layout or T.Fragment"):
        plot_layout([1, 2], str(tmp_path))
    with pytest.raises(ValueError, match="view must be 'input' or 'output'"):
        plot_layout(layout, str(tmp_path), view="diagonal")
    with pytest.raises(ValueError, match="formats must be from"):
        plot_layout(layout, str(tmp_path), formats="jpeg")
    pytest.importorskip("matplotlib")
    with pytest.raises(
        ValueError, match=r"grid_shape \(3, 3\) has 9 cells, the layout's input has 32"
    ):
        plot_layout(layout, str(tmp_path), grid_shape=(3, 3))


def test_without_matplotlib_the_error_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="needs matplotlib, an optional dependency"):
        plot_layout(L.Layout((2, 2), lambda i, j: [i, j]), str(tmp_path))
    assert plot_module.plot_layout is plot_layout
