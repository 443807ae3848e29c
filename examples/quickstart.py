"""Quickstart: a GEMM and a softmax through ``@tilelang.jit``, checked against torch.

Runs on CUDA when a GPU is present, else on the CPU backend.
"""

import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])

from gemm.example_gemm import matmul  # noqa: E402
from softmax.example_softmax import softmax  # noqa: E402


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    M, N, K = (4096, 4096, 4096) if device == "cuda" else (512, 512, 256)

    t0 = time.perf_counter()
    gemm = matmul(M, N, K)
    compile_s = time.perf_counter() - t0
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = gemm(a, b)
    ref = a.double() @ b.double()
    rel = ((c.double() - ref).norm() / ref.norm()).item()
    print(
        f"[{device}] gemm {M}x{N}x{K} fp16: relative error {rel:.2e} (compiled in {compile_s:.2f} s)"
    )
    assert rel < 1e-2, rel
    ms = gemm.get_profiler().do_bench(
        warmup=3 if device == "cpu" else 25, rep=5 if device == "cpu" else 100
    )
    print(f"[{device}] gemm: {ms:.3f} ms, {2 * M * N * K / ms / 1e9:.4g} TFLOP/s")

    x = torch.randn(1000, 512, device=device)
    y = softmax(1000, 512)(x)
    err = (y.double() - torch.softmax(x.double(), dim=1)).abs().max().item()
    print(f"[{device}] softmax 1000x512: max abs error {err:.2e}")
    assert err < 1e-5, err
    print("quickstart: OK")


if __name__ == "__main__":
    main()
