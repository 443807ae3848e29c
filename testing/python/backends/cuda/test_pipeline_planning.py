"""plan_pipelines: multi-buffering, cp.async prologue/steady state, commit/wait counts."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_kernels import lower_mma, make  # noqa: E402


def _planned(stages):
    """The GEMM after the CUDA pipeline's stages up to pipeline planning (mma.sync path)."""
    from tilelang.backends.cuda.pipeline import STAGES, CudaLowering
    from tilelang.engine.pass_config import build_options

    func = make(M=256, N=256, K=256, stages=stages)
    configs = {
        "tl.disable_wgmma": True,
        "tl.mma_split_pipeline": False,
        "tl.disable_tma_lower": True,
    }
    state = CudaLowering("sm_90", build_options(configs))
    names = [name for name, _ in STAGES]
    for _, stage in STAGES[: names.index("pipeline_planning") + 1]:
        func = stage(func, state)
    return func, state.ctx


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_structure(stages):
    func, ctx = _planned(stages)
    text = str(func)
    assert f"T.Tensor(({stages}, 128, 32)" in text and f"T.Tensor(({stages}, 32, 128)" in text
    copies_per_issue = 8  # (128x32 + 32x128) fp16 / 8 per vector / 128 threads
    issues = stages if stages > 1 else 1  # prologue S-1 + steady state 1
    assert text.count("tl::cp_async_gs<16>") == copies_per_issue * issues  # no predicates
    assert text.count("tl::cp_async_commit") == issues
    if stages > 1:
        assert f"tl::cp_async_wait<{stages - 2}>" in text
    assert "tl.copy" not in text.split("for k")[1].split("tl.gemm")[0]
    assert any(str(getattr(v, "name", "")).endswith("_mb") for v in ctx.layout_map)


def test_num_stages_zero_is_untouched():
    func, _ = _planned(0)
    assert "cp_async" not in str(func)


@pytest.mark.parametrize("stages", [2, 3])
def test_lowered_has_one_barrier_per_iteration(stages):
    text = str(lower_mma(make(M=256, N=256, K=256, stages=stages)))
    loop = text.split("for k")[1]
    assert loop.count("__syncthreads") == 1
