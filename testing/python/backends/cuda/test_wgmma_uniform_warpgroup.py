"""``tl.wgmma_uniform_warpgroup``: wgmma reads its warpgroup index through ``__shfl_sync``.

nvcc cannot prove ``threadIdx.x / 128`` warp-uniform, so without the broadcast the
descriptor arithmetic of a two-warpgroup gemm sits in per-thread registers, is hoisted out
of the loop and, in the FlashAttention backward at head dim 128 (accumulators fill the
240-register consumers), spilled: ptxas reported 56 bytes of spill stores and loads, and
on the H200 ncu showed the loop stalling on those reloads before its HGMMAs. The values
are the same either way (the emulator runs the gemm tests with the broadcast on, the
default); these tests check the code shape and the spills.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilelang.backends.cuda import pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from example_loader import load_example  # noqa: E402

SM90A = {"kind": "cuda", "arch": "sm_90a"}
KEY = "tl.wgmma_uniform_warpgroup"


def _bwd_source(configs):
    bwd = load_example("flash_attention/example_mha_bwd_bhsd.py")
    # the benchmark's shape (flash_attention_variants.py): at short sequences the loop differs
    func = bwd.flashattn_bwd.get_tir(4, 16, 4096, 128, False, **bwd.bwd_config(128))
    return pipeline.build(func, SM90A, configs, compiler="nvcc").kernel_source


def _descriptor_offsets(source):
    """The offset expressions added to shared tiles inside ``tl::wgmma_desc`` calls."""
    return re.findall(
        r"tl::wgmma_desc<[^>]*>\(\(\(half\*\)\(\(\(char\*\)\(&\(\w+\[0\]\)\)\) \+ ([^;]*)", source
    )


def test_warpgroup_index_is_broadcast_from_lane_zero():
    on, off = _bwd_source({}), _bwd_source({KEY: False})
    shfl = [o for o in _descriptor_offsets(on) if "__shfl_sync" in o]
    assert shfl, "no wgmma descriptor reads the broadcast warpgroup index"
    assert not any("__shfl_sync" in o for o in _descriptor_offsets(off))
    # the broadcast is all the difference
    assert on.count("__shfl_sync") > off.count("__shfl_sync")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("uniform", [True, False])
def test_fa_backward_d128_spills(tmp_path, uniform):
    source = _bwd_source({} if uniform else {KEY: False})
    cu, cubin = tmp_path / "bwd.cu", tmp_path / "bwd.cubin"
    cu.write_text(source)
    res = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90a", "--use_fast_math", "-Xptxas", "-v", "-o", str(cubin), str(cu)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stderr)
    assert m, res.stderr[-2000:]
    spilled = int(m.group(1)) + int(m.group(2))
    if uniform:
        assert spilled == 0, res.stderr[-2000:]
    else:  # the shape the pass config exists for: if this stops spilling, revisit the default
        assert spilled > 0, res.stderr[-2000:]
