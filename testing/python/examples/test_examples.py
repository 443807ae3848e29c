"""The examples run unchanged and match their references (CPU always; CUDA when present)."""

import pytest
import torch
from example_loader import load_example as _load

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def _skip_without(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 136, 72)])
def test_gemm(device, shape):
    _skip_without(device)
    _load("gemm/example_gemm.py").main(*shape, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_fwd(device, causal):
    _skip_without(device)
    _load("flash_attention/example_mha_fwd_bshd.py").main(1, 2, 128, 64, causal, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_M,block_N", [(128, 32), (64, 16)])
def test_flash_attention_fwd_causal_block_m_above_block_n(device, block_M, block_N):
    """Rows fully masked inside a K block (block_M > block_N) give the right answer, no NaN:
    the example's Check_inf step."""
    _skip_without(device)
    ex = _load("flash_attention/example_mha_fwd_bshd.py")
    B, H, S, D = 1, 2, 256, 64
    kernel = ex.flashattn(B, H, S, D, True, block_M=block_M, block_N=block_N, num_stages=1)
    q, k, v = (torch.randn(B, S, H, D, device=device, dtype=torch.float16) for _ in range(3))
    out = kernel(q, k, v)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ex.ref_program(q, k, v, True), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_bwd(device, causal):
    _skip_without(device)
    path = "flash_attention/example_mha_bwd_bshd.py"
    _load(path).main(2, 3, 192, 64, causal, device=device)


def test_flash_attention_bwd_dq_layout():
    """dQ stored in upstream's permuted order, then converted (CPU; see the emulated test)."""
    path = "flash_attention/example_mha_bwd_bshd.py"
    _load(path).main(2, 3, 192, 64, True, device="cpu", dq_layout=True)


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise(device):
    _skip_without(device)
    _load("elementwise/example_elementwise_add.py").main(333, 150, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_softmax(device):
    _skip_without(device)
    _load("softmax/example_softmax.py").main(70, 192, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(64, 512), (70, 300)])
def test_rms_norm(device, shape):
    _skip_without(device)
    _load("norm/example_rms_norm.py").main(*shape, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,split_k", [((256, 256, 1024), 4), ((100, 72, 500), 3)])
def test_gemm_splitk(device, shape, split_k):
    _skip_without(device)
    _load("gemm_splitk/example_gemm_splitk.py").main(*shape, split_k, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(1024, 1024), (100, 300)])
def test_gemv(device, shape):
    _skip_without(device)
    _load("gemv/example_gemv.py").main(*shape, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(256, 256, 256), (100, 130, 70)])
def test_blocksparse_gemm(device, shape):
    _skip_without(device)
    _load("blocksparse_gemm/example_blocksparse_gemm.py").main(*shape, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(256, 256, 256), (100, 72, 96)])
def test_dequant_gemm_w4a16(device, shape):
    _skip_without(device)
    _load("dequantize_gemm/example_dequant_gemm_w4a16.py").main(*shape, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "args",
    [(2, 32, 16, 16, 64, 3, 1, 1, 1), (1, 3, 15, 13, 10, 3, 2, 0, 2)],
    ids=["same", "strided"],
)
def test_convolution(device, args):
    _skip_without(device)
    _load("convolution/example_convolution.py").main(*args, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "args", [(2, 16, 2, 1000, 128, 4), (1, 8, 8, 9, 64, 4)], ids=["gqa", "empty_split"]
)
def test_gqa_decode(device, args):
    _skip_without(device)
    _load("flash_decoding/example_gqa_decode.py").main(*args, device=device)


def test_quickstart_runs(capsys):
    if torch.cuda.is_available():
        pytest.skip("the quickstart's CPU path is what CI can run")
    _load("quickstart.py").main()
    assert "quickstart: OK" in capsys.readouterr().out
