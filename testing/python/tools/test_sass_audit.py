"""``benchmark/sass_audit.py``: the loop statistics of a SASS listing, and (with nvcc and
cuobjdump) the full-size MLA decode kernel's loop: 3 barriers and FMNMX max chains with the
default pass configs, 10 barriers and NaN-propagating selects with the reduce switches off."""

import importlib.util
import shutil
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmark" / "sass_audit.py"


def _load():
    spec = importlib.util.spec_from_file_location("sass_audit_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _listing(rows):
    return "\n".join(
        f"        /*{16 * i:04x}*/   {text} ;   /* 0x0 */" for i, text in enumerate(rows)
    )


def test_loop_stats_picks_the_mma_loop():
    m = _load()
    rows = ["MOV R1, R2", "BAR.SYNC.DEFER_BLOCKING 0x0", "@P0 BRA 0x0",  # a loop without MMA
            "HGMMA.64x32x16.F32 R24, gdesc[UR8], RZ, !UPT", "MEMBAR.ALL.CTA",
            "HGMMA.64x32x16.F32 R24, gdesc[UR8], R24, gsb0", "@!P1 FMNMX.FTZ R1, R2, R3, !PT",
            "BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", "@P0 BRA 0x30", "EXIT"]  # fmt: skip
    stats = m.loop_stats(_listing(rows))
    assert stats["instructions"] == 6
    assert stats["HGMMA"] == 2 and stats["MEMBAR"] == 1 and stats["FMNMX"] == 1
    assert stats["BAR.SYNC"] == 1
    assert stats["shapes"] == {"HGMMA.64x32x16.F32": 2}


def test_loop_stats_skips_slow_path_returns():
    """An mbarrier wait retried out of line after EXIT returns with an unpredicated branch
    to before the loop: not the loop (the ordered FlashAttention consumer's listing)."""
    m = _load()
    rows = ["SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R0", "@!P0 BRA 0xa0",
            "HGMMA.64x128x16.F32 R24, gdesc[UR8], RZ, !UPT", "FMNMX R1, R2, R3, !PT",
            "HGMMA.64x128x16.F32 R24, gdesc[UR8], R24, gsb0", "@P1 BRA 0x20", "EXIT",
            "BRA 0x70", "NOP", "NOP",
            "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R0", "@!P0 BRA 0xa0", "BRA 0x0"]  # fmt: skip
    stats = m.loop_stats(_listing(rows))
    assert stats["instructions"] == 4 and stats["HGMMA"] == 2 and "SYNCS" not in stats


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_mla_loop_barriers_in_sass():
    m = _load()
    if m.cuobjdump() is None:
        pytest.skip("needs cuobjdump")
    new = m.audit("mla", {})["loop"]
    old = m.audit("mla", {"tl.reduce_merged_exchange": False, "tl.nan_propagating_max": True})[
        "loop"
    ]
    assert new["BAR.SYNC"] == 3 and old["BAR.SYNC"] == 10
    assert new.get("FMNMX", 0) >= 16 and "FSEL" not in new and old.get("FSEL", 0) >= 16
    assert new["shapes"] == old["shapes"] == {"HGMMA.64x32x16.F32": 36, "HGMMA.64x256x16.F32": 4}
