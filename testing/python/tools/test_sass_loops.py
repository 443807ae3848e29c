"""``tilelang.tools.sass_loops``: the main loop of a SASS listing (used by
``benchmark/sass_audit.py`` and the SASS tests) on hand-written listings."""

from tilelang.tools.sass_loops import loops, main_loop, opcode, opcode_counts


def _listing(rows):
    return "\n".join(
        f"        /*{16 * i:04x}*/   {text} ;   /* 0x0 */" for i, text in enumerate(rows)
    )


def test_spin_waits_and_slow_path_returns_are_no_loops():
    rows = ["SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R0",  # 0x00
            "@P0 BRA.U.ANY 0x0",                             # 0x10: a warp's spin on a wait
            "HGMMA.64x64x16.F32 R24, gdesc[UR8], RZ, !UPT",  # 0x20
            "@!P1 BRA 0x20",                                 # 0x30: the loop
            "EXIT",                                          # 0x40
            "BRA 0x0"]  # 0x50: a slow path's return  # fmt: skip
    found = loops(_listing(rows))
    assert found == [rows[2:4]]
    assert main_loop(_listing(rows)) == rows[2:4]


def test_most_mma_then_innermost():
    rows = ["MOV R1, R2",                                    # 0x00
            "HMMA.16816.F32 R4, R8, R12, R4",                # 0x10
            "HMMA.16816.F32 R4, R8, R12, R4",                # 0x20
            "@P0 BRA 0x10",                                  # 0x30: inner, 2 MMAs
            "IADD3 R1, R1, 0x1, RZ",                         # 0x40
            "@P1 BRA 0x0",                                   # 0x50: outer, the same 2
            "HMMA.16816.F32 R4, R8, R12, R4",                # 0x60
            "@P2 BRA 0x60"]  # 0x70: 1 MMA  # fmt: skip
    assert len(loops(_listing(rows))) == 3
    assert main_loop(_listing(rows)) == rows[1:4]


def test_no_loop_and_opcodes():
    assert main_loop(_listing(["MOV R1, R2", "BRA 0x0", "EXIT"])) is None
    assert opcode("@!UPT FMNMX.FTZ R1, R2, R3, !PT") == "FMNMX.FTZ"
    assert opcode("HGMMA.64x32x16.F32 R24, gdesc[UR8], RZ") == "HGMMA.64x32x16.F32"
    counts = opcode_counts(["@P0 FMNMX R1, R2, R3, !PT", "FMNMX R1, R2, R3, !PT", "MOV R1, R2"])
    assert counts == {"FMNMX": 2, "MOV": 1}
