"""Every ``@tilelang.jit`` kernel of ``examples/`` at a small shape, with whether it calls T.gemm
(shared by the ROCm and Metal backend tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from example_loader import load_example  # noqa: E402


def example_kernels():
    """(id, example path, kernel name, args, uses_gemm) of each example kernel."""
    yield "gemm", "gemm/example_gemm.py", "matmul", (129, 257, 33), True
    yield (
        "elementwise",
        "elementwise/example_elementwise_add.py",
        "elementwise_add",
        (100, 70),
        False,
    )
    yield (
        "elementwise_direct",
        "elementwise/example_elementwise_add.py",
        "elementwise_add_direct",
        (100, 70),
        False,
    )
    yield "softmax", "softmax/example_softmax.py", "softmax", (70, 192), False
    yield "gemv", "gemv/example_gemv.py", "gemv", (100, 300), False
    yield "rms_norm", "norm/example_rms_norm.py", "rms_norm", (70, 300), False
    yield "rms_norm_splitk", "norm/example_rms_norm.py", "rms_norm_splitk", (70, 300), False
    yield (
        "gemm_splitk",
        "gemm_splitk/example_gemm_splitk.py",
        "matmul_splitk",
        (100, 72, 500, 64, 64, 32, 3),
        True,
    )
    yield (
        "blocksparse_gemm",
        "blocksparse_gemm/example_blocksparse_gemm.py",
        "blocksparse_matmul",
        (100, 130, 70),
        True,
    )
    yield (
        "dequant_gemm",
        "dequantize_gemm/example_dequant_gemm_w4a16.py",
        "dequant_matmul",
        (100, 72, 96),
        True,
    )
    yield (
        "convolution",
        "convolution/example_convolution.py",
        "convolution",
        (1, 3, 15, 13, 10, 3, 3, 2, 0, 2),
        True,
    )
    yield (
        "gqa_decode_split",
        "flash_decoding/example_gqa_decode.py",
        "gqa_decode_split",
        (1, 16, 2, 200, 64, 4),
        True,
    )
    yield (
        "gqa_combine",
        "flash_decoding/example_gqa_decode.py",
        "combine_splits",
        (1, 16, 4, 64),
        False,
    )
    yield (
        "mha_fwd",
        "flash_attention/example_mha_fwd_bshd.py",
        "flashattn",
        (1, 2, 128, 64, False),
        True,
    )
    yield (
        "mha_fwd_causal",
        "flash_attention/example_mha_fwd_bshd.py",
        "flashattn",
        (1, 2, 128, 64, True),
        True,
    )
    yield (
        "mha_bwd",
        "flash_attention/example_mha_bwd_bshd.py",
        "flashattn_bwd",
        (1, 2, 128, 32, False),
        True,
    )
    yield (
        "mha_bwd_post",
        "flash_attention/example_mha_bwd_bshd.py",
        "flashattn_bwd_postprocess",
        (1, 2, 128, 32),
        False,
    )


def example_tir(path: str, kernel: str, args):
    """The traced TIRx function of one example kernel."""
    return getattr(load_example(path), kernel).get_tir(*args)
