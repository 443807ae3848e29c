"""The CPU backend compiles for the host CPU (``TILELANG_CPU_MCPU`` overrides it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.backends.cpu import pipeline


def test_host_target_names_the_cpu(monkeypatch):
    monkeypatch.delenv("TILELANG_CPU_MCPU", raising=False)
    name = pipeline._host_cpu_name()
    target = pipeline.host_target()
    assert target["kind"] == "llvm"
    assert target.get("mcpu", "") == name
    monkeypatch.setenv("TILELANG_CPU_MCPU", "generic")
    assert pipeline.host_target() == {"kind": "llvm"}
    monkeypatch.setenv("TILELANG_CPU_MCPU", "x86-64-v2")
    assert pipeline.host_target() == {"kind": "llvm", "mcpu": "x86-64-v2"}


def _gemm(M, N, K, dtype):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), dtype)
            B_s = T.alloc_shared((32, 64), dtype)
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    return main


@pytest.mark.parametrize("mcpu", ["generic", None])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_gemm_matches_for_baseline_and_host_cpu(monkeypatch, randn, mcpu, dtype):
    if mcpu is None:
        monkeypatch.delenv("TILELANG_CPU_MCPU", raising=False)
    else:
        monkeypatch.setenv("TILELANG_CPU_MCPU", mcpu)
    M, N, K = 100, 72, 80  # not tile multiples
    a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
    c = torch.empty(M, N, dtype=getattr(torch, dtype))
    tilelang.compile(_gemm(M, N, K, dtype), target="cpu")(a, b, c)
    ref = a.double().numpy() @ b.double().numpy()
    np.testing.assert_allclose(c.double().numpy(), ref, rtol=2e-2, atol=1e-1)
