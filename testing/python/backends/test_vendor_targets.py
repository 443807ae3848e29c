"""Every example kernel through the ROCm and Metal targets: it either compiles (HIP / MSL
source) or fails while lowering with "... is not supported on the <target> target" -- never a
code-generation traceback. Also the per-op refusals name the user's line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "rocm"))
from example_kernels import example_kernels, example_tir  # noqa: E402
from vendor_kernels import printing  # noqa: E402

import tilelang  # noqa: E402
from tilelang import errors  # noqa: E402
from tilelang.backends.metal import rules as _metal_rules  # noqa: E402, F401
from tilelang.backends.rocm import rules as _rocm_rules  # noqa: E402, F401
from tilelang.ops import registry  # noqa: E402

EXAMPLES = list(example_kernels())
#: examples a target refuses, and why (everything else must compile)
EXPECTED_REFUSALS = {("metal", "mha_bwd"): "threadgroup memory of 41984 bytes"}


@pytest.mark.parametrize("target", ["hip", "metal"])
@pytest.mark.parametrize("kid,path,kernel,args,uses_gemm", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_compiles_or_is_refused(target, kid, path, kernel, args, uses_gemm, monkeypatch):
    # source generation only: hipcc (when installed) is exercised by test_rocm_codegen.py
    monkeypatch.setattr("tilelang.backends.rocm.build.find_toolchain", lambda: None)
    func = example_tir(path, kernel, args)
    kind = "rocm" if target == "hip" else target
    refusal = EXPECTED_REFUSALS.get((kind, kid))
    if refusal is None:
        lowered = tilelang.lower(func, target=target)
        marker = "__global__" if kind == "rocm" else "kernel void"
        assert marker in lowered.stages["source"]
    else:
        with pytest.raises(
            errors.CompileError, match=f"{refusal}.* is not supported on the {kind} target"
        ):
            tilelang.lower(func, target=target)


@pytest.mark.parametrize("target", ["rocm", "metal"])
def test_op_without_rule_names_the_user_line(target, monkeypatch):
    # T.print has a ROCm rule (printf) and no Metal one; take the ROCm rule away to check
    # the message of an op a target lacks on both
    monkeypatch.delitem(registry._LOWERINGS, ("print", "rocm"), raising=False)
    with pytest.raises(errors.CompileError) as info:
        tilelang.lower(printing.get_tir(16), target=target)
    message = str(info.value)
    assert f"T.print is not supported on the {target} target" in message
    assert "vendor_kernels.py:" in message
